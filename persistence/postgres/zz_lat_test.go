package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

func BenchmarkZZSerialCreate(b *testing.B) {
	st := openURL(b, testutil.PostgresURL(b), postgres.Options{})
	payload := []byte(`1`)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprint("bench-", i)
		_, err := st.Apply(bg, persistence.Step{
			Create:  &persistence.Instance{ID: id, Workflow: "wf", Input: payload, LeaseOwner: "n", LeaseEpoch: 1, LeaseExpires: time.Now().Add(time.Minute)},
			History: []persistence.Event{{Seq: 0, Kind: "started", Name: "wf", Payload: payload}},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
