package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// An event emitted in a transactional activity lands in the outbox with
// the activity's result; one emitted by a failed attempt does not.
func TestEmitTx(t *testing.T) {
	t.Parallel()
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	attempts := 0
	act := actor.TxActivity("ship", func(ctx context.Context, tx actor.Tx, order string) (string, error) {
		attempts++
		e := event.New()
		e.SetType("order.shipped")
		if err := e.SetData("application/json", map[string]any{"order": order, "attempt": attempts}); err != nil {
			return "", err
		}
		id, err := events.EmitTx(ctx, e)
		if err != nil {
			return "", err
		}
		if attempts == 1 {
			return "", errors.New("flaky")
		}
		return id, nil
	})
	wf := actor.Workflow("ship-wf", func(ctx *actor.Context, order string) (string, error) { return act.Run(ctx, order) })
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 60*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	id, err := actor.Await(ctx, sys, wf, pid)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(pid) + "/ship:1/emit:1"; id != want {
		t.Fatalf("event ID %q, want %q", id, want)
	}
	recs, err := st.ListOutbox(ctx, persistence.OutboxPending, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID != id {
		t.Fatalf("outbox holds %d events (%+v), want only %s", len(recs), recs, id)
	}
	var got struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(recs[0].Data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != "order.shipped" || got.Data["attempt"] != float64(2) {
		t.Fatalf("relayed event %s, want the second attempt's order.shipped", recs[0].Data)
	}
	if _, err := events.EmitTx(context.Background(), event.New()); !errors.Is(err, actor.ErrNotTransactional) {
		t.Fatalf("outside an activity: %v, want ErrNotTransactional", err)
	}
}
