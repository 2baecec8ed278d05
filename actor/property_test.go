package actor_test

// Property test of the journal: a random workflow (built from a seed) makes a
// random sequence of durable calls and appends every value it observes to its
// result. Run once without interruption, it gives the reference sequence.
// Then, for every step boundary k in turn, a child process runs it on a fresh
// SQLite file and is killed with SIGKILL right after the step that brings the
// history to k events commits; a node started on that file finishes the
// instance, part replayed and part live, and must observe exactly the
// reference sequence. Values that differ from run to run (times, message
// IDs, which of two racing activities wins) stay out of the result; they go
// into the input of a witness activity, which must get the same input every
// time it runs under one idempotency key. Every other kill point, the node
// that finishes runs the next release of the code, which dropped its
// ctx.Version calls (recorded markers must be skipped). Then one file is killed at every
// boundary in turn, each process going on from what the ones before it
// recorded; last, a file is killed inside every witness activity in turn
// (after its effect, before its result is recorded), so that a later process
// runs it again with inputs from replay.
//
// NORN_PROPERTY_SEEDS=n runs n seeds (default 5, so that the suite stays
// short; a soak runs more, e.g. NORN_PROPERTY_SEEDS=100); NORN_PROPERTY_SEED=s
// runs only seed s (to reproduce a failure).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/supervisor"
)

const (
	propInstance = "prop"
	propNodeID   = "prop-node" // child and parent share it: the parent takes the lease back at once
	propChannel  = "prop-news"
)

// propIn is an activity input; the result built from it does not survive
// JSON unchanged.
type propIn struct {
	Name string
	Sec  int64
	Nsec int64
	Zone string
	Off  int
	N    int64
}

func (in propIn) lossy() jLossy {
	return jLossy{Name: in.Name, Hidden: "hidden-" + in.Name, secret: "secret-" + in.Name,
		At: time.Unix(in.Sec, in.Nsec).In(time.FixedZone(in.Zone, in.Off)), Any: int64(1<<60) + in.N}
}

// propMsg is a message that does not survive JSON unchanged either.
type propMsg struct {
	N      int
	Hidden string `json:"-"`
	At     time.Time
	Any    any
}

func (m propMsg) describe() string {
	return fmt.Sprintf("n=%d hidden=%q at=%s loc=%q any=%T(%v)", m.N, m.Hidden, m.At.Format(time.RFC3339Nano),
		m.At.Location().String(), m.Any, m.Any)
}

var propZones = []struct {
	name string
	off  int
}{{"CEST", 2 * 3600}, {"EST", -5 * 3600}, {"IST", 5*3600 + 1800}, {"UTC", 0}}

type propDefs struct {
	wf     *actor.WorkflowDef[uint64, []string]
	config actor.Config
}

