package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nornlabs/norn/persistence"
)

// testOptional: the methods a driver may not support either work or refuse
// with ErrUnsupported, at once; none refuses with another error.
func testOptional(t *testing.T, st persistence.Store) {
	unsupported := func(err error) bool { return errors.Is(err, persistence.ErrUnsupported) }
	create(t, st, "a")

	err := st.RequestWake(ctx(), []string{"a"})
	if err != nil && !unsupported(err) {
		t.Fatalf("RequestWake = %v, want nil or ErrUnsupported", err)
	}

	// Listen runs until its context ends; unsupported, it returns at once.
	lctx, cancel := context.WithTimeout(ctx(), 200*time.Millisecond)
	defer cancel()
	err = st.Listen(lctx, func([]string) {})
	if err != nil && !unsupported(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Listen = %v, want nil, its context's error or ErrUnsupported", err)
	}

	octx, ocancel := context.WithCancel(ctx())
	ch, err := st.ListenOutbox(octx)
	switch {
	case unsupported(err):
		if ch != nil {
			t.Fatal("ListenOutbox refused, with a channel")
		}
		ocancel()
	case err != nil:
		ocancel()
		t.Fatalf("ListenOutbox = %v, want a channel or ErrUnsupported", err)
	default:
		ocancel()
		for range ch { // closed once its context ends
		}
	}

	if _, err := st.Stats(ctx()); err != nil && !unsupported(err) {
		t.Fatalf("Stats = %v", err)
	}
	if _, err := st.ListOutbox(ctx(), "", "", 1); err != nil && !unsupported(err) {
		t.Fatalf("ListOutbox = %v", err)
	}
}
