package viewer_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/supervisor"
	"github.com/nornlabs/norn/viewer"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopPostgres() // before the leak check: the throw-away server's goroutines end with it
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The workflows the tests look at: an order that completes after an
// activity that needs two attempts and a child; an approval that waits on
// a channel with a timeout; a job whose activity fails for good.

type Order struct {
	Customer string `json:"customer"`
	Amount   int    `json:"amount"`
}

type Receipt struct {
	Charged int    `json:"charged"`
	Ref     string `json:"ref"`
}

type Approval struct {
	By string `json:"by"`
}

var reserve = actor.Activity("reserve", func(ctx context.Context, o Order) (int, error) {
	if info, _ := actor.Info(ctx); info.Attempt == 1 {
		return 0, errors.New("stock service busy")
	}
	return o.Amount, nil
}, actor.WithRetry(supervisor.Exponential(time.Millisecond, 2, 10*time.Millisecond, 5)))

var charge = actor.Activity("charge", func(ctx context.Context, amount int) (Receipt, error) {
	return Receipt{Charged: amount, Ref: "rcpt-" + actor.IdempotencyKey(ctx)}, nil
})

var ship = actor.Workflow("ship", func(ctx *actor.Context, o Order) (string, error) {
	return "shipped to " + o.Customer, nil
})

var orderFlow = actor.Workflow("order", func(ctx *actor.Context, o Order) (Receipt, error) {
	n, err := reserve.Run(ctx, o)
	if err != nil {
		return Receipt{}, err
	}
	r, err := charge.Run(ctx, n)
	if err != nil {
		return Receipt{}, err
	}
	child, err := actor.SpawnChild(ctx, ship, o)
	if err != nil {
		return Receipt{}, err
	}
	if _, err := actor.AwaitChild(ctx, ship, child); err != nil {
		return Receipt{}, err
	}
	return r, nil
})

var approvalFlow = actor.Workflow("approval", func(ctx *actor.Context, o Order) (string, error) {
	if err := ctx.Subscribe("approvals", mailbox.Broadcast); err != nil {
		return "", err
	}
	m, err := actor.Receive[Approval](ctx, mailbox.Timeout(time.Hour))
	if err != nil {
		return "", err
	}
	return "approved by " + m.Value.By, nil
})

var explode = actor.Activity("explode", func(ctx context.Context, o Order) (int, error) {
	return 0, supervisor.Terminal(errors.New("card declined"))
})

var fragileFlow = actor.Workflow("fragile", func(ctx *actor.Context, o Order) (int, error) {
	return explode.Run(ctx, o)
})

// fixture is a node on a fresh SQLite file holding one instance of each
// kind, in the state the tests expect.
type fixture struct {
	sys                        *actor.System
	path                       string // the SQLite file, if the store is one
	done, waiting, failed, kid string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	path := testutil.SQLitePath(t)
	f := newFixtureOn(t, testutil.OpenSQLite(t, path))
	f.path = path
	return f
}

// newFixtureOn runs the node on st.
func newFixtureOn(t *testing.T, st persistence.Store) *fixture {
	t.Helper()
	ctx := testutil.Ctx(t, 30*time.Second)
	sys := testutil.StartNode(t, actor.Config{Store: st,
		Workflows: actor.Register(orderFlow, ship, approvalFlow, fragileFlow, chatty)})
	f := &fixture{sys: sys}
	pid, err := actor.Spawn(ctx, sys, orderFlow, Order{Customer: "ann", Amount: 42}, actor.WithID("order-ann"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, orderFlow, pid); err != nil {
		t.Fatalf("order: %v", err)
	}
	f.done = string(pid)
	f.kid = f.done + "/child:1"
	pid, err = actor.Spawn(ctx, sys, fragileFlow, Order{Customer: "bob", Amount: 7}, actor.WithID("fragile-bob"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Await(ctx, sys, fragileFlow, pid); err == nil {
		t.Fatal("fragile completed")
	}
	f.failed = string(pid)
	pid, err = actor.Spawn(ctx, sys, approvalFlow, Order{Customer: "cid", Amount: 3}, actor.WithID("approval-cid"))
	if err != nil {
		t.Fatal(err)
	}
	f.waiting = string(pid)
	testutil.Eventually(t, 10*time.Second, "approval waits with its timeout", func() bool {
		h, err := sys.History(ctx, pid)
		return err == nil && len(h) > 0 && h[len(h)-1].Kind == actor.EventReceiveWait
	})
	return f
}

// serve starts the viewer over real HTTP.
func (f *fixture) serve(t *testing.T, opts viewer.Options) *httptest.Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testutil.Logger()
	}
	h, err := viewer.New(f.sys, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	if opts.BasePath != "" {
		mux.Handle(strings.TrimRight(opts.BasePath, "/")+"/", h)
	} else {
		mux.Handle("/", h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// skipBrowser reports whether browser tests may be skipped here.
func skipBrowser() bool { return os.Getenv("NORN_SKIP_BROWSER") == "1" }

// chatty writes n history events: its start, n-2 clock reads, its end.
var chatty = actor.Workflow("chatty", func(ctx *actor.Context, n int) (int, error) {
	for range n - 2 {
		ctx.Now()
	}
	return n, nil
})