// newPropDefs builds the workflow and its activities; the child and the
// parent build the same ones. The witness activity appends its idempotency
// key and input to the file witness; with dieAtNew, a child process then
// reports a witness that had not run before and waits to be killed. With
// dropVersions the workflow is the next release of the code, which removed
// its ctx.Version calls (and their observations).
func newPropDefs(witness string, dieAtNew, dropVersions bool) *propDefs {
	echo := actor.Activity("prop-echo", func(ctx context.Context, in propIn) (jLossy, error) { return in.lossy(), nil })
	flaky := actor.Activity("prop-flaky", func(ctx context.Context, n int) (int, error) {
		info, _ := actor.Info(ctx)
		if info.Attempt == 1 {
			return 0, errors.New("the first attempt fails")
		}
		return n*100 + info.Attempt, nil
	}, actor.WithRetry(supervisor.Exponential(time.Millisecond, 1, time.Millisecond, 3)))
	fail := actor.Activity("prop-fail", func(ctx context.Context, n int) (int, error) {
		return 0, supervisor.Terminal(fmt.Errorf("prop: %w", &jMyErr{Code: n}))
	})
	hang := actor.Activity("prop-hang", func(ctx context.Context, n int) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, actor.WithRetry(supervisor.NoRetry()))

	nap := actor.Activity("prop-nap", func(ctx context.Context, ms int) (int, error) {
		time.Sleep(time.Duration(ms) * time.Millisecond) // the activity's work
		return ms, nil
	})
	var witnessMu sync.Mutex
	witnessAct := actor.Activity("prop-witness", func(ctx context.Context, in string) (string, error) {
		witnessMu.Lock()
		defer witnessMu.Unlock()
		key := actor.IdempotencyKey(ctx)
		old, err := os.ReadFile(witness)
		if err != nil && !os.IsNotExist(err) {
			return "", err
		}
		f, err := os.OpenFile(witness, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return "", err
		}
		defer f.Close()
		if _, err := f.Write([]byte(key + "\t" + in + "\n")); err != nil {
			return "", err
		}
		if dieAtNew && !strings.Contains(string(old), key+"\t") {
			// The effect happened, its result is not recorded: the next
			// process runs the activity again, from replayed values.
			childSay("AT witness")
			<-make(chan struct{})
		}
		return "witnessed", nil
	})

	child := actor.Workflow("prop-child", func(ctx *actor.Context, in propIn) (jLossy, error) { return echo.Run(ctx, in) })

	wf := actor.Workflow("prop", func(ctx *actor.Context, seed uint64) ([]string, error) {
		rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		var obs []string
		see := func(format string, args ...any) { obs = append(obs, fmt.Sprintf(format, args...)) }
		errText := func(err error) string {
			if err == nil {
				return "ok"
			}
			return "error: " + err.Error()
		}
		input := func(name string) propIn {
			z := propZones[rng.IntN(len(propZones))]
			return propIn{Name: name, Sec: rng.Int64N(4e9), Nsec: rng.Int64N(1e9), Zone: z.name, Off: z.off, N: rng.Int64N(1000)}
		}
		message := func() propMsg {
			z := propZones[rng.IntN(len(propZones))]
			return propMsg{N: rng.IntN(1000), Hidden: "hidden", At: time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(time.FixedZone(z.name, z.off)),
				Any: int64(1<<62) + rng.Int64N(1000)}
		}
		// Futures started and not yet waited for: other calls run between
		// a Go (or Timer, or ReceiveAsync) and its wait.
		type pend struct {
			f    actor.Awaitable
			done func() string // the observation, once f is ready
		}
		var pending []pend
		settle := func(i int, p pend) { see("%d %s", i, p.done()) }
		// Values that differ from run to run (times, message IDs, the
		// winner of a race): never in the result, only in the input of the
		// witness activity, which must be the same every time it runs.
		version := func(i int, what, change string, max int) {
			if !dropVersions {
				see("%d %s %d", i, what, ctx.Version(change, max))
			}
		}
		// right after starting a future, an immediate call now and then
		// (nothing is recorded between the start and this call)
		then := func(i int) {
			switch rng.IntN(3) {
			case 0:
				version(i, "then version", "then-"+strconv.Itoa(i), 1+rng.IntN(3))
			case 1:
				now := ctx.Now()
				see("%d then now loc=%s monotonic=%v", i, now.Location(), strings.Contains(now.String(), "m="))
			}
		}
		var volatile []string
		vary := func(format string, args ...any) { volatile = append(volatile, fmt.Sprintf(format, args...)) }
		witness := func(i int) {
			_, err := witnessAct.Run(ctx, strings.Join(volatile, " "))
			see("%d witness %s", i, errText(err))
		}
		subscribed := false
		ops := 6 + rng.IntN(6)
		for i := 0; i < ops; i++ {
			switch op := rng.IntN(20); op {
			case 0:
				v, err := echo.Run(ctx, input("run"+strconv.Itoa(i)))
				see("%d run %s %s", i, v.describe(), errText(err))
			case 1:
				now := ctx.Now()
				vary("now=%s", now.Format(time.RFC3339Nano))
				see("%d now loc=%s monotonic=%v", i, now.Location(), strings.Contains(now.String(), "m="))
			case 2:
				err := ctx.Sleep(time.Duration(1+rng.IntN(4)) * time.Millisecond)
				see("%d slept %s", i, errText(err))
			case 3:
				m := message()
				err := ctx.Send(ctx.PID(), m)
				r, rerr := actor.Receive[propMsg](ctx, mailbox.OnChannel(""))
				vary("msg=%s", r.ID)
				see("%d self send %s: %s type=%s from-self=%v %s", i, errText(err), r.Value.describe(), r.Type, r.Sender == ctx.PID(), errText(rerr))
			case 4:
				if !subscribed {
					see("%d subscribe %s", i, errText(ctx.Subscribe(propChannel, mailbox.Broadcast)))
					subscribed = true
				}
				id, err := ctx.Publish(propChannel, message())
				r, rerr := actor.Receive[propMsg](ctx, mailbox.OnChannel(propChannel))
				vary("msg=%s", r.ID)
				see("%d publish %s: %s same-id=%v %s", i, errText(err), r.Value.describe(), r.ID == id && id != "", errText(rerr))
			case 5:
				f1, f2 := echo.Go(ctx, input("a"+strconv.Itoa(i))), echo.Go(ctx, input("b"+strconv.Itoa(i)))
				err := actor.WaitAll(ctx, f1, f2)
				v1, e1 := f1.Get(ctx)
				v2, e2 := f2.Get(ctx)
				see("%d wait-all %s: %s %s / %s %s", i, errText(err), v1.describe(), errText(e1), v2.describe(), errText(e2))
			case 6:
				f := echo.Go(ctx, input("sel"+strconv.Itoa(i)))
				k, err := actor.Select(ctx, f, ctx.Timer(time.Hour))
				v, verr := f.Get(ctx)
				see("%d select activity-vs-hour k=%d %s: %s %s", i, k, errText(err), v.describe(), errText(verr))
			case 7:
				k, err := actor.Select(ctx, hang.Go(ctx, i), ctx.Timer(time.Duration(1+rng.IntN(3))*time.Millisecond))
				see("%d select hang-vs-timer k=%d %s", i, k, errText(err))
			case 8:
				version(i, "version", "change-"+strconv.Itoa(i), 1+rng.IntN(3))
			case 9:
				v, err := flaky.Run(ctx, i)
				see("%d flaky %d %s", i, v, errText(err))
			case 10:
				_, err := fail.Run(ctx, i)
				see("%d fail %s", i, jDescribeErr(err))
			case 11:
				_, err := actor.Receive[propMsg](ctx, mailbox.OnChannel("prop-never"), mailbox.Timeout(time.Duration(1+rng.IntN(3))*time.Millisecond))
				see("%d receive-timeout %v", i, errors.Is(err, actor.ErrTimeout))
			case 12:
				in, monitor := input("child"+strconv.Itoa(i)), rng.IntN(2) == 0
				pid, err := actor.SpawnChild(ctx, child, in)
				if err != nil {
					see("%d spawn child %s", i, errText(err))
					break
				}
				if monitor {
					see("%d monitor %s %s", i, pid, errText(ctx.Monitor(pid)))
				}
				v, err := actor.AwaitChild(ctx, child, pid)
				see("%d child %s: %s %s", i, pid, v.describe(), errText(err))
			case 13: // start an activity, wait later
				j := i
				var f *actor.Future[jLossy]
				var g *actor.Future[int]
				if rng.IntN(3) == 0 {
					g = flaky.Go(ctx, i)
				} else {
					f = echo.Go(ctx, input("go"+strconv.Itoa(i)))
				}
				see("%d go", i)
				then(i)
				if g != nil {
					pending = append(pending, pend{g, func() string {
						v, err := g.Get(ctx)
						return fmt.Sprintf("got flaky of %d: %d %s", j, v, errText(err))
					}})
				} else {
					pending = append(pending, pend{f, func() string {
						v, err := f.Get(ctx)
						return fmt.Sprintf("got activity of %d: %s %s", j, v.describe(), errText(err))
					}})
				}
			case 14: // start a timer, wait later
				j, tm := i, ctx.Timer(time.Duration(1+rng.IntN(4))*time.Millisecond)
				see("%d timer", i)
				pending = append(pending, pend{tm, func() string {
					_, err := tm.Get(ctx)
					return fmt.Sprintf("timer of %d fired %s", j, errText(err))
				}})
			case 15: // send to self and start a receive, wait later
				j := i
				err := ctx.Send(ctx.PID(), message())
				r := actor.ReceiveAsync[propMsg](ctx, mailbox.OnChannel(""))
				see("%d receive-async after send %s", i, errText(err))
				then(i)
				pending = append(pending, pend{r, func() string {
					m, err := r.Get(ctx)
					vary("msg=%s", m.ID)
					return fmt.Sprintf("received for %d: %s %s", j, m.Value.describe(), errText(err))
				}})
			case 16: // wait for one pending future
				if len(pending) == 0 {
					see("%d nothing pending", i)
					break
				}
				k := rng.IntN(len(pending))
				settle(i, pending[k])
				pending = append(pending[:k:k], pending[k+1:]...)
			case 17: // wait for all of them
				fs := make([]actor.Awaitable, len(pending))
				for k, p := range pending {
					fs[k] = p.f
				}
				see("%d wait-all pending %d %s", i, len(fs), errText(actor.WaitAll(ctx, fs...)))
				for _, p := range pending {
					settle(i, p)
				}
				pending = nil
			case 18: // a race: which activity finishes first varies
				a, b := nap.Go(ctx, rng.IntN(3)), nap.Go(ctx, rng.IntN(3))
				k, err := actor.Select(ctx, a, b)
				vary("pick=%d", k)
				see("%d race %s, then %s", i, errText(err), errText(actor.WaitAll(ctx, a, b)))
			case 19:
				witness(i)
			}
		}
		for _, p := range pending {
			settle(ops, p)
		}
		witness(ops)
		return obs, nil
	})
	return &propDefs{wf: wf, config: actor.Config{Workflows: actor.Register(wf, child), NodeID: propNodeID,
		Errors: []actor.ErrorDef{actor.ErrorType[*jMyErr]("my")}}}
}

