package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
)

// purgeBatch is the batch of the purge workload's full-speed
// PurgeInstances calls, as `norn purge --fast` uses.
const purgeBatch = 500

// seedWriters is how many goroutines seed ended instances: enough
// concurrent Apply calls to fill each group commit.
const seedWriters = 256

// seedEnded writes n ended instances through the store, each one step
// (created completed, with the five history events of a chain workflow),
// from seedWriters goroutines: the drivers commit concurrent steps
// together, so this runs at the store's group-commit rate rather than one
// commit per instance.
func seedEnded(ctx context.Context, st persistence.Store, n int, progress func(done int)) error {
	var done atomic.Int64
	return parallel(ctx, n, seedWriters, func(ctx context.Context, i int) error {
		id := fmt.Sprintf("ended-%09d", i)
		in := []byte(fmt.Sprint(i))
		ev := func(seq int64, kind, name string, payload []byte) persistence.Event {
			return persistence.Event{Seq: seq, Kind: kind, Name: name, Payload: payload}
		}
		_, err := st.Apply(ctx, persistence.Step{
			Create: &persistence.Instance{ID: id, Workflow: "ended", Status: persistence.StatusCompleted, Input: in},
			History: []persistence.Event{ev(0, "started", "ended", in), ev(1, "activity", "inc", []byte(fmt.Sprint(i+1))),
				ev(2, "activity", "inc", []byte(fmt.Sprint(i+2))), ev(3, "activity", "inc", []byte(fmt.Sprint(i+3))),
				ev(4, "completed", "ended", []byte(fmt.Sprint(i+3)))},
		})
		if err != nil {
			return fmt.Errorf("seed %s: %w", id, err)
		}
		if d := done.Add(1); d%100000 == 0 && progress != nil {
			progress(int(d))
		}
		return nil
	})
}

// chainRate runs m chain workflows on the node (spawned from -spawners
// goroutines, each awaited) and returns their rate, spawn of the first to
// end of the last.
func chainRate(ctx context.Context, r *runner, nd *node, wf *actor.WorkflowDef[int, int], m int) (float64, error) {
	actx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	t0 := time.Now()
	err := parallel(actx, m, r.opts.Spawners, func(ctx context.Context, i int) error {
		pid, err := actor.Spawn(ctx, nd.sys, wf, i)
		if err != nil {
			return err
		}
		got, err := actor.Await(ctx, nd.sys, wf, pid)
		if err == nil && got != i+3 {
			err = fmt.Errorf("%s returned %d, want %d", pid, got, i+3)
		}
		return err
	})
	return rate(m, time.Since(t0)), err
}

// purgeAll purges what f selects, batch after batch, until a batch finds
// nothing, stop is closed or at least upTo instances went (0: no bound).
// paced rests after each batch as long as it took, as a node's retention
// loop does. It returns how many went.
func purgeAll(ctx context.Context, st persistence.Store, f persistence.PurgeFilter, upTo int, stop <-chan struct{}, paced bool) (int, error) {
	total := 0
	for upTo <= 0 || total < upTo {
		select {
		case <-stop:
			return total, nil
		default:
		}
		start := time.Now()
		n, err := st.PurgeInstances(ctx, f)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
		if paced {
			select {
			case <-stop:
				return total, nil
			case <-time.After(time.Since(start)):
			}
		}
	}
	return total, nil
}

// purgeDuringChain runs m chain workflows while a purge runs, and returns
// the chain's rate, how many instances the purge deleted meanwhile, at
// what rate, and whether the purge ran out before the chain ended.
func purgeDuringChain(ctx context.Context, r *runner, nd *node, wf *actor.WorkflowDef[int, int], m int, f persistence.PurgeFilter, paced bool) (chain float64, purged int, purgeRate float64, short bool, err error) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var purgeErr error
	var purgeEnd time.Time
	t0 := time.Now()
	wg.Go(func() {
		purged, purgeErr = purgeAll(ctx, nd.store, f, 0, stop, paced)
		purgeEnd = time.Now()
	})
	chain, err = chainRate(ctx, r, nd, wf, m)
	chainEnd := time.Now()
	close(stop)
	wg.Wait()
	if err == nil {
		err = purgeErr
	}
	return chain, purged, rate(purged, purgeEnd.Sub(t0)), purgeEnd.Before(chainEnd), err
}

