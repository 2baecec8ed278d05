package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresURLEnv names the environment variable that points the tests at an
// existing PostgreSQL server instead of a throw-away one. Its value must be a
// postgres:// URL of a role that may CREATE and DROP databases.
const PostgresURLEnv = "NORN_TEST_POSTGRES_URL"

const (
	// readyTimeout bounds how long we wait for a freshly started server to
	// accept connections.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds how long we wait for the server to exit after
	// asking it to.
	stopTimeout = 30 * time.Second
	// tempPrefix prefixes the temp directories of throw-away servers, so
	// that directories left behind by killed test binaries can be found.
	tempPrefix = "norn-pgtest-"
	// ownerFile, inside a temp directory, holds the PID of the test binary
	// that owns it.
	ownerFile = "owner.pid"
)

const installHint = "install PostgreSQL (Debian/Ubuntu: apt-get install postgresql) " +
	"or set " + PostgresURLEnv + " to the URL of a server where the tests may create databases"

// state is the per-test-binary PostgreSQL state. Everything is guarded by mu;
// the server is started at most once (lazily, by the first caller that needs
// it) and stopped by StopPostgres.
var state struct {
	mu       sync.Mutex
	resolved bool   // the fields below have been set
	external string // admin URL from PostgresURLEnv, if set
	skip     string // reason to skip tests needing PostgreSQL
	err      error  // the throw-away server failed to start
	srv      *server
	stopped  bool // StopPostgres was called
}

