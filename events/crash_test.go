package events

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// Types of the crash test: items are published (and wait in the type's
// queue), starts start a sink instance each (Handle).
const (
	crashItem  = "crash.item"
	crashStart = "crash.start"
	crashDB    = "NORN_EVENTS_CRASH_DB"
)

// crashSink is the workflow crash.start events start: it returns the
// event's ID.
var crashSink = actor.Workflow("sink", func(ctx *actor.Context, in Event[json.RawMessage]) (string, error) {
	return in.ID(), nil
})

// crashCollector takes crash.item events until it has seen every ID of its
// input, and returns every ID it took, in order.
var crashCollector = actor.Workflow("collector", func(ctx *actor.Context, want []string) ([]string, error) {
	if err := Subscribe(ctx, crashItem, mailbox.Competing); err != nil {
		return nil, err
	}
	missing := map[string]bool{}
	for _, id := range want {
		missing[id] = true
	}
	var got []string
	for len(missing) > 0 {
		e, err := Wait[json.RawMessage](ctx, crashItem)
		if err != nil {
			return got, err
		}
		got = append(got, e.ID())
		delete(missing, e.ID())
	}
	return got, nil
})

func crashWorkflows() []actor.Definition { return actor.Register(crashSink, crashCollector) }

func init() {
	childRoles["ingress-node"] = func() int {
		ctx := context.Background()
		st, err := sqlite.Open(ctx, os.Getenv(crashDB), sqlite.Options{})
		if err != nil {
			return childFail("open store: %v", err)
		}
		sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: crashWorkflows(), LeaseTTL: time.Second, Logger: testutil.Logger()})
		if err != nil {
			return childFail("start node: %v", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return childFail("listen: %v", err)
		}
		h, err := NewHandler(sys, Handle(crashStart, crashSink))
		if err != nil {
			return childFail("handler: %v", err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		childSay("ADDR %s", ln.Addr())
		// Serves until the parent kills the process.
		return childFail("serve: %v", srv.Serve(ln))
	}
}

// A node is killed (SIGKILL) right after it acknowledged an event, while
// other requests are in flight; a node restarted on its store delivers
// every acknowledged event: each published one to the workflow that
// consumes its type, each handled one by starting its instance.
func TestKillAfterAccepted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	db := testutil.SQLitePath(t)
	c := startChild(t, "ingress-node", crashDB+"="+db)
	url := "http://" + strings.TrimPrefix(c.waitLine(t, "ADDR ", wait), "ADDR ")

	const (
		posters  = 4
		killAt   = 60 // acknowledgements before the kill
		maxPosts = 5000
	)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: wait}
	var (
		mu     sync.Mutex
		acked  = map[string][]string{} // by type
		nAcked int
		next   int
		wg     sync.WaitGroup
	)
	kill := make(chan struct{})
	for range posters {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= maxPosts {
					return
				}
				typ := crashItem
				if i%2 == 1 {
					typ = crashStart
				}
				id := fmt.Sprintf("e%d", i)
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(`{"n":`+fmt.Sprint(i)+`}`)))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": id, "ce-source": "/crash", "ce-type": typ} {
					req.Header.Set(k, v)
				}
				resp, err := client.Do(req)
				if err != nil {
					return // the node is gone: this event's fate is unknown, and it was not acknowledged
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					t.Errorf("event %s: status %d", id, resp.StatusCode)
					return
				}
				mu.Lock()
				acked[typ] = append(acked[typ], id)
				nAcked++
				if nAcked == killAt {
					close(kill)
				}
				mu.Unlock()
			}
		})
	}
	select {
	case <-kill:
		c.kill(t)
	case <-time.After(wait):
		t.Fatal("no acknowledgements before the deadline")
	}
	wg.Wait()
	mu.Lock()
	items, starts := slices.Clone(acked[crashItem]), slices.Clone(acked[crashStart])
	mu.Unlock()
	t.Logf("%d events acknowledged (%d items, %d starts) before and while the node was killed", len(items)+len(starts), len(items), len(starts))

	st := testutil.OpenSQLite(t, db)
	sys := testutil.StartNode(t, actor.Config{Store: st, Workflows: crashWorkflows()})
	ctx := testutil.Ctx(t, 2*wait)
	for _, id := range starts {
		got, err := actor.Await(ctx, sys, crashSink, actor.PID(InstanceID("sink", "/crash", id)))
		if err != nil || got != id {
			t.Fatalf("acknowledged event %s: its instance = %q, %v", id, got, err)
		}
	}
	pid, err := actor.Spawn(ctx, sys, crashCollector, items)
	if err != nil {
		t.Fatal(err)
	}
	got, err := actor.Await(ctx, sys, crashCollector, pid)
	if err != nil {
		t.Fatalf("collector: %v (took %d of %d)", err, len(got), len(items))
	}
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] {
			t.Fatalf("event %s delivered twice", id)
		}
		seen[id] = true
	}
}
