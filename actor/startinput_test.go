package actor_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// A nil *sqlite.Store or *postgres.Store (an Open error ignored) is a
// non-nil persistence.Store: Start refuses it with a typed error instead
// of panicking on its first use.
func TestStartRefusesTypedNilStore(t *testing.T) {
	t.Parallel()
	ctx := testutil.Ctx(t, time.Minute)
	for _, st := range []persistence.Store{(*sqlite.Store)(nil), (*postgres.Store)(nil)} {
		sys, err := actor.Start(ctx, actor.Config{Store: st, Logger: testutil.Logger()})
		if !errors.Is(err, actor.ErrInvalidInput) || sys != nil {
			t.Fatalf("Start with a nil %T = (%v, %v), want ErrInvalidInput", st, sys, err)
		}
	}
}

type tripInput struct {
	City   string `json:"city"`
	Nights int    `json:"nights"`
}

var tripFlow = actor.Workflow("spawnjson-trip", func(_ *actor.Context, in tripInput) (string, error) {
	return in.City + "/" + string(rune('0'+in.Nights)), nil
})

// SpawnJSON starts a workflow from JSON text, decoded into its input type:
// idempotent with an ID, refusing text that does not fit the type.
func TestSpawnJSON(t *testing.T) {
	t.Parallel()
	ctx := testutil.Ctx(t, time.Minute)
	st := testutil.OpenSQLite(t, testutil.SQLitePath(t))
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(tripFlow)})

	r, err := actor.SpawnJSON(ctx, sys, tripFlow, []byte(`{"city":"Oslo","nights":3}`), "trip-1")
	if err != nil || r.PID != "trip-1" || r.Existed {
		t.Fatalf("SpawnJSON = %+v, %v", r, err)
	}
	out, err := actor.Await(ctx, sys, tripFlow, r.PID)
	if err != nil || out != "Oslo/3" {
		t.Fatalf("result %q, %v; want Oslo/3", out, err)
	}
	again, err := actor.SpawnJSON(ctx, sys, tripFlow, []byte(`{"city":"Rome","nights":1}`), "trip-1")
	if err != nil || !again.Existed || again.PID != "trip-1" {
		t.Fatalf("second SpawnJSON of trip-1 = %+v, %v; want Existed", again, err)
	}
	fresh, err := actor.SpawnJSON(ctx, sys, tripFlow, []byte(`{"city":"Bergen"}`), "")
	if err != nil || fresh.PID == "" || fresh.Existed {
		t.Fatalf("SpawnJSON without an ID = %+v, %v", fresh, err)
	}

	var typeErr *json.UnmarshalTypeError
	var synErr *json.SyntaxError
	for _, c := range []struct {
		in   string
		as   any
		what string
	}{
		{`{"city":"Oslo","nights":"three"}`, &typeErr, "a field of the wrong type"},
		{`{"city":"Oslo",}`, &synErr, "a syntax error"},
		{`{"town":"Oslo"}`, nil, "an unknown field"},
		{`{} {}`, nil, "two values"},
	} {
		_, err := actor.SpawnJSON(ctx, sys, tripFlow, []byte(c.in), "")
		if !errors.Is(err, actor.ErrInvalidInput) || (c.as != nil && !errors.As(err, c.as)) {
			t.Errorf("SpawnJSON with %s = %v, want ErrInvalidInput", c.what, err)
		}
	}
	if typeErr == nil || typeErr.Offset == 0 || synErr == nil || synErr.Offset == 0 {
		t.Errorf("decoding errors without offsets: %v, %v", typeErr, synErr)
	}
	if _, err := actor.SpawnJSON(ctx, sys, tripFlow, []byte(`{}`), "trip\n2"); !errors.Is(err, actor.ErrInvalidInput) {
		t.Errorf("SpawnJSON with a newline in the ID = %v, want ErrInvalidInput", err)
	}
	other := actor.Workflow("spawnjson-other", func(_ *actor.Context, s string) (string, error) { return s, nil })
	if _, err := actor.SpawnJSON(ctx, sys, other, []byte(`"x"`), ""); !errors.Is(err, actor.ErrUnknownWorkflow) {
		t.Errorf("SpawnJSON of an unregistered workflow = %v, want ErrUnknownWorkflow", err)
	}
}