// PostgresURL returns the URL of a fresh, empty database dedicated to the
// calling test. The database is created with CREATE DATABASE under a unique
// name and dropped when the test finishes (tb.Cleanup); close every
// connection and pool to it in a cleanup registered after calling
// PostgresURL (cleanups run last-registered first), although leftover
// connections are terminated by the drop anyway.
//
// The server is the one named by NORN_TEST_POSTGRES_URL if that is set, or
// else a throw-away server that is started from the system's PostgreSQL
// binaries the first time it is needed by this test binary. If neither is
// available the test is skipped.
//
// Packages whose tests call PostgresURL must stop the throw-away server at
// the end of the test binary from TestMain:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		testutil.StopPostgres()
//		os.Exit(code)
//	}
//
// (If they forget, the server still dies with the test binary, but its
// temporary data directory stays around until a later run cleans it up.)
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	admin := adminURL(tb)

	name := databaseName(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := execAdmin(ctx, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("testutil: creating database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := dropDatabase(ctx, admin, name); err != nil {
			tb.Errorf("testutil: dropping database %s: %v", name, err)
		}
	})

	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("testutil: parsing PostgreSQL URL: %v", err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// PrivatePostgres starts a throw-away PostgreSQL server for the calling
// test alone, with the given server settings ("name=value", as for
// postgres -c) on top of the usual ones, and returns the URL of its
// "postgres" database as the superuser. The server is stopped and its data
// removed when the test ends. It is for tests that need a server set up
// unlike the shared one (a small lock table, say) or that would disturb
// the other tests on it; starting one takes a second or two. The test is
// skipped where no PostgreSQL server binaries are found, even if
// NORN_TEST_POSTGRES_URL is set.
func PrivatePostgres(tb testing.TB, settings ...string) string {
	tb.Helper()
	srv, skip, err := startServer(tb, settings...)
	switch {
	case skip != "":
		tb.Skipf("testutil: cannot start a PostgreSQL server: %s; to run this test, install PostgreSQL (Debian/Ubuntu: apt-get install postgresql)", skip)
	case err != nil:
		tb.Fatalf("testutil: starting a private PostgreSQL server: %v", err)
	}
	tb.Cleanup(func() {
		if err := srv.stop("immediate"); err != nil {
			tb.Logf("testutil: stopping the private PostgreSQL server: %v", err)
		}
		if err := os.RemoveAll(srv.baseDir); err != nil {
			tb.Logf("testutil: removing %s: %v", srv.baseDir, err)
		}
	})
	return srv.adminURL()
}

// PostgresAdminURL returns a URL of the PostgreSQL server used by
// PostgresURL that connects as the administrative role: for the throw-away
// server that is the superuser "postgres" and the database "postgres"; with
// NORN_TEST_POSTGRES_URL it is that URL, unchanged. Tests must not leave
// anything behind in the database it names.
func PostgresAdminURL(tb testing.TB) string {
	tb.Helper()
	return adminURL(tb)
}

// RestartPostgres stops the throw-away PostgreSQL server (fast shutdown:
// open connections are terminated) and starts it again on the same port with
// the same data directory, so URLs returned earlier stay valid and committed
// data is kept. Connections that were open during the restart are broken.
//
// The test is skipped when NORN_TEST_POSTGRES_URL is set, since that server
// is not ours to restart. A restart affects every test of the binary that
// uses PostgreSQL, so tests calling RestartPostgres must not run in parallel
// with other such tests.
func RestartPostgres(tb testing.TB) {
	tb.Helper()
	adminURL(tb) // resolves the server, starting it if necessary; may skip

	state.mu.Lock()
	defer state.mu.Unlock()
	if state.external != "" {
		tb.Skipf("testutil: RestartPostgres needs the throw-away PostgreSQL server, but %s is set", PostgresURLEnv)
	}
	srv := state.srv
	if srv == nil || state.stopped {
		tb.Fatalf("testutil: RestartPostgres: no throw-away PostgreSQL server is running")
	}
	if err := srv.stop("fast"); err != nil {
		tb.Fatalf("testutil: RestartPostgres: stopping PostgreSQL: %v", err)
	}
	if err := srv.start(); err != nil {
		// The server is gone for good; make later callers fail fast.
		state.err = fmt.Errorf("restarting PostgreSQL: %w", err)
		tb.Fatalf("testutil: RestartPostgres: starting PostgreSQL again: %v", err)
	}
	tb.Logf("testutil: restarted PostgreSQL on 127.0.0.1:%d", srv.port)
}

// StopPostgres stops the throw-away PostgreSQL server, if this test binary
// started one, and removes its data directory. Call it from TestMain after
// m.Run (see PostgresURL). It is safe to call more than once, and when no
// server was started. After StopPostgres, PostgresURL fails the test.
func StopPostgres() {
	state.mu.Lock()
	defer state.mu.Unlock()
	state.stopped = true
	if state.srv == nil {
		return
	}
	if err := state.srv.stop("immediate"); err != nil {
		slog.Warn("testutil: stopping PostgreSQL", "err", err)
	}
	if err := os.RemoveAll(state.srv.baseDir); err != nil {
		slog.Warn("testutil: removing PostgreSQL temp directory", "dir", state.srv.baseDir, "err", err)
	}
	state.srv = nil
}

// adminURL resolves which server to use (starting the throw-away one on first
// use) and returns its admin URL, skipping or failing tb if there is none.
func adminURL(tb testing.TB) string {
	tb.Helper()
	state.mu.Lock()
	defer state.mu.Unlock()

	if state.stopped {
		tb.Fatalf("testutil: PostgreSQL used after StopPostgres (call StopPostgres only after m.Run in TestMain)")
	}
	if !state.resolved {
		state.resolved = true
		if env := os.Getenv(PostgresURLEnv); env != "" {
			if !strings.HasPrefix(env, "postgres://") && !strings.HasPrefix(env, "postgresql://") {
				state.err = fmt.Errorf("%s must be a postgres:// URL", PostgresURLEnv)
			} else {
				state.external = env
			}
		} else {
			state.srv, state.skip, state.err = startServer(tb)
		}
	}
	switch {
	case state.skip != "":
		tb.Skipf("testutil: no PostgreSQL available: %s; to run this test, %s", state.skip, installHint)
	case state.err != nil:
		tb.Fatalf("testutil: PostgreSQL: %v", state.err)
	case state.external != "":
		return state.external
	}
	return state.srv.adminURL()
}

// databaseName returns a unique, valid database name that hints at the test.
func databaseName(tb testing.TB) string {
	var b strings.Builder
	b.WriteString("norn_")
	for _, r := range strings.ToLower(tb.Name()) {
		if b.Len() >= 40 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else if !strings.HasSuffix(b.String(), "_") {
			b.WriteByte('_')
		}
	}
	if !strings.HasSuffix(b.String(), "_") {
		b.WriteByte('_')
	}
	// Random suffix: unique across tests, and across test binaries sharing
	// the server given by PostgresURLEnv.
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	b.WriteString(hex.EncodeToString(rnd[:]))
	return b.String()
}

func execAdmin(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

func dropDatabase(ctx context.Context, admin, name string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return err
	}
	sql := "DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize()
	if version >= 130000 {
		// Terminate connections the test left open rather than failing.
		sql += " WITH (FORCE)"
	}
	_, err = conn.Exec(ctx, sql)
	return err
}

// server is a throw-away PostgreSQL server owned by this test binary.
//
// The postmaster runs as a direct child process of the test binary, rather
// than being daemonized with "pg_ctl start", so that on Linux it can be given
// a parent-death signal (SIGKILL): if the test binary dies for any reason,
// including kill -9 or a test timeout panic, the kernel kills the postmaster,
// and its backends exit by themselves once they notice the postmaster is
// gone. A server started by "pg_ctl start" would be re-parented to init and
// keep running forever. StopPostgres stops it the regular way, with
// "pg_ctl stop -m immediate".
//
// PostgreSQL refuses to run as root. When the tests run as root (as in CI),
// initdb and pg_ctl are run through "runuser -u postgres --", and the
// postmaster is started with the postgres user's credentials set directly on
// the child process (SysProcAttr.Credential): runuser would stay in between
// as the parent of the postmaster, and the parent-death signal would then
// only kill runuser.
type server struct {
	binDir  string
	baseDir string // temp directory holding everything below; removed on stop
	dataDir string
	logPath string
	port    int
	runAs   *osUser // nil: run as the current user
	// settings are server settings ("name=value") on top of the usual
	// ones (see PrivatePostgres).
	settings []string

	cmd     *exec.Cmd
	done    chan struct{} // closed once the postmaster has exited
	waitErr error         // cmd.Wait result; valid after done is closed
}

// osUser identifies the unprivileged user the server runs as when we are root.
type osUser struct {
	name     string
	uid, gid uint32
}

func (s *server) adminURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// startServer creates and starts the throw-away server. It returns a skip
// reason if this machine cannot run one.
func startServer(tb testing.TB, settings ...string) (srv *server, skip string, err error) {
	tb.Helper()
	binDir := findBinDir()
	if binDir == "" {
		return nil, "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found on PATH or under /usr/lib/postgresql/*/bin", nil
	}

	var runAs *osUser
	tmpRoot := os.TempDir()
	if os.Geteuid() == 0 {
		if runtime.GOOS != "linux" {
			return nil, "running as root, and PostgreSQL refuses to run as root (dropping to another user is only supported on Linux)", nil
		}
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, "running as root, and PostgreSQL refuses to run as root, but there is no 'postgres' user to run it as (" + err.Error() + ")", nil
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, "", fmt.Errorf("parsing ids of user postgres: %w", err)
		}
		runAs = &osUser{name: "postgres", uid: uint32(uid), gid: uint32(gid)}
		// The postgres user must be able to reach the directory, so do not
		// follow a TMPDIR that may point somewhere private to root.
		tmpRoot = "/tmp"
	}

	removeStaleDirs(tb, tmpRoot)

	baseDir, err := os.MkdirTemp(tmpRoot, tempPrefix)
	if err != nil {
		return nil, "", err
	}
	srv = &server{
		binDir:   binDir,
		baseDir:  baseDir,
		dataDir:  filepath.Join(baseDir, "data"),
		logPath:  filepath.Join(baseDir, "postgres.log"),
		runAs:    runAs,
		settings: settings,
	}
	fail := func(err error) (*server, string, error) {
		_ = srv.stop("immediate")
		os.RemoveAll(baseDir)
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(baseDir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail(err)
	}
	if runAs != nil {
		if err := os.Chown(baseDir, int(runAs.uid), int(runAs.gid)); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(baseDir, 0o700); err != nil {
		return fail(err)
	}

	initdb := srv.command("initdb", "-D", srv.dataDir, "--auth=trust", "-U", "postgres",
		"--no-locale", "--encoding=UTF8", "--no-sync", "--no-instructions")
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w\n%s", err, out))
	}

	// Pick a free port. Another process may grab it before PostgreSQL binds
	// it; in that case start again with another port.
	for attempt := 1; ; attempt++ {
		if srv.port, err = freePort(); err != nil {
			return fail(err)
		}
		err = srv.start()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "could not bind") {
			return fail(err)
		}
	}
	tb.Logf("testutil: started throw-away PostgreSQL (%s) on 127.0.0.1:%d, data in %s", binDir, srv.port, srv.dataDir)
	return srv, "", nil
}

