package cli_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/internal/clusternode"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
	"github.com/nornlabs/norn/supervisor"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// workflowsEnv makes the test binary act as a program that embeds the
// command with its workflows: "v1" the ones the instances ran, "v2" a
// changed order workflow that no longer replays their histories.
const workflowsEnv = "NORN_CLI_TEST_WORKFLOWS"

// nornBin is the norn command built from cmd/norn for this test run.
var nornBin string

func TestMain(m *testing.M) {
	testutil.RunChildRole(map[string]func() int{"node": nodeRole})
	switch os.Getenv(workflowsEnv) {
	case "v1":
		os.Exit(cli.Main(os.Args[1:], orderFlow, batchFlow, itemFlow))
	case "v2":
		os.Exit(cli.Main(os.Args[1:], orderFlowV2))
	case "query":
		os.Exit(cli.Main(os.Args[1:], tallyFlow))
	}
	flag.Parse()
	dir, err := os.MkdirTemp("", "norn-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	nornBin = filepath.Join(dir, "norn")
	build := exec.Command("go", "build", "-o", nornBin, "github.com/nornlabs/norn/cmd/norn")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build cmd/norn: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	testutil.StopPostgres()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// nodeRole runs a cluster node (internal/clusternode) on the store
// NODE_STORE until SIGTERM, for members to find.
func nodeRole() int {
	ctx := context.Background()
	cfg := clusternode.Config{Store: os.Getenv("NODE_STORE"), NodeID: os.Getenv("NODE_ID"), Out: os.Stdout, Logger: testutil.Logger()}
	if s := os.Getenv("NODE_SEEDS"); s != "" {
		cfg.Seeds = []string{s}
	}
	if dir := os.Getenv("NODE_TLS_DIR"); dir != "" {
		var err error
		cfg.RemoteServerTLS, cfg.RemoteClientTLS, err = cluster.MutualTLS(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem"))
		if err != nil {
			return testutil.ChildFail("tls: %v", err)
		}
	}
	if s := os.Getenv("NODE_RECOVERY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return testutil.ChildFail("NODE_RECOVERY: %v", err)
		}
		cfg.RecoveryInterval = d
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	n, err := clusternode.Start(ctx, cfg)
	if err != nil {
		return testutil.ChildFail("start: %v", err)
	}
	<-sigs
	stop, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := n.Close(stop); err != nil {
		return testutil.ChildFail("stop: %v", err)
	}
	return 0
}

// The workflows whose instances the tests inspect.

type Order struct {
	Item string `json:"item"`
	Qty  int    `json:"qty"`
}

type Receipt struct {
	Total int `json:"total"`
}

type Approval struct {
	OK bool `json:"ok"`
}

var price = actor.Activity("price", func(_ context.Context, o Order) (int, error) { return 5 * o.Qty, nil })

var reserve = actor.Activity("reserve", func(_ context.Context, o Order) (int, error) {
	return 0, supervisor.Terminal(errors.New("out of stock"))
})

// orderFlow prices the order; "none" fails, more than one item waits for
// an Approval (listening to the news channel meanwhile).
var orderFlow = actor.Workflow("order", func(ctx *actor.Context, o Order) (Receipt, error) {
	total, err := price.Run(ctx, o)
	if err != nil {
		return Receipt{}, err
	}
	if o.Item == "none" {
		_, err := reserve.Run(ctx, o)
		return Receipt{}, err
	}
	if o.Qty > 1 {
		if err := ctx.Subscribe("news", mailbox.Broadcast); err != nil {
			return Receipt{}, err
		}
		if _, err := actor.Receive[Approval](ctx, mailbox.Timeout(24*time.Hour)); err != nil {
			return Receipt{}, err
		}
	}
	return Receipt{Total: total}, nil
})

// itemFlow is a child of batchFlow.
var itemFlow = actor.Workflow("item", func(ctx *actor.Context, name string) (string, error) { return name + " packed", nil })

// batchFlow spawns one child per item and waits for them.
var batchFlow = actor.Workflow("batch", func(ctx *actor.Context, items []string) (int, error) {
	for _, it := range items {
		pid, err := actor.SpawnChild(ctx, itemFlow, it)
		if err != nil {
			return 0, err
		}
		if _, err := actor.AwaitChild(ctx, itemFlow, pid); err != nil {
			return 0, err
		}
	}
	return len(items), nil
})

var quote = actor.Activity("quote", func(_ context.Context, o Order) (int, error) { return 4 * o.Qty, nil })

// orderFlowV2 is a deploy that changed the first step of orderFlow.
var orderFlowV2 = actor.Workflow("order", func(ctx *actor.Context, o Order) (Receipt, error) {
	total, err := quote.Run(ctx, o)
	return Receipt{Total: total}, err
})

// seed fills the store at url with instances in known states: order-1
// completed, order-2 and order-4 waiting for an approval (with a timeout)
// with a news message they do not take in their mailboxes, order-3 failed,
// batch-1 completed with two item children, and a message queued on the
// jobs channel; extra are more waiting orders. No node runs afterwards.
func seed(t *testing.T, url string, extra ...string) {
	t.Helper()
	ctx := testutil.Ctx(t, time.Minute)
	st, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	passivated := &passivations{n: map[string]int{}}
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(orderFlow, batchFlow, itemFlow), Logger: testutil.Logger(),
		PassivateAfter: 10 * time.Millisecond, LeaseTTL: 2 * time.Second, Hooks: passivated})
	if err != nil {
		t.Fatal(err)
	}
	spawn := func(id string, o Order) {
		if _, err := actor.Spawn(ctx, sys, orderFlow, o, actor.WithID(id)); err != nil {
			t.Fatalf("spawn %s: %v", id, err)
		}
	}
	spawn("order-1", Order{Item: "book", Qty: 1})
	spawn("order-2", Order{Item: "pen", Qty: 3})
	spawn("order-3", Order{Item: "none", Qty: 1})
	spawn("order-4", Order{Item: "ink", Qty: 2})
	for _, id := range extra {
		spawn(id, Order{Item: "bulk", Qty: 2})
	}
	if _, err := actor.Spawn(ctx, sys, batchFlow, []string{"cup", "jar"}, actor.WithID("batch-1")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"order-1", "order-3", "batch-1"} {
		if _, err := sys.AwaitDone(ctx, actor.PID(id)); err != nil {
			t.Fatal(err)
		}
	}
	waiting := append([]string{"order-2", "order-4"}, extra...)
	subscribed := func() bool {
		for _, id := range waiting {
			info, err := sys.Inspect(ctx, actor.PID(id))
			if err != nil || len(info.Subscriptions) == 0 {
				return false
			}
		}
		return true
	}
	testutil.Eventually(t, 30*time.Second, "waiting instances subscribed", subscribed)
	// The news wakes the waiting instances, which do not take it and
	// passivate again without writing (a woken instance takes its lease
	// with its first write): wait until each was woken and is gone again.
	passivated.published.Store(true)
	if _, err := sys.Publish(ctx, "news", "hello", actor.WithMessageID("news-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Publish(ctx, "jobs", map[string]int{"job": 7}, actor.WithMessageID("job-7")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "waiting instances passivated", func() bool {
		for _, id := range waiting {
			n := passivated.count(id)
			in, err := st.Instance(ctx, id)
			if err != nil || in.Status != persistence.StatusWaiting || n == 0 {
				return false
			}
		}
		return true
	})
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// passivations counts the passivations of each instance once published is
// set.
type passivations struct {
	published atomic.Bool
	mu        sync.Mutex
	n         map[string]int
}

func (p *passivations) Observe(_ context.Context, e actor.HookEvent) {
	if e.Kind == actor.HookInstancePassivated && p.published.Load() {
		p.mu.Lock()
		p.n[e.Instance]++
		p.mu.Unlock()
	}
}

func (p *passivations) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[id]
}

// result is one run of the command.
type result struct {
	stdout, stderr string
	code           int
}

// norn runs the built command with args and the environment env.
func norn(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return run(t, nornBin, env, args...)
}

func run(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
	default:
		t.Fatalf("run %s %v: %v", bin, args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
}

// ok fails the test unless r exited 0.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	return r
}

var timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`)

// golden compares out, with its times replaced by a placeholder of the
// same width (the columns stay aligned), to testdata/name.golden.
func golden(t *testing.T, name, out string) {
	t.Helper()
	got := timeRE.ReplaceAllString(out, "YYYY-MM-DD hh:mm:ss")
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run with -update to accept):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

func trimLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
