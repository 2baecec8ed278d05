package starts

import "testing"

func TestQueueBoundsActivators(t *testing.T) {
	tb := New(2)
	var spawned int
	for _, id := range []string{"a", "b", "c"} {
		if tb.Queue(id) {
			spawned++
		}
	}
	if spawned != 2 {
		t.Fatalf("%d activators for 3 queued instances, want the maximum 2", spawned)
	}
	var got []string
	for {
		id, ok := tb.Next(false)
		if !ok {
			break
		}
		got = append(got, id)
	}
	if len(got) != 3 || got[0] != "a" || got[2] != "c" {
		t.Fatalf("activators took %v, want a b c in order", got)
	}
	// The activator that found the queue empty exited and the other
	// still counts: one more queued instance needs a second activator, the
	// next one none.
	if !tb.Queue("d") || tb.Queue("e") {
		t.Fatal("activators not counted as they exit")
	}
	if !tb.Starting("a") || tb.Len() != 5 {
		t.Fatal("starts end only when their activator ends them")
	}
}

func TestNextOnStopDropsQueued(t *testing.T) {
	tb := New(1)
	tb.Queue("a")
	tb.Queue("b")
	if _, ok := tb.Next(true); ok {
		t.Fatal("an activator took work while stopping")
	}
	if tb.Starting("a") || tb.Starting("b") {
		t.Fatal("queued starts survive a stop")
	}
	if !tb.Queue("c") {
		t.Fatal("the stopped activator still counts")
	}
}

func TestMarksReachWhoeverEndsTheStart(t *testing.T) {
	tb := New(1)
	if tb.Mark("x", false) {
		t.Fatal("a mark without a start")
	}
	if !tb.Begin("x") || tb.Begin("x") {
		t.Fatal("Begin must refuse a second start")
	}
	tb.Mark("x", false)
	if st := tb.Take("x"); !st.Woken || st.Cancelled {
		t.Fatalf("Take = %+v, want the wake", st)
	}
	if st := tb.Peek("x"); st.Woken || !tb.Starting("x") {
		t.Fatal("Take keeps the start in progress, cleared")
	}
	tb.Mark("x", true)
	tb.MarkAll()
	if st := tb.End("x"); !st.Woken || !st.Cancelled {
		t.Fatalf("End = %+v, want wake and cancel", st)
	}
	if tb.Starting("x") || tb.Len() != 0 {
		t.Fatal("End leaves the start")
	}
}

// Local marks a start that a wake of this process's own asked for; a
// start without one, or an id without a start, stays unmarked.
func TestMarkLocal(t *testing.T) {
	tb := New(1)
	tb.MarkLocal("none")
	if tb.Starting("none") {
		t.Fatal("MarkLocal began a start")
	}
	tb.Queue("a")
	tb.Queue("b")
	tb.MarkLocal("a")
	tb.Mark("b", false)
	if st := tb.End("a"); !st.Local || st.Woken {
		t.Errorf("a ended as %+v, want local only", st)
	}
	if st := tb.End("b"); st.Local || !st.Woken {
		t.Errorf("b ended as %+v, want woken, not local", st)
	}
}
