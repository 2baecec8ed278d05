package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/supervisor"
)

// Order is the workflow's input.
type Order struct {
	N     int
	Item  string
	Qty   int
	Cents int // unit price
}

// ID is the order's instance ID.
func (o Order) ID() string { return fmt.Sprintf("order-%d", o.N) }

// Receipt is what the charge activity returns.
type Receipt struct {
	ChargeID string
	Cents    int
}

// Result is the workflow's output.
type Result struct {
	Tracking string
	Cents    int
}

// executions counts activity calls this process ran (retries included); a
// resumed run shows that finished steps were not run again.
var executions atomic.Int64

var reserve = actor.Activity("reserve", func(ctx context.Context, o Order) (string, error) {
	executions.Add(1)
	if err := work(ctx, 400*time.Millisecond); err != nil {
		return "", err
	}
	fmt.Printf("  %s  reserve  %d × %s\n", o.ID(), o.Qty, o.Item)
	return "rsv-" + o.ID(), nil
})

// charge fails the first attempt of every third order, as a flaky payment
// API would; the retry policy tries again after 50 ms, 100 ms, … (5 attempts
// at most).
var charge = actor.Activity("charge", func(ctx context.Context, o Order) (Receipt, error) {
	executions.Add(1)
	info, _ := actor.Info(ctx)
	if err := work(ctx, 400*time.Millisecond); err != nil {
		return Receipt{}, err
	}
	cents := o.Qty * o.Cents
	if o.N%3 == 0 && info.Attempt == 1 {
		fmt.Printf("  %s  charge   %s declined (attempt %d, key %s): retrying\n",
			o.ID(), dollars(cents), info.Attempt, actor.IdempotencyKey(ctx))
		return Receipt{}, errors.New("card network timeout")
	}
	fmt.Printf("  %s  charge   %s ok (attempt %d, key %s)\n",
		o.ID(), dollars(cents), info.Attempt, actor.IdempotencyKey(ctx))
	return Receipt{ChargeID: "ch-" + o.ID(), Cents: cents}, nil
}, actor.WithRetry(supervisor.Exponential(50*time.Millisecond, 2, time.Second, 5)))

var ship = actor.Activity("ship", func(ctx context.Context, o Order) (string, error) {
	executions.Add(1)
	if err := work(ctx, 400*time.Millisecond); err != nil {
		return "", err
	}
	tracking := fmt.Sprintf("TRK%05d", o.N*7919%100000)
	fmt.Printf("  %s  ship     %s\n", o.ID(), tracking)
	return tracking, nil
})

// orderFlow is the workflow. It is plain Go: each Run is recorded, so a
// restarted order replays the recorded results and carries on.
var orderFlow = actor.Workflow("order", func(ctx *actor.Context, o Order) (Result, error) {
	if _, err := reserve.Run(ctx, o); err != nil {
		return Result{}, err
	}
	receipt, err := charge.Run(ctx, o)
	if err != nil {
		return Result{}, err
	}
	tracking, err := ship.Run(ctx, o)
	if err != nil {
		return Result{}, err
	}
	return Result{Tracking: tracking, Cents: receipt.Cents}, nil
})

// work stands in for a call to another service.
func work(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
