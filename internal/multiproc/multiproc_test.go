package multiproc_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

const roleEnv = "NORN_MULTIPROC_ROLE"

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		if err := child(os.Getenv(roleEnv), os.Getenv("NORN_MULTIPROC_URL")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	code := m.Run()
	testutil.StopPostgres()
	os.Exit(code)
}

// consumer takes n messages from the competing channel "jobs" and returns
// their sum.
var consumer = actor.Workflow("consumer", func(ctx *actor.Context, n int) (int, error) {
	if err := ctx.Subscribe("jobs", mailbox.Competing); err != nil {
		return 0, err
	}
	sum := 0
	for i := 0; i < n; i++ {
		m, err := actor.Receive[int](ctx, mailbox.OnChannel("jobs"))
		if err != nil {
			return 0, err
		}
		sum += m.Value
	}
	return sum, nil
})

// slow runs activities that take a while, so that a kill lands mid-flight.
var slowStep = actor.Activity("slow", func(ctx context.Context, n int) (int, error) {
	time.Sleep(50 * time.Millisecond)
	return n + 1, nil
})

var slow = actor.Workflow("slow", func(ctx *actor.Context, n int) (int, error) {
	for i := 0; i < 4; i++ {
		var err error
		if n, err = slowStep.Run(ctx, n); err != nil {
			return 0, err
		}
	}
	return n, nil
})

func startNode(ctx context.Context, url, node string) (*actor.System, persistence.Store, error) {
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		return nil, nil, err
	}
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(consumer, slow), NodeID: node,
		LeaseTTL: time.Second, Logger: testutil.Logger()})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return sys, st, nil
}

// child runs a node in this process until killed (or until stdin closes).
func child(role, url string) error {
	ctx := context.Background()
	sys, _, err := startNode(ctx, url, "child")
	if err != nil {
		return err
	}
	switch role {
	case "consumers":
		for i := 0; i < 3; i++ {
			if _, err := actor.Spawn(ctx, sys, consumer, 10, actor.WithID(fmt.Sprintf("c-%d", i))); err != nil {
				return err
			}
		}
	case "slow":
		for i := 0; i < 40; i++ {
			if _, err := actor.Spawn(ctx, sys, slow, i, actor.WithID(fmt.Sprintf("s-%02d", i))); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the parent's end closes stdin
	return nil
}

type proc struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
}

func startChild(t *testing.T, role, url string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "NORN_MULTIPROC_URL="+url)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: in}
	t.Cleanup(func() { p.kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("child did not start: %q, %v", line, err)
	}
	return p
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// Messages published in one process reach instances owned by another, at
// once (NOTIFY), each consumed once.
func TestPublishReachesOtherProcess(t *testing.T) {
	url := testutil.PostgresURL(t)
	c := startChild(t, "consumers", url)
	defer c.kill()
	ctx := testutil.Ctx(t, 60*time.Second)
	sys, st, err := startNode(ctx, url, "parent")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer sys.Stop(context.Background())
	want := 0
	for i := 1; i <= 30; i++ {
		want += i
		if _, err := sys.Publish(ctx, "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for i := 0; i < 3; i++ {
		pid := actor.PID(fmt.Sprintf("c-%d", i))
		inst, err := sys.AwaitDone(ctx, pid)
		if err != nil || inst.Status != persistence.StatusCompleted {
			t.Fatalf("%s: %+v, %v", pid, inst, err)
		}
		if inst.Node != "" {
			t.Fatalf("%s still leased by %s", pid, inst.Node)
		}
		n, err := actor.Await(ctx, sys, consumer, pid)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != want {
		t.Fatalf("consumers summed %d, want %d (a message lost or consumed twice)", total, want)
	}
}

// kill -9 of one process: another finishes its instances, with no activity
// result recorded twice.
func TestKill9OtherProcessTakesOver(t *testing.T) {
	url := testutil.PostgresURL(t)
	c := startChild(t, "slow", url)
	time.Sleep(150 * time.Millisecond)
	c.kill()
	ctx := testutil.Ctx(t, 60*time.Second)
	sys, st, err := startNode(ctx, url, "parent")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer sys.Stop(context.Background())
	for i := 0; i < 40; i++ {
		pid := actor.PID(fmt.Sprintf("s-%02d", i))
		got, err := actor.Await(ctx, sys, slow, pid)
		if err != nil || got != i+4 {
			t.Fatalf("%s = %d, %v", pid, got, err)
		}
		hist, _ := st.History(ctx, string(pid), 0)
		seen := map[string]bool{}
		for _, e := range hist {
			if e.Kind == "activity" {
				if seen[e.Ref] {
					t.Fatalf("%s: %s recorded twice", pid, e.Ref)
				}
				seen[e.Ref] = true
			}
		}
		if len(seen) != 4 {
			t.Fatalf("%s: %d activity results", pid, len(seen))
		}
	}
}

// PostgreSQL restarted mid-run: the runtime reconnects and finishes.
func TestPostgresRestartMidRun(t *testing.T) {
	url := testutil.PostgresURL(t)
	ctx := testutil.Ctx(t, 90*time.Second)
	sys, st, err := startNode(ctx, url, "solo")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer sys.Stop(context.Background())
	var pids []actor.PID
	for i := 0; i < 20; i++ {
		pid, err := actor.Spawn(ctx, sys, slow, i)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	time.Sleep(60 * time.Millisecond)
	testutil.RestartPostgres(t)
	for i, pid := range pids {
		var got int
		var err error
		for {
			got, err = actor.Await(ctx, sys, slow, pid)
			if err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // Await itself may hit the outage
		}
		if err != nil || got != i+4 {
			t.Fatalf("%s = %d, %v", pid, got, err)
		}
	}
}

// A bad URL or an unreachable server fails Start's store fast, with the
// target named.
func TestUnreachableFailsFast(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var done atomic.Bool
	go func() {
		time.Sleep(25 * time.Second)
		if !done.Load() {
			panic("postgres.Open hung")
		}
	}()
	for _, url := range []string{"postgres://nobody@127.0.0.1:1/db?connect_timeout=2", "postgres://%zz"} {
		_, err := postgres.Open(ctx, url, postgres.Options{})
		if err == nil {
			t.Fatalf("Open(%q) succeeded", url)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Open(%q) waited for the deadline: %v", url, err)
		}
	}
	done.Store(true)
}
