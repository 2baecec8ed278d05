package chaosrun

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// Result is the outcome of one workload of a run, read from the store after
// the workers have stopped.
type Result struct {
	Store string
	Mode  string // "chain", "queue" or "tx"
	// Items: chain workflows asked for, or queue messages published.
	Items int
	// Completed: chain workflows that completed with the right result and
	// each of their activities recorded once and really run; queue messages
	// received once and recorded.
	Completed int
	// RecordedTwice: an activity ID with two results in one history, or a
	// message received twice (by one consumer or across consumers); in tx
	// mode also a counter increment applied beyond the recorded results.
	RecordedTwice int
	// Counted is the sum of the tx workload's counters (-1 in the other
	// modes): it must equal the tx workflows whose count was recorded.
	Counted int64
	// DupExecutions: side-effect log lines beyond the first per idempotency
	// key. Allowed (activities run at least once), but reported.
	DupExecutions int
	// Lost: a spawn that was acknowledged but is not in the store; a
	// recorded tx count whose increment is missing from its counter; a
	// published message that nobody received and that is not queued any
	// more; a message received by a consumer that ended without recording it.
	Lost int
	// Stuck: not ended when the run ended (at the deadline): chain
	// workflows (including ones never spawned), messages still queued or
	// never published, consumers still running.
	Stuck int
	// Failed: ended failed or cancelled, or completed with a wrong result or
	// a wrong number of activities; a received message nobody published.
	Failed int
	// NeverRan: an activity result recorded with no execution in the
	// side-effect log.
	NeverRan int
	// Kills, Crashes (workers that exited on their own or did not stop
	// cleanly), Elapsed (start to every workload ended, or the deadline) and
	// Seed are the run's, the same for every workload of one run.
	Kills, Crashes int
	Elapsed        time.Duration
	Seed           uint64
	// Notes are the first few problems found, for the log.
	Notes []string
}

// OK reports whether the workload passed: nothing lost, recorded twice,
// stuck, failed or recorded without running, and no worker crashed.
func (r Result) OK() bool {
	return r.Lost == 0 && r.RecordedTwice == 0 && r.Stuck == 0 && r.Failed == 0 && r.NeverRan == 0 && r.Crashes == 0
}

const maxNotes = 10

func (r *Result) note(format string, args ...any) {
	if len(r.Notes) < maxNotes {
		r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	}
}

// History event kinds, as the runtime stores them.
const (
	kindActivity = "activity"
	kindReceived = "received"
)

// check reads the outcome of every workload from the store and the
// side-effect log.
func (r *runner) check(ctx context.Context) ([]Result, error) {
	effects, bad, err := readEffects(r.effects)
	if err != nil {
		return nil, err
	}
	var out []Result
	if r.cfg.Chain {
		res, err := r.checkChain(ctx, effects)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	if r.cfg.Queue {
		res, err := r.checkQueue(ctx, effects)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	if r.cfg.Tx {
		res, err := r.checkTx(ctx, effects)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	if bad > 0 {
		for i := range out {
			out[i].note("%d malformed lines in the side-effect log", bad)
		}
	}
	return out, nil
}

// readEffects counts the side-effect log's lines per idempotency key.
func readEffects(path string) (map[string]int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("side-effect log: %w", err)
	}
	defer f.Close()
	counts, bad := map[string]int{}, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			bad++
			continue
		}
		counts[fields[0]]++
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("side-effect log: %w", err)
	}
	return counts, bad, nil
}

// dupExecutions sums the extra executions of the keys starting with prefix.
func dupExecutions(effects map[string]int, prefix string) int {
	n := 0
	for k, c := range effects {
		if strings.HasPrefix(k, prefix) {
			n += c - 1
		}
	}
	return n
}

// activities collects the recorded activity results of a history by
// activity ID, counting the ones recorded twice and the ones with no
// execution in the side-effect log.
func activities(res *Result, id string, hist []persistence.Event, effects map[string]int) map[string]persistence.Event {
	seen := map[string]persistence.Event{}
	for _, e := range hist {
		if e.Kind != kindActivity {
			continue
		}
		if _, dup := seen[e.Ref]; dup {
			res.RecordedTwice++
			res.note("%s: activity %s recorded twice", id, e.Ref)
			continue
		}
		seen[e.Ref] = e
		if effects[id+"/"+e.Ref] == 0 {
			res.NeverRan++
			res.note("%s: activity %s recorded but never ran", id, e.Ref)
		}
	}
	return seen
}

// checkConcurrency bounds the store reads of the checks.
const checkConcurrency = 4

func (r *runner) checkChain(ctx context.Context, effects map[string]int) (Result, error) {
	res := Result{Mode: "chain", Items: r.cfg.Workflows, Counted: -1, DupExecutions: dupExecutions(effects, chainPrefix(r.run))}
	err := r.checkEnds(ctx, &res, "chain", func(i int) string { return chainID(r.run, i) }, chainSteps, chainWant, effects, nil)
	return res, err
}

