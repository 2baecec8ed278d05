// Package norntest tests workflows: a node on a temporary SQLite store with
// a virtual clock, activity mocks, waits that read well in go test output,
// crash-everywhere, and replay of stored histories.
//
// # Virtual time
//
// New starts a node whose Clock stands still until moved. The waits of the
// kit (Env.AwaitStatus, Env.AwaitEnd, Await) move it to the next due time
// whenever the node is idle (every instance parked, nothing running: see
// actor.System.Idle), so a test of a 48-hour timeout takes milliseconds.
// Env.Advance moves it by a given step, firing what comes due on the way
// in order. Timers, receive timeouts, Context.Now and activity retry
// back-offs follow the clock; activity timeouts, leases and passivation
// stay on real time (see actor.Clock). Options.ManualTime leaves the clock
// to Advance alone.
//
//	func TestApprovalExpires(t *testing.T) {
//		env := norntest.New(t, norntest.Options{Workflows: actor.Register(approvalFlow)})
//		norntest.Mock(env, charge, func(ctx context.Context, cents int) (string, error) {
//			return "ch-test", nil
//		})
//		pid := norntest.Spawn(env, approvalFlow, 1000)
//		got, err := norntest.Await(env, approvalFlow, pid) // 48 virtual hours pass
//		if err != nil || got != "expired" {
//			t.Fatalf("got %q, %v", got, err)
//		}
//	}
//
// # Crash everywhere
//
// CrashEverywhere runs a workflow once, then once per step boundary with
// a crash there, and fails the test where a run's outcome, recorded values
// or activity executions differ: the check that the code is deterministic
// and its activities fit at-least-once execution.
//
//	norntest.CrashEverywhere(t, norntest.Options{Workflows: actor.Register(orderFlow)}, orderFlow, order, nil)
//
// # Replay
//
// Replay checks today's code against a history file written by
// `norn history --export ID` (or Env.WriteHistory), so that a change to a
// workflow is tested against the instances it will meet in production:
//
//	norntest.Replay(t, orderFlow, "testdata/order-1.json")
package norntest
