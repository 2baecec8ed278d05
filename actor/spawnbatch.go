package actor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor/internal/journal"
	"github.com/nornlabs/norn/persistence"
)

// SpawnItem is one instance of SpawnBatchID: its ID (as WithID) and its
// input.
type SpawnItem[In any] struct {
	ID    string
	Input In
}

// SpawnBatch starts one instance of wf per input, all in one store step
// (one write per table on PostgreSQL), which makes fanning out thousands of
// jobs cost a few commits instead of one each. It returns their PIDs, in
// order, once every instance is durable; on error none was created. From
// then on each runs as one Spawn started: those this node owns start here
// at once, the others where they belong.
//
// Everything is checked before anything is written: an input that does not
// encode or is over Config.MaxPayload fails the call with a *BatchError
// naming it. A batch is one transaction: split very large ones (tens of
// thousands) so that no commit holds the store for long.
func SpawnBatch[In, Out any](ctx context.Context, sys *System, wf *WorkflowDef[In, Out], inputs []In) ([]PID, error) {
	spawned, err := spawnBatch(ctx, sys, wf, len(inputs), func(i int) (string, In) { return "", inputs[i] })
	if err != nil {
		return nil, err
	}
	pids := make([]PID, len(spawned))
	for i, s := range spawned {
		pids[i] = s.PID
	}
	return pids, nil
}

// SpawnBatchID is SpawnBatch with an ID for each instance, what makes a
// batch safe to retry as SpawnID makes one spawn: an item whose ID an
// instance of wf already has is not started again (its Spawned says
// Existed), while the others are created. An ID that belongs to an
// instance of another workflow fails the whole batch, nothing written, with
// a *BatchError naming the item around an *IDConflictError; so does an
// empty ID, an invalid one, or one given twice in the batch
// (ErrInvalidInput).
func SpawnBatchID[In, Out any](ctx context.Context, sys *System, wf *WorkflowDef[In, Out], items []SpawnItem[In]) ([]Spawned, error) {
	for i := range items {
		if items[i].ID == "" {
			return nil, &BatchError{Index: i, Err: fmt.Errorf("%w: SpawnBatchID needs an ID for every item", ErrInvalidInput)}
		}
	}
	return spawnBatch(ctx, sys, wf, len(items), func(i int) (string, In) { return items[i].ID, items[i].Input })
}

// spawnBatch is SpawnBatch and SpawnBatchID: item gives the ID ("" for a
// fresh one) and input of each of the n instances.
func spawnBatch[In, Out any](ctx context.Context, sys *System, wf *WorkflowDef[In, Out], n int, item func(i int) (string, In)) ([]Spawned, error) {
	if wf == nil {
		return nil, fmt.Errorf("%w: nil workflow", ErrUnknownWorkflow)
	}
	if err := sys.checkRegistered(wf); err != nil {
		return nil, err
	}
	ids, inputs := make([]string, n), make([][]byte, n)
	seen := make(map[string]int, n)
	for i := range n {
		id, in := item(i)
		input, err := sys.encode(in)
		if err == nil {
			err = sys.checkPayload("input", input)
		}
		if id == "" {
			id = wf.Name() + "-" + newSortableID()
		}
		if err == nil {
			err = validID("instance ID", id)
		}
		if j, ok := seen[id]; ok && err == nil {
			err = fmt.Errorf("%w: instance ID %q given twice, at %d and %d", ErrInvalidInput, id, j, i)
		}
		if err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
		seen[id] = i
		ids[i], inputs[i] = id, input
	}
	if err := sys.enter(); err != nil {
		return nil, err
	}
	defer sys.leave()
	if n == 0 {
		return []Spawned{}, nil
	}
	return sys.createMany(ctx, wf, ids, inputs)
}

// createMany makes the instances durable in one step and sees that they
// run, as create does for one: each that no start here is in progress for
// and that this node owns is created under this node's lease and launched
// at once (no lease round trip, no history read); the others are created
// without a lease and woken. Hooks fire after the commit.
func (s *System) createMany(ctx context.Context, def Definition, ids []string, inputs [][]byte) ([]Spawned, error) {
	held := make([]bool, len(ids))
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil, ErrStopped
	}
	for i, id := range ids {
		_, live := s.acts[id]
		if !live && !s.starts.Starting(id) && s.owns(id) {
			held[i] = true
			s.starts.Begin(id)
		}
	}
	s.mu.Unlock()
	now := time.Now()
	step := persistence.Step{CreateMany: make([]persistence.NewInstance, len(ids))}
	for i, id := range ids {
		inst := persistence.Instance{ID: id, Workflow: def.Name(), Status: persistence.StatusRunning, Input: inputs[i], HistoryLen: 1}
		if held[i] {
			// The store starts the lease on its own clock (see create).
			inst.LeaseOwner, inst.LeaseEpoch, step.LeaseTTL = s.cfg.NodeID, 1, s.cfg.LeaseTTL
		}
		started := persistence.Event{Seq: 0, Kind: EventStarted, Name: def.Name(), Ref: s.codec.Name(), Payload: inputs[i], At: now}
		step.CreateMany[i] = persistence.NewInstance{Instance: inst, History: []persistence.Event{started}}
	}
	res, err := s.store.Apply(ctx, step)
	if err != nil {
		for i, id := range ids {
			if held[i] {
				s.endStart(id, false)
			}
		}
		if cause := s.batchSpawnCause(ids, err); cause != nil {
			return nil, cause // refused: nothing was written
		}
		// The step may have committed all the same (a cancelled ctx, a
		// lost reply): look, so that instances created under our lease
		// run.
		s.wakeMany(ids)
		return nil, fmt.Errorf("norn: spawn batch of %d: %w", len(ids), err)
	}
	out := make([]Spawned, len(ids))
	existed := res.Existed
	var woken []string
	for i, id := range ids {
		out[i].PID = PID(id)
		if len(existed) > 0 && existed[0] == i {
			existed = existed[1:]
			out[i].Existed = true
			if held[i] {
				// Whoever created it runs it (see create).
				s.endStart(id, true)
			}
			continue
		}
		s.hook(HookEvent{Kind: HookInstanceStarted, Instance: id, Workflow: def.Name()})
		if !held[i] {
			woken = append(woken, id)
			continue
		}
		s.hook(HookEvent{Kind: HookInstanceActivated, Instance: id, Workflow: def.Name()})
		c := &step.CreateMany[i]
		a := newActivation(s, def, c.Instance, journal.Events(c.History))
		a.quietMail = true
		s.launch(a)
	}
	s.wakeMany(woken)
	return out, nil
}

// batchSpawnCause is the error of a batch spawn the store refused before
// writing anything, naming the item at fault where it can tell: an ID of
// another workflow, an invalid record. Nil for any other error.
func (s *System) batchSpawnCause(ids []string, err error) error {
	var conflict *persistence.IDConflictError
	var inv *persistence.InvalidError
	switch {
	case errors.As(err, &conflict):
		e := &IDConflictError{ID: conflict.ID, Workflow: conflict.Workflow, Requested: conflict.Requested}
		for i, id := range ids {
			if id == conflict.ID {
				return &BatchError{Index: i, Err: e}
			}
		}
		return e
	case errors.As(err, &inv):
		// Field is "CreateMany[i]…".
		if rest, ok := strings.CutPrefix(inv.Field, "CreateMany["); ok {
			if j := strings.IndexByte(rest, ']'); j > 0 {
				if n, e := strconv.Atoi(rest[:j]); e == nil && n >= 0 && n < len(ids) {
					return &BatchError{Index: n, Err: err}
				}
			}
		}
		return err
	}
	return nil
}