// runPurge: seed N ended instances (default 100,000) straight through the
// store, then measure
//   - the chain workload's rate (-m workflows, default 2000) alone;
//   - the purge rate alone, over the first half of the seeded instances,
//     in batches of 500 back to back (as `norn purge --fast` does);
//   - the chain rate again while a purge runs at full speed, and the purge
//     rate meanwhile;
//   - the same with the purge paced as a node's retention loop and plain
//     `norn purge` pace it (batches of 100, resting as long as each took);
//
// and check that the purge took every seeded instance and no chain
// instance (they ended after the cut-off).
func runPurge(ctx context.Context, r *runner) (result, error) {
	n := size(100000, r.opts.N)
	m := size(2000, r.opts.M)
	res := result{N: fmtInt(int64(n)), Unit: "inst/s", Metrics: map[string]float64{}}
	wf := chainWorkflow()
	// Retention off: the workload purges, the node must not.
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(wf), PassivateAfter: r.opts.PassivateAfter, Retention: -1})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()

	r.logf("seeding %d ended instances", n)
	seedStart := time.Now()
	if err := seedEnded(ctx, nd.store, n, func(d int) { r.logf("seeded %d", d) }); err != nil {
		return res, err
	}
	seedRate := rate(n, time.Since(seedStart))
	res.Metrics["seed_per_s"] = seedRate
	cut := time.Now()
	f := persistence.PurgeFilter{Before: cut, Workflow: "ended", Limit: purgeBatch}
	if c, err := nd.store.CountPurgeable(ctx, f); err != nil || c != n {
		return res, fmt.Errorf("purgeable after seeding = %d, %v; want %d", c, err, n)
	}
	size0, _ := nd.diskBytes(ctx)

	r.logf("chain alone: %d workflows", m)
	alone, err := chainRate(ctx, r, nd, wf, m)
	if err != nil {
		return res, fmt.Errorf("chain alone: %w", err)
	}

	r.logf("purge alone: %d instances", n/2)
	p0 := time.Now()
	first, err := purgeAll(ctx, nd.store, f, n/2, nil, false)
	if err != nil {
		return res, fmt.Errorf("purge alone: %w", err)
	}
	purgeAlone := rate(first, time.Since(p0))

	r.logf("chain while purging at full speed")
	withPurge, during, purgeDuring, short1, err := purgeDuringChain(ctx, r, nd, wf, m, f, false)
	if err != nil {
		return res, fmt.Errorf("chain while purging: %w", err)
	}
	r.logf("chain while purging paced, as a node's retention and norn purge do (batches of 100)")
	paced := f
	paced.Limit = 100
	withPaced, duringPaced, pacedRate, short2, err := purgeDuringChain(ctx, r, nd, wf, m, paced, true)
	if err != nil {
		return res, fmt.Errorf("chain while purging paced: %w", err)
	}
	rest, err := purgeAll(ctx, nd.store, f, 0, nil, false)
	if err != nil {
		return res, fmt.Errorf("purge the rest: %w", err)
	}
	if got := first + during + duringPaced + rest; got != n {
		return res, fmt.Errorf("purged %d of %d seeded instances", got, n)
	}
	chains, err := nd.store.ListInstances(ctx, persistence.InstanceQuery{Workflow: wf.Name(), Limit: persistence.MaxQueryLimit})
	if err != nil || len(chains) != min(3*m, persistence.MaxQueryLimit) {
		return res, fmt.Errorf("chain instances after the purge: %d, %v; want %d (none purged)", len(chains), err, 3*m)
	}
	size1, _ := nd.diskBytes(ctx)

	res.Throughput = purgeAlone
	res.Metrics["purge_alone_per_s"] = purgeAlone
	res.Metrics["purge_during_chain_per_s"] = purgeDuring
	res.Metrics["purge_paced_during_chain_per_s"] = pacedRate
	res.Metrics["chain_alone_wf_per_s"] = alone
	res.Metrics["chain_during_purge_wf_per_s"] = withPurge
	res.Metrics["chain_during_paced_purge_wf_per_s"] = withPaced
	note := ""
	if short1 || short2 {
		note = "; a purge ran out before its chain run ended: raise -n or lower -m"
	}
	res.Extra = fmt.Sprintf("purge alone %s inst/s (batches of %d back to back); chain %s wf/s alone, %s wf/s (%.0f%%) while purging so at %s inst/s, %s wf/s (%.0f%%) while purging paced (retention loop, norn purge) at %s inst/s%s; seed %s inst/s; store %s before, %s after",
		fmtRate(purgeAlone), purgeBatch, fmtRate(alone), fmtRate(withPurge), 100*withPurge/alone, fmtRate(purgeDuring),
		fmtRate(withPaced), 100*withPaced/alone, fmtRate(pacedRate), note, fmtRate(seedRate), fmtBytes(size0), fmtBytes(size1))
	return res, nil
}