// checkEnds reads each of the run's workflows of one kind from the store
// and counts it in res: lost (its spawn was acknowledged, yet it is not in
// the store) or never spawned, stuck, failed, or completed with steps
// activity results and the output want(i). seen, if not nil, is given each
// stored workflow's activity results first.
func (r *runner) checkEnds(ctx context.Context, res *Result, kind string, idOf func(int) string, steps int, want func(int) int,
	effects map[string]int, seen func(i int, acts map[string]persistence.Event)) error {
	var mu sync.Mutex
	return forEach(ctx, r.cfg.Workflows, func(ctx context.Context, i int) error {
		id := idOf(i)
		inst, err := r.st.Instance(ctx, id)
		var hist []persistence.Event
		if err == nil {
			hist, err = r.st.History(ctx, id, 0)
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, persistence.ErrNotFound) && r.acked[item{kind, i}]:
			res.Lost++
			res.note("%s: spawn acknowledged, but not in the store", id)
			return nil
		case errors.Is(err, persistence.ErrNotFound):
			res.Stuck++
			res.note("%s: never spawned (the deadline came first)", id)
			return nil
		case err != nil:
			return err
		}
		acts := activities(res, id, hist, effects)
		if seen != nil {
			seen(i, acts)
		}
		switch {
		case !inst.Status.Terminal():
			res.Stuck++
			res.note("%s: still %s with %d of %d activities", id, inst.Status, len(acts), steps)
		case inst.Status != persistence.StatusCompleted:
			res.Failed++
			res.note("%s: %s: %s", id, inst.Status, inst.Error)
		case len(acts) != steps:
			res.Failed++
			res.note("%s: completed with %d activity results, want %d", id, len(acts), steps)
		default:
			var got int
			if err := json.Unmarshal(inst.Output, &got); err != nil || got != want(i) {
				res.Failed++
				res.note("%s: completed with %q, want %d", id, inst.Output, want(i))
				return nil
			}
			res.Completed++
		}
		return nil
	})
}

func (r *runner) checkQueue(ctx context.Context, effects map[string]int) (Result, error) {
	res := Result{Mode: "queue", Counted: -1, DupExecutions: dupExecutions(effects, consumerPrefix(r.run))}
	published := map[string]bool{}
	for i, id := range r.pubIDs {
		if id == "" {
			res.Stuck++
			res.note("job %d: never published (the deadline came first)", i)
			continue
		}
		published[id] = true
	}
	res.Items = len(published)

	received := map[string]int{}    // message ID → "received" events across consumers
	receivedBy := map[string]bool{} // message ID → received by a consumer that ended
	recorded := map[string]int{}    // message ID → "record" activity results across consumers
	stops := map[string]int{}       // stop message ID → "received" events across consumers
	foreign := 0
	for j := range r.cfg.Consumers {
		id := consumerID(r.run, j)
		inst, err := r.st.Instance(ctx, id)
		switch {
		case errors.Is(err, persistence.ErrNotFound) && r.acked[item{"consumer", j}]:
			res.Lost++
			res.note("%s: spawn acknowledged, but not in the store", id)
			continue
		case errors.Is(err, persistence.ErrNotFound):
			res.Stuck++
			res.note("%s: never spawned (the deadline came first)", id)
			continue
		case err != nil:
			return res, err
		}
		hist, err := r.st.History(ctx, id, 0)
		if err != nil {
			return res, err
		}
		ended := inst.Status.Terminal()
		switch {
		case !ended:
			res.Stuck++
			res.note("%s: still %s", id, inst.Status)
		case inst.Status != persistence.StatusCompleted:
			res.Failed++
			res.note("%s: %s: %s", id, inst.Status, inst.Error)
		}
		ownStops := 0
		for _, e := range hist {
			if e.Kind != kindReceived {
				continue
			}
			switch {
			case published[e.Ref]:
				received[e.Ref]++
				receivedBy[e.Ref] = receivedBy[e.Ref] || ended
			case r.stopIDs[e.Ref]:
				stops[e.Ref]++
				ownStops++
			default:
				foreign++
			}
		}
		if ownStops > 1 {
			res.RecordedTwice += ownStops - 1
			res.note("%s: received %d stops", id, ownStops)
		}
		for ref, e := range activities(&res, id, hist, effects) {
			var msgID string
			if err := json.Unmarshal(e.Payload, &msgID); err != nil {
				res.Failed++
				res.note("%s: activity %s result %q is not a message ID", id, ref, e.Payload)
				continue
			}
			recorded[msgID]++
		}
	}
	for id, n := range stops {
		if n > 1 {
			res.RecordedTwice += n - 1
			res.note("stop %s received %d times", id, n)
		}
	}
	if retries := int(r.pubRetries.Load()) + r.stopsFailed; foreign > retries {
		// A retried Publish may have committed the first time as well;
		// anything beyond that came from nowhere.
		res.Failed += foreign - retries
		res.note("%d received messages that nobody published (%d publish retries)", foreign, retries)
	}

	unconsumed := 0
	for id := range published {
		n, rec := received[id], recorded[id]
		switch {
		case n == 0:
			unconsumed++
			continue
		case n > 1:
			res.RecordedTwice += n - 1
			res.note("message %s received %d times", id, n)
		case rec > 1:
			res.RecordedTwice += rec - 1
			res.note("message %s recorded %d times", id, rec)
		}
		switch {
		case rec > 0:
			res.Completed++
		case receivedBy[id]:
			res.Lost++
			res.note("message %s received by a consumer that ended without recording it", id)
		default:
			res.Stuck++
		}
	}
	if unconsumed > 0 {
		waiting, err := r.waiting(ctx)
		if err != nil {
			return res, err
		}
		queued := min(unconsumed, waiting)
		res.Stuck += queued
		res.Lost += unconsumed - queued
		res.note("%d published messages never received (%d still queued)", unconsumed, waiting)
	}
	return res, nil
}

// forEach runs fn(i) for i in [0, n) on checkConcurrency goroutines and
// returns the first error.
func forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range checkConcurrency {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}
