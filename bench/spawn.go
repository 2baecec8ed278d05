package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor"
)

// endCounter closes a workflow's channel once that many of its instances
// have completed (the end committed): the hooks of the spawn workload.
type endCounter struct {
	mu     sync.Mutex
	left   map[string]int
	done   map[string]chan struct{}
	failed atomic.Int64
}

func newEndCounter() *endCounter {
	return &endCounter{left: map[string]int{}, done: map[string]chan struct{}{}}
}

// expect arms the count of workflow wf: the channel returned closes after
// n completions.
func (c *endCounter) expect(wf string, n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.left[wf], c.done[wf] = n, make(chan struct{})
	return c.done[wf]
}

func (c *endCounter) Observe(_ context.Context, e actor.HookEvent) {
	switch e.Kind {
	case actor.HookInstanceFailed, actor.HookInstanceCancelled:
		c.failed.Add(1)
	case actor.HookInstanceCompleted:
		c.mu.Lock()
		defer c.mu.Unlock()
		if n, ok := c.left[e.Workflow]; ok {
			c.left[e.Workflow] = n - 1
			if n == 1 {
				close(c.done[e.Workflow])
			}
		}
	}
}

// runSpawn measures fanning out -n jobs (default 10,000) two ways on one
// node: Spawn one by one from -spawners goroutines, then SpawnBatch of
// -spawn-batch inputs (default 1,000) from as many. Each job is a workflow
// that completes at once. For each way it reports spawns/s (until every
// spawn call has returned: all durable), jobs/s (until every job's end
// has committed) and the store's commits per job over the whole phase
// (the spawn's share plus the end's, which group commit shares).
func runSpawn(ctx context.Context, r *runner) (result, error) {
	n := size(10000, r.opts.N)
	batch := max(1, r.opts.SpawnBatch)
	res := result{N: fmtInt(int64(n)), Unit: "spawn/s", Metrics: map[string]float64{}}
	job := func(name string) *actor.WorkflowDef[int, int] {
		return actor.Workflow(name, func(_ *actor.Context, i int) (int, error) { return i + 1, nil })
	}
	one, many := job("spawn-one"), job("spawn-batch")
	ends := newEndCounter()
	nd, err := r.start(ctx, actor.Config{Workflows: actor.Register(one, many), PassivateAfter: r.opts.PassivateAfter, Hooks: ends})
	if err != nil {
		return res, err
	}
	defer func() { _ = nd.Close() }()
	commits := &commitCounter{}
	remove := nd.store.ObserveCommits(commits)
	defer remove()

	phases := []struct {
		name  string
		wf    *actor.WorkflowDef[int, int]
		calls int
		spawn func(ctx context.Context, i int) error
	}{
		{"one", one, n, func(ctx context.Context, i int) error {
			_, err := actor.Spawn(ctx, nd.sys, one, i)
			return err
		}},
		{"batch", many, (n + batch - 1) / batch, func(ctx context.Context, i int) error {
			inputs := make([]int, 0, batch)
			for j := i * batch; j < min(n, (i+1)*batch); j++ {
				inputs = append(inputs, j)
			}
			_, err := actor.SpawnBatch(ctx, nd.sys, many, inputs)
			return err
		}},
	}
	for _, p := range phases {
		r.logf("spawn: %d jobs, %s (%d calls from %d goroutines)", n, p.name, p.calls, r.opts.Spawners)
		done := ends.expect(p.wf.Name(), n)
		c0 := commits.n.Load()
		t0 := time.Now()
		if err := parallel(ctx, p.calls, r.opts.Spawners, p.spawn); err != nil {
			return res, fmt.Errorf("%s: spawn: %w", p.name, err)
		}
		spawned := time.Since(t0)
		select {
		case <-done:
		case <-time.After(r.opts.Timeout):
			return res, fmt.Errorf("%s: not every job completed within %v", p.name, r.opts.Timeout)
		case <-ctx.Done():
			return res, ctx.Err()
		}
		wall := time.Since(t0)
		perJob := float64(commits.n.Load()-c0) / float64(n)
		res.Metrics[p.name+"_spawn_per_s"] = rate(n, spawned)
		res.Metrics[p.name+"_jobs_per_s"] = rate(n, wall)
		res.Metrics[p.name+"_commits_per_job"] = perJob
		if res.Extra != "" {
			res.Extra += "; "
		}
		label := p.name
		if p.name == "batch" {
			label = fmt.Sprintf("batch of %d", batch)
			res.Throughput, res.Wall = rate(n, spawned), wall
		}
		res.Extra += fmt.Sprintf("%s: spawn %s/s, done %s jobs/s, %.3f commits/job", label, fmtRate(rate(n, spawned)), fmtRate(rate(n, wall)), perJob)
	}
	if f := ends.failed.Load(); f > 0 {
		return res, fmt.Errorf("%d jobs did not complete", f)
	}
	return res, nil
}
