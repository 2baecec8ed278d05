package events

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence"
)

// TestConcurrentRequestsShareSteps: requests that arrive while a step
// commits are merged into the next one, each still answered 202 only
// after it; a duplicate among them is delivered once. When a request
// fails in the merged step (an instance that does not exist), it fails
// alone, with its own answer, and the others are committed one by one.
func TestConcurrentRequestsShareSteps(t *testing.T) {
	var (
		mu      sync.Mutex
		hold    = map[string]chan struct{}{} // event ID → closed to let its step go on
		held    = make(chan string, 10)
		commits []int // messages in each committed step of t.merged
	)
	st := &testutil.InterceptStore{Store: testutil.OpenSQLite(t, testutil.SQLitePath(t))}
	merged := func(step persistence.Step) bool {
		return len(step.Send) > 0 && step.Send[0].Metadata[MetaType] == "t.merged"
	}
	st.BeforeApply = func(_ context.Context, step persistence.Step) {
		if !merged(step) {
			return
		}
		mu.Lock()
		ch := hold[step.Send[0].Metadata[MetaID]]
		mu.Unlock()
		if ch != nil {
			held <- step.Send[0].Metadata[MetaID]
			<-ch
		}
	}
	st.AfterApply = func(step persistence.Step, _ persistence.StepResult, err error) {
		if err == nil && merged(step) {
			mu.Lock()
			commits = append(commits, len(step.Send))
			mu.Unlock()
		}
	}
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: actor.Register(reader)})
	h, err := NewHandler(sys, WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	n := &node{sys: sys, url: srv.URL, client: &http.Client{Transport: tr, Timeout: wait}}
	pub := &h.(*handler).pub

	post := func(id string, extra ...string) <-chan reply {
		ch := make(chan reply, 1)
		go func() { ch <- n.post(t, nil, binaryHeaders(id, "t.merged", extra...)...) }()
		return ch
	}
	// round holds the step of first, posts the others meanwhile, waits
	// until they are queued behind it, and lets the step go on.
	round := func(first string, others ...[]string) (reply, []reply) {
		t.Helper()
		release := make(chan struct{})
		mu.Lock()
		hold[first] = release
		mu.Unlock()
		r0 := post(first)
		if id := <-held; id != first {
			t.Fatalf("held %s, want %s", id, first)
		}
		var chs []<-chan reply
		for _, o := range others {
			chs = append(chs, post(o[0], o[1:]...))
		}
		testutil.Eventually(t, wait, fmt.Sprintf("%d requests queued", len(others)), func() bool {
			pub.mu.Lock()
			defer pub.mu.Unlock()
			return len(pub.queue) == len(others)
		})
		close(release)
		var out []reply
		for _, ch := range chs {
			out = append(out, <-ch)
		}
		return <-r0, out
	}
	accepted := func(what string, rs ...reply) {
		t.Helper()
		for i, r := range rs {
			if r.status != http.StatusAccepted {
				t.Fatalf("%s %d: %d %s", what, i, r.status, r.raw)
			}
		}
	}

	r0, rs := round("e0", []string{"e1"}, []string{"e2"}, []string{"e3"}, []string{"e3"}, []string{"e4"})
	accepted("round 1", append(rs, r0)...)
	mu.Lock()
	got := fmt.Sprint(commits)
	commits = nil
	mu.Unlock()
	if got != "[1 5]" {
		t.Fatalf("round 1: committed steps carried %s messages, want [1 5]", got)
	}

	r0, rs = round("f0", []string{"f1"}, []string{"f2", "ce-" + ExtInstance, "nobody"}, []string{"f3"})
	accepted("round 2", r0, rs[0], rs[2])
	if r := rs[1]; r.status != http.StatusNotFound || r.body.Index == nil || *r.body.Index != 0 {
		t.Fatalf("f2 to nobody: %d %s, want 404 naming event 0", r.status, r.raw)
	}
	mu.Lock()
	got = fmt.Sprint(commits)
	mu.Unlock()
	if got != "[1 1 1]" { // f0; then f1 and f3 on their own after the merged step failed
		t.Fatalf("round 2: committed steps carried %s messages, want [1 1 1]", got)
	}

	seen := map[string]int{}
	for _, v := range n.read(t, "t.merged", 8) {
		seen[v.ID]++
	}
	if got := fmt.Sprint(seen); got != "map[e0:1 e1:1 e2:1 e3:1 e4:1 f0:1 f1:1 f3:1]" {
		t.Fatalf("read %s", got)
	}
	if w := waiting(t, sys); w["t.merged"] != 0 {
		t.Fatalf("waiting after the reads = %v", w)
	}
}
