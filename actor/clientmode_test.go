package actor_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// greeter waits for a name and greets it. The client side of the test does
// not register it: only the node in the child process does.
var greeter = actor.Workflow("greeter", func(ctx *actor.Context, greeting string) (string, error) {
	m, err := actor.Receive[string](ctx)
	if err != nil {
		return "", err
	}
	return greeting + ", " + m.Value, nil
})

const clientNodeID = "client-mode-node"

func init() { registerChildRole("client-mode-node", clientModeNode) }

// clientModeNode runs greeter on the store named by the environment until
// killed. Its recovery scan and passivation are an hour away, so the only
// way the client's mail and cancels reach its parked activations is the
// store's cross-process wake-ups: PostgreSQL's notifications, SQLite's wake
// requests.
func clientModeNode() int {
	ctx := context.Background()
	var st persistence.Store
	var err error
	if url := os.Getenv("NORN_CHILD_PG"); url != "" {
		st, err = postgres.Open(ctx, url, postgres.Options{Logger: testutil.Logger()})
	} else {
		st, err = sqlite.Open(ctx, os.Getenv("NORN_CHILD_DB"), sqlite.Options{})
	}
	if err != nil {
		return childFail("open: %v", err)
	}
	_, err = actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(greeter), NodeID: clientNodeID,
		LeaseTTL: time.Second, RecoveryInterval: time.Hour, PassivateAfter: time.Hour, Logger: testutil.Logger()})
	if err != nil {
		return childFail("start: %v", err)
	}
	childSay("READY")
	select {}
}

// A client System runs nothing itself: what it spawns, sends and cancels
// is run by a node in another process sharing the store.
func TestClientModeDrivesNodeInOtherProcess(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(t *testing.T) (persistence.Store, string)
	}{
		{"sqlite", func(t *testing.T) (persistence.Store, string) {
			path := testutil.SQLitePath(t)
			return testutil.OpenSQLite(t, path), "NORN_CHILD_DB=" + path
		}},
		{"postgres", func(t *testing.T) (persistence.Store, string) {
			url := testutil.PostgresURL(t)
			return openPostgres(t, url), "NORN_CHILD_PG=" + url
		}},
	} {
		t.Run(store.name, func(t *testing.T) {
			st, env := store.open(t)
			// The wake-ups are what is under test: if a store loses one, the
			// test times out instead of the hour-long scan rescuing it.
			client := testutil.StartNode(t, actor.Config{Store: st, Client: true, NodeID: "the-client"})
			ctx := testutil.Ctx(t, liveWait)

			// Spawned before any node runs: the client must not run it.
			pid, err := actor.Spawn(ctx, client, greeter, "hello", actor.WithID("g1"))
			if err != nil {
				t.Fatalf("client spawn of an unregistered workflow: %v", err)
			}
			if inst, err := st.Instance(ctx, string(pid)); err != nil || inst.LeaseOwner != "" {
				t.Fatalf("after a client's spawn: lease owner %q, %v; want none", inst.LeaseOwner, err)
			}
			info, err := client.Inspect(ctx, pid)
			if err != nil || info.Active {
				t.Fatalf("client Inspect: active %v, %v; want an inactive instance", info.Active, err)
			}

			node := startChild(t, "client-mode-node", env)
			node.waitLine(t, "READY", time.Minute)

			testutil.Eventually(t, liveWait, "the node activates g1", func() bool {
				inst, err := client.Inspect(ctx, pid)
				return err == nil && (inst.Node == clientNodeID || inst.Status == actor.StatusWaiting) // waiting: ran, then passivated
			})
			if err := client.Send(ctx, pid, "world"); err != nil {
				t.Fatal(err)
			}
			if got, err := actor.Await(ctx, client, greeter, pid); err != nil || got != "hello, world" {
				t.Fatalf("Await = %q, %v; want the node's result", got, err)
			}

			pid2, err := actor.Spawn(ctx, client, greeter, "bye", actor.WithID("g2"))
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, liveWait, "the node activates g2", func() bool {
				inst, err := client.Inspect(ctx, pid2)
				return err == nil && (inst.Node == clientNodeID || inst.Status == actor.StatusWaiting)
			})
			if err := client.Cancel(ctx, pid2, "not needed"); err != nil {
				t.Fatal(err)
			}
			if _, err := actor.Await(ctx, client, greeter, pid2); !errors.Is(err, actor.ErrCancelled) {
				t.Fatalf("Await after a client's Cancel = %v; want ErrCancelled", err)
			}
		})
	}
}

// In a cluster a client System hands its wake-ups to the owners (it owns
// nothing, and the nodes here scan only every hour), and refuses to start
// as a member that the cluster gives buckets.
func TestClientModeInCluster(t *testing.T) {
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	net := newTableNet()
	net.set([]string{"a", "owner-too"}, nil)
	_, err := actor.Start(testutil.Ctx(t, time.Minute), actor.Config{Store: st, Client: true, NodeID: "owner-too",
		Cluster: net.node(), Logger: testutil.Logger()})
	var conflict *actor.RoleConflictError
	if !errors.Is(err, actor.ErrInvalidInput) || !errors.As(err, &conflict) {
		t.Fatalf("client Start as an owning member = %v, want a *RoleConflictError (ErrInvalidInput)", err)
	}
	net.set([]string{"a"}, nil)
	l := newLiveness()
	testutil.StartNode(t, slowNets(actor.Config{Store: st, Workflows: actor.Register(waitMsg), NodeID: "a",
		Cluster: net.node(), Hooks: l.hooks("a")}))
	client := testutil.StartNode(t, slowNets(actor.Config{Store: st, Client: true, NodeID: "c", Cluster: net.node()}))
	ctx := testutil.Ctx(t, liveWait)
	pid, err := actor.Spawn(ctx, client, waitMsg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Send(ctx, pid, "via the owner"); err != nil {
		t.Fatal(err)
	}
	if got, err := actor.Await(ctx, client, waitMsg, pid); err != nil || got != "via the owner" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	if nodes := l.nodes(string(pid)); len(nodes) == 0 || slices.ContainsFunc(nodes, func(n string) bool { return n != "a" }) {
		t.Fatalf("activations on %v, want only the owner a", nodes)
	}
}