// propSeeds lists the seeds to run.
func propSeeds(t *testing.T) []uint64 {
	if s := os.Getenv("NORN_PROPERTY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("NORN_PROPERTY_SEED=%q: %v", s, err)
		}
		return []uint64{v}
	}
	n := 5
	if s := os.Getenv("NORN_PROPERTY_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("NORN_PROPERTY_SEEDS=%q: want a positive number", s)
		}
		n = v
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// propRun starts a node on the SQLite file at path, optionally spawns the
// instance, and awaits its result and history length.
func propRun(t *testing.T, path string, seed uint64, spawn bool) ([]string, int64) {
	return propRunCode(t, path, seed, spawn, false)
}

// propRunCode is propRun, optionally with the code that dropped its Version
// calls.
func propRunCode(t *testing.T, path string, seed uint64, spawn, dropVersions bool) ([]string, int64) {
	t.Helper()
	ctx := testutil.Ctx(t, 60*time.Second)
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d := newPropDefs(path+".witness", false, dropVersions)
	cfg := d.config
	cfg.Store, cfg.Logger = st, testutil.Logger()
	sys, err := actor.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopNode(t, sys)
	if spawn {
		if _, err := actor.Spawn(ctx, sys, d.wf, seed, actor.WithID(propInstance)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := actor.Await(ctx, sys, d.wf, propInstance)
	if err != nil {
		t.Fatalf("seed %d: Await = %v", seed, err)
	}
	info := inspect(t, sys, propInstance)
	checkWitness(t, path+".witness", seed)
	return got, info.HistoryLen
}

// checkWitness fails the test if the witness activity ran twice under one
// idempotency key with different inputs: a value the workflow passed on to
// the outside world changed when a later process replayed it.
func checkWitness(t *testing.T, path string, seed uint64) {
	t.Helper()
	seen := map[string]string{}
	for _, l := range readLines(t, path) {
		key, in, _ := strings.Cut(l, "\t")
		if old, ok := seen[key]; ok && old != in {
			t.Fatalf("seed %d: witness %s ran with %q, then with %q", seed, key, old, in)
		}
		seen[key] = in
	}
}

// TestPropertyKillAtEveryStep is the property test described at the top of
// the file.
func TestPropertyKillAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, seed := range propSeeds(t) {
		// The seeds are independent: each has its own files.
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			t.Parallel()
			propertyKillAtEveryStep(t, seed)
		})
	}
}

