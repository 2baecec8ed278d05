package postgres_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/postgres"
)

// BenchmarkApplyParallel: 64 concurrent callers, each running instances
// through a create and three history steps (one op = one instance = four
// Apply calls). It reports steps/s.
func BenchmarkApplyParallel(b *testing.B) {
	for _, writers := range []int{1, 4, 8} {
		b.Run(fmt.Sprint("writers=", writers), func(b *testing.B) {
			st := openURL(b, testutil.PostgresURL(b), postgres.Options{Writers: writers, MaxConns: writers + 4})
			const callers = 64
			payload := []byte(`{"order":42,"items":["a","b","c"],"total":"99.90"}`)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for c := 0; c < callers; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						id := fmt.Sprint("bench-", i)
						_, err := st.Apply(bg, persistence.Step{
							Create:  &persistence.Instance{ID: id, Workflow: "wf", Input: payload, LeaseOwner: "n", LeaseEpoch: 1, LeaseExpires: time.Now().Add(time.Minute)},
							History: []persistence.Event{{Seq: 0, Kind: "started", Name: "wf", Payload: payload}},
						})
						for seq := int64(1); err == nil && seq <= 3; seq++ {
							_, err = st.Apply(bg, persistence.Step{Instance: id, Epoch: 1,
								History: []persistence.Event{{Seq: seq, Kind: "activity", Name: "charge", Ref: fmt.Sprint(seq), Payload: payload}}})
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(4*b.N)/time.Since(start).Seconds(), "steps/s")
		})
	}
}
