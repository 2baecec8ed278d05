package events_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/events"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence/sqlite"
)

type Order struct {
	ID    string
	Total int
}

type Payment struct{ Amount int }

// An order event starts a workflow (Handle), which then waits for the
// payment event about its order (published on the payment type's
// channel, correlated by subject).
func Example() {
	orderFlow := actor.Workflow("order", func(ctx *actor.Context, in events.Event[Order]) (string, error) {
		events.Adopt(ctx, in)
		if err := events.Subscribe(ctx, "com.example.payment.received", mailbox.Competing); err != nil {
			return "", err
		}
		paid, err := events.Wait[Payment](ctx, "com.example.payment.received",
			events.WithSubject(in.Data.ID), events.Timeout(24*time.Hour))
		if errors.Is(err, actor.ErrTimeout) {
			return "expired", nil
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("order %s: paid %d by %s", in.Data.ID, paid.Data.Amount, paid.Source()), nil
	})

	ctx := context.Background()
	dir, err := os.MkdirTemp("", "norn-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "norn.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	quiet := slog.New(slog.DiscardHandler)
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(orderFlow), Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	defer sys.Stop(ctx)
	h, err := events.NewHandler(sys, events.Handle("com.example.order.placed", orderFlow), events.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	post := func(id, source, typ, subject, data string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(data))
		req.Header.Set("ce-specversion", "1.0")
		req.Header.Set("ce-id", id)
		req.Header.Set("ce-source", source)
		req.Header.Set("ce-type", typ)
		if subject != "" {
			req.Header.Set("ce-subject", subject)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(typ, resp.Status)
	}
	post("1", "/shop", "com.example.order.placed", "", `{"ID": "o-1", "Total": 30}`)
	post("p-9", "/payments", "com.example.payment.received", "o-1", `{"Amount": 30}`)

	out, err := actor.Await(ctx, sys, orderFlow, actor.PID(events.InstanceID("order", "/shop", "1")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Output:
	// com.example.order.placed 202 Accepted
	// com.example.payment.received 202 Accepted
	// order o-1: paid 30 by /payments
}
