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

// BenchmarkTakeOver: two nodes (two stores on one database) take over the
// 1,000 leases of a dead node at once, as the survivors in a cluster do:
// each releases the dead node's leases, then takes its half of the
// instances with 16 concurrent AcquireLease calls. One op is one whole
// take-over, from the releases to the last instance taken; release-ms is
// the part until both releases returned.
func BenchmarkTakeOver(b *testing.B) {
	url := testutil.PostgresURL(b)
	nodes := []*postgres.Store{openURL(b, url, postgres.Options{}), openURL(b, url, postgres.Options{})}
	const n = 1000
	var released time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dead := fmt.Sprint("dead-", i)
		ids := make([]string, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for j := next.Add(1) - 1; j < n; j = next.Add(1) - 1 {
					ids[j] = fmt.Sprintf("%s-%04d", dead, j)
					_, err := nodes[0].Apply(bg, persistence.Step{
						Create:   &persistence.Instance{ID: ids[j], Workflow: "wf", LeaseOwner: dead, LeaseEpoch: 1},
						LeaseTTL: time.Hour, History: []persistence.Event{{Seq: 0, Kind: "started", Name: "wf"}}})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StartTimer()
		start := time.Now()
		var releases sync.WaitGroup
		releases.Add(len(nodes))
		for k, st := range nodes {
			wg.Go(func() {
				err := st.ReleaseLeases(bg, dead)
				releases.Done()
				if err != nil {
					b.Error(err)
					return
				}
				half := ids[k*n/2 : (k+1)*n/2]
				var next atomic.Int64
				var takers sync.WaitGroup
				for range 16 {
					takers.Go(func() {
						for j := next.Add(1) - 1; j < int64(len(half)); j = next.Add(1) - 1 {
							if _, err := st.AcquireLease(bg, half[j], fmt.Sprint("node-", k), time.Hour); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				takers.Wait()
			})
		}
		releases.Wait()
		released += time.Since(start)
		wg.Wait()
	}
	b.ReportMetric(float64(released.Milliseconds())/float64(b.N), "release-ms/op")
}
