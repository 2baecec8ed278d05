package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// The reads an activation makes of a woken instance: its row, its first
// history page, its mailbox (one message, from a broadcast channel).
func BenchmarkActivationReads(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "norn.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const id = "inst-1"
	if _, err := st.Apply(ctx, persistence.Step{Create: &persistence.Instance{ID: id, Workflow: "wf"},
		Subscribe: []persistence.Subscription{{Instance: id, Channel: "ch", Mode: persistence.Broadcast}},
		History:   []persistence.Event{{Seq: 0, Kind: "started", Payload: []byte(`{}`)}, {Seq: 1, Kind: "subscribed", Name: "ch"}}}); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Apply(ctx, persistence.Step{Send: []persistence.NewMessage{{ID: "m1", Channel: "ch", Type: "int", Payload: []byte("1")}}}); err != nil {
		b.Fatal(err)
	}
	b.Run("Mailbox", func(b *testing.B) {
		for b.Loop() {
			ms, err := st.Mailbox(ctx, id, 0)
			if err != nil || len(ms) != 1 {
				b.Fatal(ms, err)
			}
		}
	})
	b.Run("Instance", func(b *testing.B) {
		for b.Loop() {
			if _, err := st.Instance(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("HistoryRange", func(b *testing.B) {
		for b.Loop() {
			if _, err := st.HistoryRange(ctx, id, 0, 512); err != nil {
				b.Fatal(err)
			}
		}
	})
}
