package norntest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/norntest"
	"github.com/nornlabs/norn/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type approval struct{ OK bool }

var charge = actor.Activity("charge", func(ctx context.Context, cents int) (string, error) {
	return "", errors.New("the real payment API is not reachable from tests")
})

// approvalFlow waits up to 48 hours for an approval, then charges; without
// one it is rejected.
var approvalFlow = actor.Workflow("approval", func(ctx *actor.Context, cents int) (string, error) {
	start := ctx.Now()
	m, err := actor.Receive[approval](ctx, mailbox.Timeout(48*time.Hour))
	if errors.Is(err, actor.ErrTimeout) {
		return "expired after " + ctx.Now().Sub(start).String(), nil
	}
	if err != nil {
		return "", err
	}
	if !m.Value.OK {
		return "rejected", nil
	}
	return charge.Run(ctx, cents)
})

func TestTimeoutOf48HoursSkipsTime(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(approvalFlow), Timeout: 20 * time.Second})
	start := env.Now()
	pid := norntest.Spawn(env, approvalFlow, 1000)
	got, err := norntest.Await(env, approvalFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	if got != "expired after 48h0m0s" {
		t.Fatalf("result %q, want the timeout branch after 48h of virtual time", got)
	}
	if d := env.Now().Sub(start); d != 48*time.Hour {
		t.Fatalf("virtual clock moved %v, want exactly 48h", d)
	}
}

func TestApprovalBeforeTimeoutRunsMock(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(approvalFlow)})
	norntest.Mock(env, charge, func(_ context.Context, cents int) (string, error) {
		return "ch-" + time.Duration(cents).String(), nil
	})
	start := env.Now()
	pid := norntest.Spawn(env, approvalFlow, 1000)
	env.AwaitStatus(pid, actor.StatusWaiting)
	// What it waits for: an approval, until 48 hours of virtual time.
	w := env.AwaitReceive(pid, "norntest_test.approval")
	if !w.Due.Equal(start.Add(48 * time.Hour)) {
		t.Fatalf("the receive's timeout is due %v, want 48h after %v", w.Due, start)
	}
	env.Advance(47 * time.Hour)
	if err := env.System().Send(env.Ctx(), pid, approval{OK: true}); err != nil {
		t.Fatal(err)
	}
	got, err := norntest.Await(env, approvalFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	if got != "ch-1µs" {
		t.Fatalf("result %q, want the mocked charge's", got)
	}
	if n := env.Executions(pid, "charge:1"); n != 1 {
		t.Fatalf("charge ran %d times, want 1", n)
	}
}

// retried fails twice with an hour's back-off between attempts.
var flaky = actor.Activity("flaky", func(ctx context.Context, _ int) (int, error) {
	info, _ := actor.Info(ctx)
	if info.Attempt < 3 {
		return 0, errors.New("not yet")
	}
	return info.Attempt, nil
}, actor.WithRetry(supervisor.RetryPolicy{Initial: time.Hour, Multiplier: 1, MaxAttempts: 5}))

var retryFlow = actor.Workflow("retry", func(ctx *actor.Context, _ int) (time.Duration, error) {
	start := ctx.Now()
	if _, err := flaky.Run(ctx, 0); err != nil {
		return 0, err
	}
	return ctx.Now().Sub(start), nil
})

func TestRetryBackoffOnVirtualClock(t *testing.T) {
	t.Parallel()
	env := norntest.New(t, norntest.Options{Workflows: actor.Register(retryFlow)})
	pid := norntest.Spawn(env, retryFlow, 0)
	got, err := norntest.Await(env, retryFlow, pid)
	if err != nil {
		t.Fatal(err)
	}
	if got != 2*time.Hour {
		t.Fatalf("workflow saw %v pass, want 2h (two back-offs of an hour)", got)
	}
	if n := env.Executions(pid, "flaky:1"); n != 3 {
		t.Fatalf("flaky ran %d times, want 3", n)
	}
}
