package actor_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
)

// proto.Message values travel as protobuf, typed by their full name.
func TestProtobufValues(t *testing.T) {
	greet := actor.Activity("greet", func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String("hello " + in.GetValue()), nil
	})
	wf := actor.Workflow("proto", func(ctx *actor.Context, in *wrapperspb.StringValue) (string, error) {
		g, err := greet.Run(ctx, in)
		if err != nil {
			return "", err
		}
		m, err := actor.Receive[*wrapperspb.Int64Value](ctx, mailbox.Timeout(time.Minute))
		if err != nil {
			return "", err
		}
		if m.Type != "google.protobuf.Int64Value" {
			return "", errors.New("message type " + m.Type)
		}
		return g.GetValue() + " " + string(rune('0'+m.Value.GetValue())), nil
	})
	sys := testutil.StartNode(t, actor.Config{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t)), Workflows: actor.Register(wf)})
	ctx := testutil.Ctx(t, 30*time.Second)
	pid, err := actor.Spawn(ctx, sys, wf, wrapperspb.String("ann"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Send(ctx, pid, wrapperspb.Int64(7)); err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, wf, pid)
	if err != nil || got != "hello ann 7" {
		t.Fatalf("Await = %q, %v", got, err)
	}
	info, _ := sys.Inspect(ctx, pid)
	if json.Valid(info.History[1].Payload) {
		t.Fatalf("activity result %q stored as JSON, want protobuf", info.History[1].Payload)
	}
}

// upperJSON is a codec of its own (JSON under another name).
type upperJSON struct{ actor.JSON }

func (upperJSON) Name() string { return "json-v2" }

// The codec is recorded with each instance: a node with another codec stops
// the instance with a NonDeterminismError instead of misreading its history.
func TestCodecRecordedAndChecked(t *testing.T) {
	path := testutil.SQLitePath(t)
	st := testutil.OpenSQLite(t, path)
	wf := actor.Workflow("coded", func(ctx *actor.Context, n int) (int, error) {
		m, err := actor.Receive[int](ctx)
		return n + m.Value, err
	})
	ctx := testutil.Ctx(t, 30*time.Second)
	cfg := actor.Config{Store: st, Workflows: actor.Register(wf), Codec: upperJSON{}}
	sys := testutil.StartNode(t, cfg)
	pid, _ := actor.Spawn(ctx, sys, wf, 1)
	testutil.Eventually(t, 10*time.Second, "parked", func() bool {
		info, _ := sys.Inspect(ctx, pid)
		return len(info.History) > 0 && info.History[0].Ref == "json-v2"
	})
	if err := sys.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	sys2 := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(wf)}) // default JSON codec
	_ = sys2.Send(ctx, pid, 2)
	_, err := actor.Await(ctx, sys2, wf, pid)
	var nd *actor.NonDeterminismError
	if !errors.As(err, &nd) {
		t.Fatalf("Await = %v, want a NonDeterminismError naming the codec", err)
	}
}
