package actor_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// The crash tests run a node in a child process (this test binary, re-run
// with NORN_CRASH_ROLE set) and kill -9 it.
const crashRoleEnv = "NORN_CRASH_ROLE"

// crashChild is the child side; TestMain calls it before anything else.
// It never returns when the role is set.
func crashChild() {
	role := os.Getenv(crashRoleEnv)
	if role == "" {
		return
	}
	err := func() error {
		switch role {
		case "chain":
			return runChainChild(os.Getenv("NORN_CRASH_DB"), os.Getenv("NORN_CRASH_LOG"))
		default:
			return fmt.Errorf("unknown crash role %q", role)
		}
	}()
	fmt.Fprintln(os.Stderr, "crash child:", err)
	os.Exit(3)
}

const crashInstances = 120

// crashChain is three activities that each append their idempotency key to a
// side-effect log, as an external system would see them.
func crashChain(logPath string) *actor.WorkflowDef[int, int] {
	var mu sync.Mutex
	step := actor.Activity("step", func(ctx context.Context, n int) (int, error) {
		time.Sleep(time.Duration(20+n%97) * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if _, err := fmt.Fprintln(f, actor.IdempotencyKey(ctx)); err != nil {
			return 0, err
		}
		return n + 1, f.Sync()
	})
	return actor.Workflow("crash-chain", func(ctx *actor.Context, n int) (int, error) {
		for i := 0; i < 3; i++ {
			var err error
			if n, err = step.Run(ctx, n*10); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
}

func crashWant(i int) int {
	n := i
	for k := 0; k < 3; k++ {
		n = n*10 + 1
	}
	return n
}

func runChainChild(dbPath, logPath string) error {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dbPath, sqlite.Options{})
	if err != nil {
		return err
	}
	wf := crashChain(logPath)
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "child",
		LeaseTTL: time.Second, Logger: testutil.Logger()})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for i := 0; i < crashInstances; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := actor.Spawn(ctx, sys, wf, i, actor.WithID(fmt.Sprintf("w-%03d", i))); err != nil {
				fmt.Fprintln(os.Stderr, "spawn:", err)
			}
		}(i)
	}
	wg.Wait()
	fmt.Println("spawned")
	// Report each end so that the parent can kill us mid-flight.
	for i := 0; i < crashInstances; i++ {
		go func(i int) {
			if _, err := actor.Await(ctx, sys, wf, actor.PID(fmt.Sprintf("w-%03d", i))); err == nil {
				fmt.Println("completed")
			}
		}(i)
	}
	// Run until killed, or until the parent goes away (its end closes stdin).
	_, _ = io.Copy(io.Discard, os.Stdin)
	return errors.New("parent went away")
}

// TestKill9MidFlight kills a node while 100+ workflows are mid-flight and
// checks that a new process finishes them all with every activity result
// recorded once.
func TestKill9MidFlight(t *testing.T) {
	dir := t.TempDir()
	dbPath, logPath := dir+"/norn.db", dir+"/effects.log"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashRoleEnv+"=chain", "NORN_CRASH_DB="+dbPath, "NORN_CRASH_LOG="+logPath)
	cmd.Stderr = os.Stderr
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(out)
	line, err := lines.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "spawned" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not start: %q, %v", line, err)
	}
	// Kill once some workflows have finished and the rest are mid-flight.
	for finished := 0; finished < crashInstances/10; finished++ {
		if _, err = lines.ReadString('\n'); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child stopped early: %v", err)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	st := testutil.OpenSQLite(t, dbPath)
	ctx := testutil.Ctx(t, 60*time.Second)
	all, err := st.List(ctx, persistence.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, in := range all {
		if in.Status.Terminal() {
			done++
		}
	}
	if done == len(all) {
		t.Fatal("every workflow finished before the kill; the test proves nothing")
	}
	if len(all) != crashInstances {
		t.Fatalf("store has %d instances after the kill, want %d (spawn returned before they were durable?)", len(all), crashInstances)
	}
	t.Logf("at the kill: %d of %d workflows had finished", done, len(all))

	wf := crashChain(logPath)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "parent", LeaseTTL: time.Second})
	for i := 0; i < crashInstances; i++ {
		got, err := actor.Await(ctx, sys, wf, actor.PID(fmt.Sprintf("w-%03d", i)))
		if err != nil || got != crashWant(i) {
			t.Fatalf("w-%03d = %d, %v; want %d", i, got, err, crashWant(i))
		}
	}
	// Every recorded activity result exists once, and each was really run.
	effects, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for _, k := range strings.Fields(string(effects)) {
		ran[k]++
	}
	reruns := 0
	for i := 0; i < crashInstances; i++ {
		id := fmt.Sprintf("w-%03d", i)
		hist, err := st.History(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range hist {
			if e.Kind != "activity" {
				continue
			}
			if seen[e.Ref] {
				t.Fatalf("%s: activity %s recorded twice", id, e.Ref)
			}
			seen[e.Ref] = true
			n := ran[id+"/"+e.Ref]
			if n == 0 {
				t.Fatalf("%s: activity %s recorded but never ran", id, e.Ref)
			}
			reruns += n - 1
		}
		if len(seen) != 3 {
			t.Fatalf("%s: %d activity results, want 3", id, len(seen))
		}
	}
	t.Logf("activities re-run after the crash (allowed: at least once): %d", reruns)
}

// A node restarted under the same NodeID after a kill -9 takes back at once
// the instances that were mid-step (their leases are in its own name).
func TestKill9SameNodeIDResumes(t *testing.T) {
	dir := t.TempDir()
	dbPath, logPath := dir+"/norn.db", dir+"/effects.log"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashRoleEnv+"=chain", "NORN_CRASH_DB="+dbPath, "NORN_CRASH_LOG="+logPath)
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "spawned" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child did not start: %q, %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	st := testutil.OpenSQLite(t, dbPath)
	wf := crashChain(logPath)
	// A lease far longer than the test: only the same-NodeID takeover can finish it.
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf), NodeID: "child", LeaseTTL: time.Hour})
	ctx := testutil.Ctx(t, 60*time.Second)
	for i := 0; i < crashInstances; i++ {
		if got, err := actor.Await(ctx, sys, wf, actor.PID(fmt.Sprintf("w-%03d", i))); err != nil || got != crashWant(i) {
			t.Fatalf("w-%03d = %d, %v", i, got, err)
		}
	}
}
