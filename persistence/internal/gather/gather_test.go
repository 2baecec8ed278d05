package gather

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func next(t *testing.T, g *Gatherer[int]) []int {
	t.Helper()
	b, ok := g.Next()
	if !ok {
		t.Fatal("Next: closed")
	}
	return append([]int(nil), b...)
}

func TestTakesWhatIsQueuedUpToMax(t *testing.T) {
	reqs := make(chan int, 10)
	for i := range 5 {
		reqs <- i
	}
	g := New(reqs, 3, -1)
	if b := next(t, g); len(b) != 3 || b[0] != 0 || b[2] != 2 {
		t.Fatalf("first batch %v, want [0 1 2]", b)
	}
	if b := next(t, g); len(b) != 2 || b[0] != 3 {
		t.Fatalf("second batch %v, want [3 4]", b)
	}
}

// After a batch of one, a request alone is a batch at once, however long
// the delay.
func TestLoneCallerNeverWaits(t *testing.T) {
	reqs := make(chan int, 1)
	g := New(reqs, 8, time.Hour)
	for i := range 100 {
		reqs <- i
		if b := next(t, g); len(b) != 1 || b[0] != i {
			t.Fatalf("batch %v, want [%d]", b, i)
		}
	}
}

// After a batch of three, the next waits for three.
func TestWaitsForAsManyAsBefore(t *testing.T) {
	reqs := make(chan int, 10)
	g := New(reqs, 8, time.Hour)
	reqs <- 1
	reqs <- 2
	reqs <- 3
	if b := next(t, g); len(b) != 3 {
		t.Fatalf("first batch %v", b)
	}
	reqs <- 4
	got := make(chan []int)
	go func() {
		b, _ := g.Next()
		got <- append([]int(nil), b...)
	}()
	reqs <- 5
	reqs <- 6
	if b := <-got; len(b) != 3 || b[0] != 4 || b[2] != 6 {
		t.Fatalf("second batch %v, want [4 5 6]", b)
	}
}

// The wait ends when the delay has passed, with what came.
func TestWaitEndsAfterDelay(t *testing.T) {
	reqs := make(chan int, 10)
	g := New(reqs, 8, time.Millisecond)
	reqs <- 1
	reqs <- 2
	next(t, g)
	reqs <- 3
	if b := next(t, g); len(b) != 1 || b[0] != 3 {
		t.Fatalf("batch %v, want [3]", b)
	}
	// And again, with the timer reused.
	reqs <- 4
	reqs <- 5
	next(t, g) // one batch (prev 1): no wait, takes both
	reqs <- 6
	if b := next(t, g); len(b) != 1 || b[0] != 6 {
		t.Fatalf("batch %v, want [6]", b)
	}
}

// A closed queue is drained, then Next reports false, also when it closes
// while Next waits for company.
func TestClosedQueue(t *testing.T) {
	reqs := make(chan int, 10)
	g := New(reqs, 8, time.Hour)
	reqs <- 1
	reqs <- 2
	next(t, g)
	reqs <- 3
	got := make(chan []int)
	go func() {
		b, _ := g.Next() // waits for a second request
		got <- append([]int(nil), b...)
	}()
	close(reqs)
	if b := <-got; len(b) != 1 || b[0] != 3 {
		t.Fatalf("batch %v, want [3]", b)
	}
	if _, ok := g.Next(); ok {
		t.Fatal("Next after close: ok")
	}
}
