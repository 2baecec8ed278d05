package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// mergeCase is one step of a batch that merges appends, and what it must
// come to.
type mergeCase struct {
	name string
	step persistence.Step
	want error // nil: commits
}

// mergeInstances creates the instances the cases write to: each leased to
// epoch 1 with one event, "done" ended.
func mergeInstances(t *testing.T, st *Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := st.Apply(context.Background(), persistence.Step{
			Create:  &persistence.Instance{ID: id, Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1, LeaseExpires: time.Now().Add(time.Hour)},
			History: []persistence.Event{{Seq: 0, Kind: "started"}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// applyAsOneBatch applies the steps concurrently in one transaction: the
// store's one writer is held in a commit that waits for a row lock the
// test holds until every step is queued behind it.
func applyAsOneBatch(t *testing.T, st *Store, steps []persistence.Step) ([]persistence.StepResult, []error) {
	t.Helper()
	ctx := context.Background()
	mergeInstances(t, st, "blocker")
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM instances WHERE id = 'blocker' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := st.Apply(ctx, persistence.Step{Instance: "blocker", Epoch: 1, History: []persistence.Event{{Seq: 1, Kind: "step"}}})
		held <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the writer to wait for the lock", func() bool {
		var n int
		err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n == 1
	})
	errs, res := make([]error, len(steps)), make([]persistence.StepResult, len(steps))
	var wg sync.WaitGroup
	for i := range steps {
		wg.Go(func() { res[i], errs[i] = st.Apply(ctx, steps[i]) })
	}
	testutil.Eventually(t, 10*time.Second, "every step to queue", func() bool { return len(st.reqs) == len(steps) })
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	return res, errs
}

func createStep(id string) persistence.Step {
	return persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf", LeaseOwner: "n", LeaseEpoch: 1},
		LeaseTTL: time.Hour, History: []persistence.Event{{Seq: 0, Kind: "started", Payload: []byte(id)}}}
}

func appendStep(id string, epoch int64, seqs ...int64) persistence.Step {
	st := persistence.Step{Instance: id, Epoch: epoch}
	for _, s := range seqs {
		st.History = append(st.History, persistence.Event{Seq: s, Kind: "step", Name: fmt.Sprint(s), Payload: []byte(id)})
	}
	return st
}

// A batch of appends writes them with merged statements; steps of it that
// fail (fenced, out of place, ended) fail on their own with the error
// they get alone, and every other step commits, whole.
func TestMergedWrites(t *testing.T) {
	url := testutil.PostgresURL(t)
	st, err := Open(context.Background(), url, Options{Writers: 1, MaxBatch: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var batches []int
	var mu sync.Mutex
	remove := st.ObserveCommits(observeFunc(func(c persistence.CommitInfo) {
		mu.Lock()
		batches = append(batches, c.Steps)
		mu.Unlock()
	}))
	defer remove()

	ids := []string{"a0", "a1", "a2", "a3", "a4", "a5", "gap", "fenced", "done", "park", "e-none", "e-gap", "e-fenced", "e-done", "e-taken", "held"}
	mergeInstances(t, st, ids...)
	if _, err := st.Apply(context.Background(), persistence.Step{Instance: "done", Epoch: 1, Status: persistence.StatusCompleted,
		History: []persistence.Event{{Seq: 1, Kind: "completed"}}}); err != nil {
		t.Fatal(err)
	}
	// e-none holds mail of its own and a message it claimed from a queue
	// that "sub" also consumes: its end drops the one and gives the other
	// back, naming sub to wake.
	ctx := context.Background()
	mergeInstances(t, st, "sub")
	for _, id := range []string{"e-none", "sub"} {
		if _, err := st.Apply(ctx, persistence.Step{Instance: id, Epoch: 1,
			Subscribe: []persistence.Subscription{{Channel: "q", Mode: persistence.Competing}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Apply(ctx, persistence.Step{Send: []persistence.NewMessage{{ID: "queued", Channel: "q"}, {ID: "mail", Target: "e-none"}}}); err != nil {
		t.Fatal(err)
	}
	var queued int64
	if err := st.Pool().QueryRow(ctx, `SELECT seq FROM messages WHERE msg_id = 'queued'`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Apply(ctx, persistence.Step{Instance: "e-none", Epoch: 1, Claim: []int64{queued}}); err != nil || len(res.Claimed) != 1 {
		t.Fatalf("claim: %+v, %v", res, err)
	}

	// Each round: the appending steps (a0 to a5 and park, each after what
	// the rounds before appended), with one failing step or none.
	next := map[string]int64{}
	good := func() []mergeCase {
		var cs []mergeCase
		for i, id := range []string{"a0", "a1", "a2", "a3", "a4", "a5", "park"} {
			if next[id] == 0 {
				next[id] = 1
			}
			seqs := []int64{next[id]}
			for range i % 3 {
				seqs = append(seqs, seqs[len(seqs)-1]+1)
			}
			next[id] = seqs[len(seqs)-1] + 1
			st := appendStep(id, 1, seqs...)
			switch id {
			case "a1":
				st.SetWaits, st.Waits = true, []byte(fmt.Sprintf(`{"Channels":["x%d"]}`, next[id]))
			case "park":
				st.Status = persistence.StatusWaiting
			}
			cs = append(cs, mergeCase{id, st, nil})
		}
		return cs
	}
	failing := []mergeCase{
		{"none", persistence.Step{}, nil},
		{"gap", appendStep("gap", 1, 5), persistence.ErrHistoryGap},
		{"fenced", appendStep("fenced", 7, 1), persistence.ErrFenced},
		{"done", appendStep("done", 1, 2), persistence.ErrInstanceDone},
		// An ID taken: no error, the instance that holds it. (Without
		// events, which would collide with the instance's.)
		{"taken", persistence.Step{Create: &persistence.Instance{ID: "held", Workflow: "wf"}}, nil},
	}
	for _, f := range failing {
		t.Run(f.name, func(t *testing.T) {
			run := good()
			// An instance ends: its status, output and lease change.
			end := appendStep("e-"+f.name, 1, 1)
			end.Status, end.Output = persistence.StatusCompleted, []byte(`"out"`)
			run = append(run, mergeCase{end.Instance, end, nil})
			// Enough ends to be merged.
			for k := range 3 {
				id := fmt.Sprintf("x-%s-%d", f.name, k)
				mergeInstances(t, st, id)
				x := appendStep(id, 1, 1)
				x.Status = persistence.StatusFailed
				run = append(run, mergeCase{id, x, nil})
			}
			// Instances are created, with their first events.
			for k := range 4 {
				run = append(run, mergeCase{"create", createStep(fmt.Sprintf("n-%s-%d", f.name, k)), nil})
			}
			if f.name != "none" {
				// In the middle of the batch, which is in instance order.
				run = append(run, f)
			}
			steps := make([]persistence.Step, len(run))
			for i := range run {
				steps[i] = run[i].step
			}
			mu.Lock()
			batches = batches[:0]
			mu.Unlock()
			// A failed step has the next batches run guarded (not merged).
			st.guarded.Store(0)
			reruns := st.reruns.Load()
			res, errs := applyAsOneBatch(t, st, steps)
			// The merged statements fail only for the failing step: the
			// batch then runs again, once.
			want := int64(1)
			if f.name == "none" {
				want = 0
			}
			if got := st.reruns.Load() - reruns; got != want {
				t.Errorf("the batch ran again %d times, want %d", got, want)
			}
			// A failed step has the next batches run guarded too, but an
			// ID taken does not.
			if g := st.guarded.Load(); (g > 0) != (want > 0 && f.name != "taken") {
				t.Errorf("after %s, %d batches to run guarded", f.name, g)
			}
			mu.Lock()
			if !slices.Contains(batches, len(steps)) {
				t.Errorf("the steps did not share one transaction: batches %v", batches)
			}
			mu.Unlock()
			for i, c := range run {
				switch {
				case c.want == nil && errs[i] != nil:
					t.Errorf("%s: %v", c.name, errs[i])
				case c.want != nil && !errors.Is(errs[i], c.want):
					t.Errorf("%s: err %v, want %v", c.name, errs[i], c.want)
				case c.name == "create" && res[i].Existing != nil:
					t.Errorf("%s: found taken", c.step.Create.ID)
				case c.name == "taken" && (res[i].Existing == nil || res[i].Existing.ID != "held"):
					t.Errorf("taken: result %+v", res[i])
				case c.name == "e-none" && (!slices.Equal(res[i].Woken, []string{"sub"}) || len(res[i].Queued) != 1 || res[i].Queued[0].Channel != "q"):
					t.Errorf("e-none: the message it gave back, in its result: %+v", res[i])
				}
			}
		})
		blockerDone(t, st)
	}

	// Every committed step is whole: its events, the history length, and
	// the waits it set.
	for _, id := range []string{"a0", "a1", "a2", "a3", "a4", "a5", "park"} {
		h, err := st.History(context.Background(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := st.Instance(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(h)) != inst.HistoryLen {
			t.Errorf("%s: %d events, history length %d", id, len(h), inst.HistoryLen)
		}
		for i, e := range h {
			if e.Seq != int64(i) || (i > 0 && string(e.Payload) != id) {
				t.Errorf("%s: event %d is %+v", id, i, e)
			}
		}
	}
	for _, f := range failing {
		inst, err := st.Instance(context.Background(), "e-"+f.name)
		if err != nil || inst.Status != persistence.StatusCompleted || string(inst.Output) != `"out"` || inst.LeaseOwner != "" ||
			inst.HistoryLen != 2 {
			t.Errorf("e-%s ended as %+v, %v", f.name, inst, err)
		}
	}
	for _, f := range failing {
		for k := range 4 {
			id := fmt.Sprintf("n-%s-%d", f.name, k)
			inst, err := st.Instance(context.Background(), id)
			h, _ := st.History(context.Background(), id, 0)
			if err != nil || inst.HistoryLen != 1 || len(h) != 1 || inst.LeaseOwner != "n" || inst.Workflow != "wf" {
				t.Errorf("%s created as %+v with %d events, %v", id, inst, len(h), err)
			}
		}
	}
	if left := storedMessages(t, st); !slices.Equal(left, []string{"queued:"}) {
		t.Errorf("messages after the ends: %v, want the claimed one back in its queue", left)
	}
	var subs int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM subscriptions WHERE instance_id LIKE 'e-%'`).Scan(&subs); err != nil || subs != 0 {
		t.Errorf("ended instances keep %d subscriptions (%v)", subs, err)
	}
	for id, n := range map[string]int{"gap": 1, "fenced": 1, "done": 2} {
		if h, _ := st.History(context.Background(), id, 0); len(h) != n {
			t.Errorf("%s: %d events, want %d (a failed step wrote)", id, len(h), n)
		}
	}
	if inst, _ := st.Instance(context.Background(), "a1"); string(inst.Waits) != fmt.Sprintf(`{"Channels":["x%d"]}`, next["a1"]) {
		t.Errorf("a1 waits = %s", inst.Waits)
	}
	if inst, _ := st.Instance(context.Background(), "park"); inst.Status != persistence.StatusWaiting {
		t.Errorf("park status = %s", inst.Status)
	}
}

// storedMessages lists the store's messages in seq order, each as
// "msg_id:target" (target empty for a queued one).
func storedMessages(t *testing.T, st *Store) []string {
	t.Helper()
	rows, err := st.Pool().Query(context.Background(), `SELECT msg_id || ':' || COALESCE(target, '') FROM messages ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var left []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			t.Fatal(err)
		}
		left = append(left, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return left
}

// blockerDone drops the blocker instance applyAsOneBatch made, so that the
// next call can make it again.
func blockerDone(t *testing.T, st *Store) {
	t.Helper()
	if _, err := st.Pool().Exec(context.Background(),
		`WITH h AS (DELETE FROM history WHERE instance_id = 'blocker') DELETE FROM instances WHERE id = 'blocker'`); err != nil {
		t.Fatal(err)
	}
}

type observeFunc func(persistence.CommitInfo)

func (f observeFunc) ObserveCommit(c persistence.CommitInfo) { f(c) }

// mergeWrites takes out of the batch only what it may: the updates and
// events of steps without a savepoint, one step per instance, but not the
// update of a step that takes a lease (its events are), and only enough
// rows to be worth a statement.
func TestMergeWritesTakesWhatItMay(t *testing.T) {
	s := &Store{}
	park := appendStep("p", 1, 4)
	park.Status = persistence.StatusWaiting
	take := appendStep("t", 1, 1)
	take.TakeLease = "n"
	batch := []*writeReq{
		{step: appendStep("a", 1, 1, 2)},
		{step: appendStep("b", 1, 3)},
		{step: appendStep("c", 1, 1)},
		{step: park},
		{step: appendStep("sp", 1, 1), savepoint: true},
		{step: take},
		{step: appendStep("same", 1, 1)},
		{step: appendStep("same", 1, 2)},
	}
	for _, r := range batch {
		r.ops = s.compile(r)
	}
	for _, id := range []string{"k1", "k2", "k3", "k4"} {
		batch = append(batch, &writeReq{step: createStep(id)})
	}
	for _, r := range batch {
		r.ops = s.compile(r)
	}
	// Fewer than mergeMin rows are not merged.
	if first, last := s.mergeWrites(batch[:1]); first != nil || last != nil {
		t.Errorf("one step merged: %+v, %+v", first, last)
	}
	first, last := s.mergeWrites(batch)
	if len(first) != 2 || first[0].name != sqlCreateMerged || first[1].name != sqlUpdateMany || len(last) != 1 || last[0].name != sqlInsertEvents {
		t.Fatalf("merged first %+v, last %+v", first, last)
	}
	if got := first[0].args[0].([]string); !slices.Equal(got, []string{"k1", "k2", "k3", "k4"}) {
		t.Errorf("merged creations of %v", got)
	}
	if got := first[1].args[0].([]string); !slices.Equal(got, []string{"a", "b", "c", "p"}) {
		t.Errorf("merged updates of %v, want a, b, c and p", got)
	}
	if got := first[1].args[2].([]string); !slices.Equal(got, []string{"", "", "", "waiting"}) {
		t.Errorf("merged statuses %v", got)
	}
	if got := last[0].args[0].([]string); !slices.Equal(got, []string{"a", "a", "b", "c", "p", "t", "k1", "k2", "k3", "k4"}) {
		t.Errorf("merged events of %v", got)
	}
	if got := last[0].args[1].([]int64); !slices.Equal(got, []int64{1, 2, 3, 1, 4, 1, 0, 0, 0, 0}) {
		t.Errorf("merged event seqs %v", got)
	}
	left := func(r *writeReq) (names []string) {
		for _, o := range r.ops {
			names = append(names, o.name)
		}
		return names
	}
	for i, want := range [][]string{nil, nil, nil, nil, {sqlUpdateInstance, sqlInsertEvent},
		{sqlUpdateInstance}, {sqlUpdateInstance, sqlInsertEvent}, {sqlUpdateInstance, sqlInsertEvent}, nil, nil, nil, nil} {
		if got := left(batch[i]); !slices.Equal(got, want) {
			t.Errorf("step %d (%s) kept %v, want %v", i, batch[i].step.Instance, got, want)
		}
	}
}

// The Downs a batch of ends publishes on their system channels are merged
// into one statement: each lands in its broadcast subscribers' mailboxes,
// in the steps' order, and wakes them; a channel nobody subscribes to
// queues nothing; a subscriber that ends in the same batch keeps no copy.
// A competing subscriber (only the store's own API makes one) has the
// batch run again unmerged, where its message is queued as sqlPublish
// queues it.
func TestMergedSystemPublishes(t *testing.T) {
	for _, competing := range []bool{false, true} {
		t.Run(fmt.Sprintf("competing=%v", competing), func(t *testing.T) {
			url := testutil.PostgresURL(t)
			st, err := Open(context.Background(), url, Options{Writers: 1, MaxBatch: 512})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			ctx := context.Background()
			ends := []string{"d0", "d1", "d2", "d3", "d4", "mon-end"}
			mergeInstances(t, st, append([]string{"mon"}, ends...)...)
			subs := map[string][]persistence.Subscription{
				"mon":     {{Channel: "$down:d0", Mode: persistence.Broadcast}, {Channel: "$down:d2", Mode: persistence.Broadcast}},
				"mon-end": {{Channel: "$down:d1", Mode: persistence.Broadcast}},
			}
			if competing {
				mergeInstances(t, st, "cq")
				subs["cq"] = []persistence.Subscription{{Channel: "$down:d3", Mode: persistence.Competing}}
			}
			for id, ss := range subs {
				if _, err := st.Apply(ctx, persistence.Step{Instance: id, Epoch: 1, Subscribe: ss}); err != nil {
					t.Fatal(err)
				}
			}
			steps := make([]persistence.Step, len(ends))
			for i, id := range ends {
				s := appendStep(id, 1, 1)
				s.Status = persistence.StatusCompleted
				s.Send = []persistence.NewMessage{{ID: "down-" + id, Channel: "$down:" + id, Sender: id, Type: "down", Payload: []byte(id)}}
				steps[i] = s
			}
			reruns := st.reruns.Load()
			res, errs := applyAsOneBatch(t, st, steps)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("%s: %v", ends[i], err)
				}
			}
			wantReruns := int64(0)
			if competing {
				wantReruns = 1
			}
			if got := st.reruns.Load() - reruns; got != wantReruns {
				t.Errorf("the batch ran again %d times, want %d", got, wantReruns)
			}
			woken := map[string][]string{"d0": {"mon"}, "d2": {"mon"}}
			if competing {
				woken["d3"] = []string{"cq"}
			}
			for i, id := range ends {
				if id == "d1" && slices.Equal(res[i].Woken, []string{"mon-end"}) {
					continue // mon-end's end ran after d1's publish: it is woken, and its copy dropped
				}
				if !slices.Equal(res[i].Woken, woken[id]) {
					t.Errorf("%s woke %v, want %v", id, res[i].Woken, woken[id])
				}
			}
			if competing && (len(res[3].Queued) != 1 || res[3].Queued[0].Channel != "$down:d3") {
				t.Errorf("d3 queued %+v, want its Down", res[3].Queued)
			}
			left := storedMessages(t, st)
			want := []string{"down-d0:mon", "down-d2:mon"}
			if competing {
				want = append(want, "down-d3:")
			}
			slices.Sort(left)
			if !slices.Equal(left, want) {
				t.Errorf("messages after the ends: %v, want %v", left, want)
			}
			mail, err := st.Mailbox(ctx, "mon", 10)
			if err != nil || len(mail) != 2 || mail[0].ID != "down-d0" || mail[1].ID != "down-d2" ||
				string(mail[1].Payload) != "d2" || mail[1].Sender != "d2" || mail[1].Type != "down" {
				t.Errorf("mon's mailbox %+v, %v", mail, err)
			}
		})
	}
}

// The ends of a batch delete their subscriptions and timers with one
// statement at its start, but an end that fires, adds or cancels a timer
// or changes a subscription keeps its own delete, after those.
func TestMergeWritesReleasesEnds(t *testing.T) {
	s := &Store{}
	var batch []*writeReq
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		st := appendStep(id, 1, 1)
		st.Status = persistence.StatusCompleted
		if id == "e3" {
			st.FireTimers = []string{"t"}
		}
		batch = append(batch, &writeReq{step: st})
	}
	for _, r := range batch {
		r.ops = s.compile(r)
	}
	first, _ := s.mergeWrites(batch)
	var released []string
	for _, o := range first {
		if o.name == sqlEndInstances {
			released = o.args[0].([]string)
		}
	}
	if !slices.Equal(released, []string{"e1", "e2", "e4"}) {
		t.Errorf("merged release of %v, want e1, e2 and e4", released)
	}
	for _, r := range batch {
		own := countOps(r.ops, sqlEndInstance)
		if want := map[bool]int{true: 1, false: 0}[r.step.Instance == "e3"]; own != want {
			t.Errorf("%s keeps %d deletes of its own, want %d", r.step.Instance, own, want)
		}
	}
}

// oneWriter opens a store with one writer whose batches hold up to
// maxBatch steps, and a function that reports how many steps each of its
// transactions ran so far.
func oneWriter(t *testing.T, maxBatch int) (*Store, func() []int) {
	t.Helper()
	st, commits := oneWriterOn(t, testutil.PostgresURL(t), maxBatch)
	return st, func() []int {
		var steps []int
		for _, c := range commits() {
			steps = append(steps, c.Steps)
		}
		return steps
	}
}

// oneWriterOn is oneWriter on the database at url, reporting each
// transaction whole.
func oneWriterOn(t *testing.T, url string, maxBatch int) (*Store, func() []persistence.CommitInfo) {
	t.Helper()
	st, err := Open(context.Background(), url, Options{Writers: 1, MaxBatch: maxBatch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var mu sync.Mutex
	var commits []persistence.CommitInfo
	t.Cleanup(st.ObserveCommits(observeFunc(func(c persistence.CommitInfo) {
		mu.Lock()
		commits = append(commits, c)
		mu.Unlock()
	})))
	return st, func() []persistence.CommitInfo {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(commits)
	}
}

// A batch that takes more locks than the server's lock table has room for
// (the table is shared by every connection; this server's is small) runs
// again in smaller transactions: every step commits, none fails with "out
// of shared memory". Without the split every step of the batch failed.
func TestLockTableFullSplitsBatch(t *testing.T) {
	t.Parallel()
	url := testutil.PrivatePostgres(t, "max_connections=20", "max_locks_per_transaction=10")
	const n = 1000 // each end locks its instance and its bucket: well over the table's ~800
	st, commits := oneWriterOn(t, url, n+1)
	ids := make([]string, n)
	steps := make([]persistence.Step, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%04d", i)
		steps[i] = appendStep(ids[i], 1, 1)
		steps[i].Status = persistence.StatusCompleted
	}
	mergeInstances(t, st, ids...)
	_, errs := applyAsOneBatch(t, st, steps)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, ids[i], err)
		}
	}
	var ended int
	if err := st.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM instances WHERE status = 'completed' AND history_len = 2`).Scan(&ended); err != nil || ended != n {
		t.Errorf("%d instances ended (%v), want %d", ended, err, n)
	}
	full, most := 0, 0
	for _, c := range commits() {
		if errors.Is(c.Err, errLockTableFull) {
			full++
		} else if c.Err != nil {
			t.Errorf("a transaction failed: %v", c.Err)
		}
		most = max(most, c.Steps)
	}
	if full == 0 || most >= n {
		t.Errorf("%d transactions found the lock table full and the largest ran %d steps: the batch of %d was never split", full, most, n)
	}
}

// checkSavepointCap fails the test if a transaction ran more steps than
// may run in savepoints; it returns the steps of the transactions of
// several.
func checkSavepointCap(t *testing.T, commits []int) (shared int) {
	t.Helper()
	for _, c := range commits {
		if c > maxSavepoints {
			t.Errorf("a transaction ran %d steps in savepoints, more than %d: commits %v", c, maxSavepoints, commits)
		}
		if c > 1 {
			shared += c
		}
	}
	return shared
}

// A batch holds more steps than a transaction may run in savepoints: when
// every step needs one (after a merged statement failed), the first
// maxSavepoints run in the transaction and the rest in the next, and each
// step still gets its own outcome.
func TestSavepointsPerTransaction(t *testing.T) {
	st, commits := oneWriter(t, 256)
	const n = 2*maxSavepoints + 10
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("i%03d", i)
	}
	mergeInstances(t, st, ids...)
	steps := make([]persistence.Step, n)
	for i, id := range ids {
		steps[i] = appendStep(id, 1, 1)
	}
	steps[n/2] = appendStep(ids[n/2], 2, 1) // fenced: fails the merged update
	before := len(commits())
	_, errs := applyAsOneBatch(t, st, steps)
	for i, err := range errs {
		if want := i == n/2; (err != nil) != want {
			t.Errorf("step %d (%s): %v", i, ids[i], err)
		}
	}
	if !errors.Is(errs[n/2], persistence.ErrFenced) {
		t.Errorf("fenced step: %v, want ErrFenced", errs[n/2])
	}
	for i, id := range ids {
		if i == n/2 {
			continue
		}
		var hlen int64
		if err := st.Pool().QueryRow(context.Background(), `SELECT history_len FROM instances WHERE id = $1`, id).Scan(&hlen); err != nil || hlen != 2 {
			t.Errorf("%s: history length %d (%v), want 2", id, hlen, err)
		}
	}
	// After the merged attempt failed, every step ran in a savepoint, in
	// transactions of at most maxSavepoints steps that together ran each
	// step once (the blocker's two steps commit alone).
	if shared := checkSavepointCap(t, commits()[before:]); shared != n {
		t.Errorf("transactions of several steps ran %d steps, want %d: commits %v", shared, n, commits())
	}
}

// Steps that may fail alone (here subscriptions) each run in a savepoint:
// a batch of more than maxSavepoints of them runs in several transactions.
func TestSavepointStepsSplitTransactions(t *testing.T) {
	st, commits := oneWriter(t, 256)
	const n = maxSavepoints + 20
	ids := make([]string, n)
	steps := make([]persistence.Step, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%03d", i)
		steps[i] = persistence.Step{Instance: ids[i], Epoch: 1,
			Subscribe: []persistence.Subscription{{Channel: "c", Mode: persistence.Broadcast}}}
	}
	mergeInstances(t, st, ids...)
	before := len(commits())
	_, errs := applyAsOneBatch(t, st, steps)
	for i, err := range errs {
		if err != nil {
			t.Errorf("step %d: %v", i, err)
		}
	}
	var subs int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM subscriptions WHERE channel = 'c'`).Scan(&subs); err != nil || subs != n {
		t.Errorf("%d subscriptions (%v), want %d", subs, err, n)
	}
	if shared := checkSavepointCap(t, commits()[before:]); shared != n {
		t.Errorf("transactions of several steps ran %d steps, want %d: commits %v", shared, n, commits())
	}
}

func TestDeferSavepoints(t *testing.T) {
	var batch []*writeReq
	for i := range 3 * maxSavepoints {
		batch = append(batch, &writeReq{savepoint: i%3 != 0, ops: []op{{name: "x"}}})
	}
	deferSavepoints(batch)
	saved, later := 0, 0
	for i, r := range batch {
		switch {
		case r.later:
			later++
			if r.savepoint || r.ops != nil {
				t.Fatalf("step %d: later but still has its savepoint or statements", i)
			}
		case r.savepoint:
			saved++
			if later > 0 {
				t.Fatalf("step %d runs in a savepoint after a step left for later", i)
			}
		}
	}
	if saved != maxSavepoints || later != maxSavepoints {
		t.Fatalf("%d in savepoints, %d later; want %d and %d", saved, later, maxSavepoints, maxSavepoints)
	}
	for i, r := range batch {
		if i%3 == 0 && r.later {
			t.Fatalf("step %d needs no savepoint but was left for later", i)
		}
	}
}