func propertyKillAtEveryStep(t *testing.T, seed uint64) {
	dir := t.TempDir()
	ref, n := propRun(t, filepath.Join(dir, fmt.Sprintf("ref-%d.db", seed)), seed, true)
	if len(ref) == 0 {
		t.Fatalf("seed %d: the workflow observed nothing", seed)
	}
	kills := 0
	// k is the history length to kill at; a step can commit several
	// events, so the next k is one past where the last kill happened.
	// Every other time the node that finishes the instance runs the
	// next release, which dropped the Version calls: it must replay the
	// recorded markers and see everything else the same.
	for k := int64(1); k < n; {
		db := filepath.Join(dir, fmt.Sprintf("seed-%d-k-%d.db", seed, k))
		at := propKill(t, db, seed, k, n)
		drop := kills%2 == 1
		want := ref
		if drop {
			want = withoutVersions(ref)
		}
		got, _ := propRunCode(t, db, seed, false, drop)
		if d := firstDiff(want, got); d >= 0 {
			t.Fatalf("seed %d, killed at %d events (asked %d), finished by code without Version calls: %v: observation %d differs\n  reference: %s\n  after kill: %s\nreference: %q\nafter kill: %q",
				seed, at, k, drop, d, nth(want, d), nth(got, d), want, got)
		}
		kills++
		k = max(at, k) + 1
	}
	// Then once more on one file, killed at every boundary in turn: each
	// process replays what the ones before it recorded and adds a step.
	db := filepath.Join(dir, fmt.Sprintf("seed-%d-chain.db", seed))
	chain := 0
	for k := int64(1); k < n; chain++ {
		k = max(propKill(t, db, seed, k, n), k) + 1
	}
	got, _ := propRun(t, db, seed, false)
	if d := firstDiff(ref, got); d >= 0 {
		t.Fatalf("seed %d, killed %d times in a row: observation %d differs\n  reference: %s\n  after kills: %s\nreference: %q\nafter kills: %q",
			seed, chain, d, nth(ref, d), nth(got, d), ref, got)
	}
	// Last, killed inside every witness activity in turn, after its
	// effect and before its result is recorded.
	db = filepath.Join(dir, fmt.Sprintf("seed-%d-witness.db", seed))
	witnessKills := 0
	for propChild(t, db, seed, n+1<<20, true) != "DONE" {
		witnessKills++
	}
	got, _ = propRun(t, db, seed, false)
	if d := firstDiff(ref, got); d >= 0 {
		t.Fatalf("seed %d, killed in %d witness activities: observation %d differs\n  reference: %s\n  after kills: %s\nreference: %q\nafter kills: %q",
			seed, witnessKills, d, nth(ref, d), nth(got, d), ref, got)
	}
	t.Logf("seed %d: %d observations, %d history events, %d kill points, then %d kills in a row, %d inside activities",
		seed, len(ref), n, kills, chain, witnessKills)
}

