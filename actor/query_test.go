package actor_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

type customer struct {
	ID string `json:"id"`
}

type orderIn struct {
	Customer customer `json:"customer"`
	Total    int      `json:"total"`
}

var (
	// qChild waits for mail on a channel nobody sends on, with a timeout:
	// what it is sent stays in its mailbox, and it has a receive timer.
	qChild = actor.Workflow("q-child", func(ctx *actor.Context, n int) (int, error) {
		_, err := actor.Receive[string](ctx, mailbox.OnChannel("never"), mailbox.Timeout(time.Hour))
		return n, err
	})
	// qParent subscribes, spawns two children, then sleeps.
	qParent = actor.Workflow("q-parent", func(ctx *actor.Context, in orderIn) (int, error) {
		if err := ctx.Subscribe("news", mailbox.Broadcast); err != nil {
			return 0, err
		}
		for i := 1; i <= 2; i++ {
			if _, err := actor.SpawnChild(ctx, qChild, i); err != nil {
				return 0, err
			}
		}
		return in.Total, ctx.Sleep(time.Hour)
	})
)

// The query calls show an instance's children, history, mailbox, timers
// and subscriptions as users see them, and List pages through instances
// with filters and an opaque token.
func TestQueryAPI(t *testing.T) {
	for _, store := range []struct {
		name string
		open func(*testing.T) persistence.Store
	}{
		{"sqlite", func(t *testing.T) persistence.Store { return testutil.OpenSQLite(t, testutil.SQLitePath(t)) }},
		{"postgres", func(t *testing.T) persistence.Store { return openPostgres(t, testutil.PostgresURL(t)) }},
	} {
		t.Run(store.name, func(t *testing.T) {
			sys := testutil.StartNode(t, slowNets(actor.Config{Store: store.open(t), Workflows: actor.Register(qParent, qChild)}))
			ctx := testutil.Ctx(t, liveWait)
			var parents []actor.PID
			for i := 0; i < 5; i++ {
				pid, err := actor.Spawn(ctx, sys, qParent, orderIn{Customer: customer{ID: fmt.Sprintf("c%d", i%2)}, Total: i},
					actor.WithID(fmt.Sprintf("order-%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				parents = append(parents, pid)
			}
			p := parents[0]
			testutil.Eventually(t, liveWait, "the parents' timers and children", func() bool {
				for _, pid := range parents {
					ts, err := sys.Timers(ctx, pid)
					if err != nil || len(ts) != 1 {
						return false
					}
				}
				page, err := sys.List(ctx, actor.ListQuery{Workflow: "q-child"})
				if err != nil || len(page.Instances) != 10 {
					return false
				}
				for _, c := range page.Instances {
					if ts, err := sys.Timers(ctx, actor.PID(c.ID)); err != nil || len(ts) != 1 {
						return false
					}
				}
				return true
			})

			// Paging: limit 2 over five parents is three pages, newest first.
			var got []string
			q := actor.ListQuery{Workflow: "q-parent", Limit: 2}
			for pages := 1; ; pages++ {
				page, err := sys.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Instances) > 2 {
					t.Fatalf("page of %d instances, limit 2", len(page.Instances))
				}
				for _, in := range page.Instances {
					got = append(got, in.ID)
				}
				if page.Next == "" {
					if pages != 3 {
						t.Fatalf("%d pages, want 3", pages)
					}
					break
				}
				q.PageToken = page.Next
			}
			want := []string{"order-4", "order-3", "order-2", "order-1", "order-0"}
			if !slices.Equal(got, want) {
				t.Fatalf("List pages = %v, want %v", got, want)
			}

			// Filters.
			page, err := sys.List(ctx, actor.ListQuery{Input: map[string]string{"customer.id": "c1"}})
			if err != nil {
				t.Fatal(err)
			}
			if ids := instanceIDs(page.Instances); !slices.Equal(ids, []string{"order-3", "order-1"}) {
				t.Fatalf("input filter customer.id=c1 = %v", ids)
			}
			// Asleep: waiting from the moment it parked.
			page, err = sys.List(ctx, actor.ListQuery{Input: map[string]string{"total": "4"}, Statuses: []actor.Status{actor.StatusWaiting}})
			if err != nil {
				t.Fatal(err)
			}
			if ids := instanceIDs(page.Instances); !slices.Equal(ids, []string{"order-4"}) {
				t.Fatalf("input filter total=4 = %v", ids)
			}
			page, err = sys.List(ctx, actor.ListQuery{Statuses: []actor.Status{actor.StatusCompleted}})
			if err != nil || len(page.Instances) != 0 || page.Next != "" {
				t.Fatalf("completed instances = %v, %q, %v; want none", instanceIDs(page.Instances), page.Next, err)
			}

			// Bad tokens are typed errors.
			for _, tok := range []string{"%%%", "bm90LWEta2V5"} {
				_, err := sys.List(ctx, actor.ListQuery{PageToken: tok})
				var pte *actor.PageTokenError
				if !errors.As(err, &pte) || !errors.Is(err, actor.ErrPageToken) || !errors.Is(err, actor.ErrInvalidInput) {
					t.Fatalf("List with token %q = %v, want a *PageTokenError", tok, err)
				}
			}

			// Children, their timers and mailboxes.
			children, err := sys.Children(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(children) != 2 || children[0].Parent != string(p) || children[0].Workflow != "q-child" {
				t.Fatalf("Children(%s) = %+v", p, children)
			}
			child := actor.PID(children[0].ID)
			ts, err := sys.Timers(ctx, child)
			if err != nil || len(ts) != 1 || ts[0].Kind != actor.TimerReceive || ts[0].Name != "receive:1" || time.Until(ts[0].Due) < 30*time.Minute {
				t.Fatalf("child's timers = %+v, %v; want one receive timeout an hour away", ts, err)
			}
			ts, err = sys.Timers(ctx, p)
			if err != nil || len(ts) != 1 || ts[0].Kind != actor.TimerSleep || ts[0].Name != "sleep:1" {
				t.Fatalf("parent's timers = %+v, %v; want its sleep", ts, err)
			}
			if err := sys.SendOn(ctx, "direct-ch", child, "first", actor.WithMetadata(map[string]string{"k": "v"})); err != nil {
				t.Fatal(err)
			}
			if err := sys.Send(ctx, child, 42); err != nil {
				t.Fatal(err)
			}
			mail, err := sys.Mailbox(ctx, child, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(mail) != 2 || mail[0].Channel != "direct-ch" || string(mail[0].Payload) != `"first"` || mail[0].Metadata["k"] != "v" ||
				mail[0].Queued || mail[1].Channel != "" || string(mail[1].Payload) != "42" || mail[1].Type != "int" || mail[0].Seq >= mail[1].Seq {
				t.Fatalf("Mailbox = %+v", mail)
			}
			if mail, err := sys.Mailbox(ctx, child, 1); err != nil || len(mail) != 1 {
				t.Fatalf("Mailbox limit 1 = %d messages, %v", len(mail), err)
			}

			subs, err := sys.Subscriptions(ctx, p)
			if err != nil || len(subs) != 1 || subs[0].Channel != "news" || subs[0].Mode != mailbox.Broadcast {
				t.Fatalf("Subscriptions = %+v, %v", subs, err)
			}

			// History pages add up to the whole history.
			info, err := sys.Inspect(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			var hist []actor.HistoryEvent
			for after := int64(-1); ; {
				evs, err := sys.HistoryPage(ctx, p, after, 2)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) == 0 {
					break
				}
				hist = append(hist, evs...)
				after = evs[len(evs)-1].Seq
			}
			if len(hist) != len(info.History) || len(hist) < 4 {
				t.Fatalf("history pages hold %d events, Inspect %d", len(hist), len(info.History))
			}
			for i := range hist {
				if hist[i].Seq != info.History[i].Seq || hist[i].Kind != info.History[i].Kind || hist[i].Name != info.History[i].Name {
					t.Fatalf("history page event %d = %+v, Inspect has %+v", i, hist[i], info.History[i])
				}
			}

			// A missing instance is ErrNotFound, not an empty answer.
			for name, call := range map[string]func() error{
				"HistoryPage":   func() error { _, err := sys.HistoryPage(ctx, "nobody", -1, 0); return err },
				"Mailbox":       func() error { _, err := sys.Mailbox(ctx, "nobody", 0); return err },
				"Subscriptions": func() error { _, err := sys.Subscriptions(ctx, "nobody"); return err },
				"Timers":        func() error { _, err := sys.Timers(ctx, "nobody"); return err },
				"Children":      func() error { _, err := sys.Children(ctx, "nobody"); return err },
			} {
				if err := call(); !errors.Is(err, actor.ErrNotFound) {
					t.Errorf("%s of a missing instance = %v, want ErrNotFound", name, err)
				}
			}
			// An instance with nothing pending answers empty, not an error.
			if ts, err := sys.Timers(ctx, parents[1]); err != nil || len(ts) != 1 {
				t.Fatalf("Timers = %v, %v", ts, err)
			}
			if mail, err := sys.Mailbox(ctx, p, 0); err != nil || len(mail) != 0 {
				t.Fatalf("parent's mailbox = %v, %v; want empty", mail, err)
			}
		})
	}
}

func instanceIDs(ins []actor.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.ID
	}
	return out
}