// command returns a command running the named PostgreSQL program as the
// server's user, for one-shot programs (initdb, pg_ctl).
func (s *server) command(program string, args ...string) *exec.Cmd {
	path := filepath.Join(s.binDir, program)
	var cmd *exec.Cmd
	if s.runAs == nil {
		cmd = exec.Command(path, args...)
	} else if runuser, err := exec.LookPath("runuser"); err == nil {
		cmd = exec.Command(runuser, append([]string{"-u", s.runAs.name, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
		cmd.SysProcAttr = sysProcAttr(s.runAs, false)
	}
	cmd.Dir = s.baseDir // the current directory may not be accessible to postgres
	return cmd
}

// start starts the postmaster on s.port and waits until it accepts
// connections.
func (s *server) start() error {
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own copy
	logStart, _ := logFile.Seek(0, io.SeekEnd)

	args := []string{"-D", s.dataDir,
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + s.baseDir,
		"-c", "max_connections=200",
		// A throw-away server needs no durability against a power cut or an
		// OS crash: skipping the flushes to disk keeps the tests from
		// waiting on the disk. Committed data still survives the server's
		// own restarts (RestartPostgres stops it with a fast shutdown,
		// which writes everything out first).
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
	}
	for _, kv := range s.settings {
		args = append(args, "-c", kv) // the last of a name wins
	}
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	cmd.Dir = s.baseDir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr(s.runAs, true)
	if cmd.SysProcAttr == nil && s.runAs != nil {
		return errors.New("running PostgreSQL as another user is only supported on Linux; run the tests as a non-root user")
	}

	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		// The parent-death signal is tied to the thread that forked the
		// child, not to the process: pin this goroutine to its thread for
		// the postmaster's whole life, so that the Go runtime cannot retire
		// that thread (which would kill the server) while it runs. The
		// thread is never unlocked and exits with the goroutine.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.waitErr = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.cmd, s.done = cmd, done

	if err := s.waitReady(); err != nil {
		s.kill()
		return fmt.Errorf("%w\npostgres log:\n%s", err, s.logTail(logStart))
	}
	return nil
}

// waitReady waits until the server accepts connections.
func (s *server) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited during startup: %v", s.waitErr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.adminURL())
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(context.Background())
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within %v: %w", readyTimeout, err)
		}
		select {
		case <-s.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop stops the postmaster with pg_ctl in the given shutdown mode ("fast"
// or "immediate") and waits for it to exit, killing it if that fails.
func (s *server) stop(mode string) error {
	if s.cmd == nil {
		return nil
	}
	defer func() { s.cmd = nil }()
	select {
	case <-s.done:
		return nil // already gone
	default:
	}
	var err error
	out, cmdErr := s.command("pg_ctl", "stop", "-D", s.dataDir, "-m", mode, "-w",
		"-t", strconv.Itoa(int(stopTimeout/time.Second))).CombinedOutput()
	if cmdErr != nil {
		err = fmt.Errorf("pg_ctl stop: %w: %s", cmdErr, strings.TrimSpace(string(out)))
		s.cmd.Process.Kill()
	}
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		err = errors.Join(err, errors.New("postgres did not exit; killed it"))
		s.kill()
	}
	return err
}

// kill kills the postmaster and waits for it to exit.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// logTail returns the end of what the server logged since offset from.
func (s *server) logTail(from int64) string {
	const max = 8 << 10
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if from >= 0 && from <= int64(len(data)) {
		data = data[from:]
	}
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// findBinDir returns the newest directory holding initdb, pg_ctl and
// postgres: the one of initdb on PATH, else /usr/lib/postgresql/<version>/bin
// (Debian, Ubuntu) or /usr/pgsql-<version>/bin (RHEL), newest version first.
// It returns "" if there is none.
func findBinDir() string {
	complete := func(dir string) bool {
		for _, p := range []string{"initdb", "pg_ctl", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); complete(dir) {
			return dir
		}
		if real, err := filepath.EvalSymlinks(p); err == nil && complete(filepath.Dir(real)) {
			return filepath.Dir(real)
		}
	}
	type candidate struct {
		dir     string
		version []int
	}
	var cands []candidate
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		matches, _ := filepath.Glob(pattern)
		for _, dir := range matches {
			v := filepath.Base(filepath.Dir(dir))
			v = strings.TrimPrefix(v, "pgsql-")
			var version []int
			for _, part := range strings.Split(v, ".") {
				n, err := strconv.Atoi(part)
				if err != nil {
					break
				}
				version = append(version, n)
			}
			cands = append(cands, candidate{dir, version})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return slices.Compare(b.version, a.version) })
	for _, c := range cands {
		if complete(c.dir) {
			return c.dir
		}
	}
	return ""
}

// removeStaleDirs removes the temp directories of throw-away servers whose
// test binary is gone (killed before it could clean up) and whose postmaster
// is not running.
func removeStaleDirs(tb testing.TB, root string) {
	tb.Helper()
	dirs, _ := filepath.Glob(filepath.Join(root, tempPrefix+"*"))
	for _, dir := range dirs {
		owner, err := readPID(filepath.Join(dir, ownerFile))
		if err != nil || processAlive(owner) {
			continue // not ours to judge, or still in use
		}
		if pm, err := readPID(filepath.Join(dir, "data", "postmaster.pid")); err == nil && processAlive(pm) {
			continue
		}
		removeStaleSharedMemory(filepath.Join(dir, "data"))
		if err := os.RemoveAll(dir); err == nil {
			tb.Logf("testutil: removed stale PostgreSQL temp directory %s", dir)
		}
	}
}

// readPID reads the PID on the first line of a file.
func readPID(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err == nil && pid <= 0 {
		err = fmt.Errorf("bad pid %d", pid)
	}
	return pid, err
}