// propKill runs the instance in a child process on db until its history
// reaches k events, kills it with SIGKILL and returns the history length it
// had reached (n, the reference length, if it completed first).
func propKill(t *testing.T, db string, seed uint64, k, n int64) int64 {
	t.Helper()
	line := propChild(t, db, seed, k, false)
	if f := strings.Fields(line); len(f) == 2 && f[0] == "AT" {
		at, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			t.Fatalf("seed %d, k %d: child said %q", seed, k, line)
		}
		return at
	}
	if line != "DONE" {
		t.Fatalf("seed %d, k %d: child said %q", seed, k, line)
	}
	return n
}

// propChild runs the child process (see propKillChild) until it reports
// ("AT …" or "DONE"), kills it with SIGKILL and returns the report.
func propChild(t *testing.T, db string, seed uint64, k int64, witnessDie bool) string {
	t.Helper()
	env := []string{"NORN_PROP_DB=" + db, "NORN_PROP_SEED=" + strconv.FormatUint(seed, 10), "NORN_PROP_K=" + strconv.FormatInt(k, 10)}
	if witnessDie {
		env = append(env, "NORN_PROP_WITNESS_DIE=1")
	}
	c := startChild(t, "prop-kill", env...)
	line := c.waitLine(t, "", time.Minute)
	c.kill9(t)
	if line != "DONE" && !strings.HasPrefix(line, "AT ") {
		t.Fatalf("seed %d, k %d: child said %q", seed, k, line)
	}
	return line
}

// withoutVersions drops the observations of Version calls.
func withoutVersions(obs []string) []string {
	var out []string
	for _, o := range obs {
		if !strings.Contains(o, " version ") {
			out = append(out, o)
		}
	}
	return out
}

func firstDiff(a, b []string) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	return -1
}

func nth(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}

func init() { registerChildRole("prop-kill", propKillChild) }

// killStore freezes the node right after the step that brings the
// instance's history to k events commits: it reports the length and blocks
// every Apply from then on, so nothing more is recorded before the kill.
type killStore struct {
	persistence.Store
	k      int64
	mu     sync.Mutex
	frozen bool
}

func (s *killStore) Apply(ctx context.Context, step persistence.Step) (persistence.StepResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen {
		<-make(chan struct{})
	}
	res, err := s.Store.Apply(ctx, step)
	if err != nil || (step.Instance != propInstance && (step.Create == nil || step.Create.ID != propInstance)) {
		return res, err
	}
	inst, ierr := s.Instance(ctx, propInstance)
	if ierr == nil && inst.HistoryLen >= s.k {
		s.frozen = true
		childSay("AT %d", inst.HistoryLen)
		<-make(chan struct{})
	}
	return res, err
}

// propKillChild runs the workflow of NORN_PROP_SEED on NORN_PROP_DB (spawning
// it unless it exists) until its history reaches NORN_PROP_K events, or (with
// NORN_PROP_WITNESS_DIE set) a witness activity runs for the first time —
// then it reports "AT …" and waits to be killed — or until it completes
// ("DONE").
func propKillChild() int {
	ctx := context.Background()
	seed, err := strconv.ParseUint(os.Getenv("NORN_PROP_SEED"), 10, 64)
	if err != nil {
		return childFail("seed: %v", err)
	}
	k, err := strconv.ParseInt(os.Getenv("NORN_PROP_K"), 10, 64)
	if err != nil {
		return childFail("k: %v", err)
	}
	st, err := sqlite.Open(ctx, os.Getenv("NORN_PROP_DB"), sqlite.Options{})
	if err != nil {
		return childFail("open: %v", err)
	}
	d := newPropDefs(os.Getenv("NORN_PROP_DB")+".witness", os.Getenv("NORN_PROP_WITNESS_DIE") != "", false)
	cfg := d.config
	cfg.Store, cfg.Logger = &killStore{Store: st, k: k}, testutil.Logger()
	sys, err := actor.Start(ctx, cfg)
	if err != nil {
		return childFail("start: %v", err)
	}
	// Spawn only a new instance: a node recovers one that exists.
	if _, err := st.Instance(ctx, propInstance); errors.Is(err, persistence.ErrNotFound) {
		if _, err := actor.Spawn(ctx, sys, d.wf, seed, actor.WithID(propInstance)); err != nil {
			return childFail("spawn: %v", err)
		}
	} else if err != nil {
		return childFail("read instance: %v", err)
	}
	if _, err := actor.Await(ctx, sys, d.wf, propInstance); err != nil {
		return childFail("await: %v", err)
	}
	childSay("DONE")
	<-make(chan struct{})
	return 0
}
