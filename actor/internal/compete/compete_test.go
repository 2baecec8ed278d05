package compete

import (
	"slices"
	"testing"

	"github.com/nornlabs/norn/mailbox"
	"github.com/nornlabs/norn/persistence"
)

// node is a table of live consumers: the IDs in it are live, the others
// cold.
type node map[string]bool

func (n node) live(id string) (string, Liveness) {
	if n[id] {
		return id, Live
	}
	return "", Cold
}

func (n node) registered(id string) bool { return n[id] }

func onChannel(ch string) mailbox.Receive {
	return mailbox.Receive{Spec: mailbox.Spec{HasChannel: true, Channel: ch}}
}

func queued(ch string, subs ...string) persistence.QueuedMessage {
	return persistence.QueuedMessage{Channel: ch, Subscribers: subs}
}

func TestRouteWakesOneRegisteredConsumerPerMessage(t *testing.T) {
	r := NewRouter[string]()
	n := node{"a": true, "b": true, "c": true}
	for _, id := range []string{"a", "b", "c"} {
		r.Wait(id, []mailbox.Receive{onChannel("jobs")}, nil, nil)
	}
	var woken []string
	for range 3 {
		d := r.Route(queued("jobs", "a", "b", "c"), "", n.live, n.registered)
		if len(d.Wake) != 1 || len(d.Cold) != 0 {
			t.Fatalf("decision %+v, want one consumer woken", d)
		}
		woken = append(woken, d.Wake[0])
	}
	slices.Sort(woken)
	if !slices.Equal(woken, []string{"a", "b", "c"}) {
		t.Fatalf("three messages woke %v, want each consumer once", woken)
	}
	// Every consumer holds a wake now and none is registered: a fourth
	// message wakes nobody (the busy ones look before they park).
	if d := r.Route(queued("jobs", "a", "b", "c"), "", n.live, n.registered); len(d.Wake)+len(d.Cold) != 0 {
		t.Fatalf("fourth message: %+v, want nothing", d)
	}
}

func TestRouteColdSubscribersWhenNoneRegistered(t *testing.T) {
	r := NewRouter[string]()
	n := node{"live-busy": true}
	d := r.Route(queued("jobs", "live-busy", "passivated"), "", n.live, n.registered)
	if len(d.Wake) != 0 || !slices.Equal(d.Cold, []string{"passivated"}) {
		t.Fatalf("decision %+v, want the cold subscriber only", d)
	}
	// A registered consumer is picked instead of waking the cold one.
	r.Wait("live-busy", []mailbox.Receive{onChannel("jobs")}, nil, nil)
	d = r.Route(queued("jobs", "live-busy", "passivated"), "", n.live, n.registered)
	if !slices.Equal(d.Wake, []string{"live-busy"}) || d.Cold != nil {
		t.Fatalf("decision %+v, want the registered consumer and no cold wake", d)
	}
}

func TestRouteSkipsWhatReceivesRefuse(t *testing.T) {
	r := NewRouter[string]()
	n := node{"other": true, "typed": true, "filtered": true, "sure": true}
	r.Wait("other", []mailbox.Receive{onChannel("elsewhere")}, nil, nil)
	r.Wait("typed", []mailbox.Receive{{Type: "Invoice", Spec: mailbox.Spec{HasChannel: true, Channel: "jobs"}}}, nil, nil)
	filtered := onChannel("jobs")
	filtered.Spec.HasFrom = true
	r.Wait("filtered", []mailbox.Receive{filtered}, nil, nil)
	r.Wait("sure", []mailbox.Receive{onChannel("jobs")}, nil, nil)

	q := queued("jobs", "other", "typed", "filtered", "sure")
	q.Type = "Order"
	d := r.Route(q, "", n.live, n.registered)
	slices.Sort(d.Wake)
	// "filtered" may accept it (its sender filter cannot be checked here):
	// it is woken as well, and stays registered.
	if !slices.Equal(d.Wake, []string{"filtered", "sure"}) {
		t.Fatalf("woke %v, want filtered and sure", d.Wake)
	}
	if !r.Waiting("filtered") || r.Waiting("sure") || !r.Waiting("typed") || !r.Waiting("other") {
		t.Fatal("only the consumer picked leaves its registration")
	}
}

func TestHeldWakesArePassedOn(t *testing.T) {
	r := NewRouter[string]()
	n := node{"a": true, "b": true}
	r.Wait("a", []mailbox.Receive{onChannel("jobs")}, nil, nil)
	q := queued("jobs", "a", "b")
	if d := r.Route(q, "", n.live, n.registered); !slices.Equal(d.Wake, []string{"a"}) {
		t.Fatalf("woke %v, want a", d.Wake)
	}
	// a stops before its read: its wake goes to b, which registered since.
	r.Wait("b", []mailbox.Receive{onChannel("jobs")}, nil, nil)
	held := r.Leave("a")
	if len(held) != 1 || held[0].Channel != "jobs" {
		t.Fatalf("a held %v, want the jobs wake", held)
	}
	if d := r.Route(held[0], "a", n.live, n.registered); !slices.Equal(d.Wake, []string{"b"}) {
		t.Fatalf("passed-on wake woke %v, want b", d.Wake)
	}
	// A read serves the wakes held: registering again drops them.
	r.Wait("b", []mailbox.Receive{onChannel("jobs")}, nil, nil)
	if held := r.Busy("b"); len(held) != 0 {
		t.Fatalf("b still holds %v after its read", held)
	}
}

func TestExceptIsNeverPicked(t *testing.T) {
	r := NewRouter[string]()
	n := node{"a": true}
	r.Wait("a", []mailbox.Receive{onChannel("jobs")}, nil, nil)
	if d := r.Route(queued("jobs", "a"), "a", n.live, n.registered); len(d.Wake) != 0 {
		t.Fatalf("woke %v, the consumer passing the wake on", d.Wake)
	}
}

func TestSubscribersRemembered(t *testing.T) {
	r := NewRouter[string]()
	if r.Subscribers("jobs") != nil {
		t.Fatal("subscribers before any message")
	}
	r.Route(queued("jobs", "a", "b"), "", node{}.live, node{}.registered)
	if got := r.Subscribers("jobs"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("subscribers %v", got)
	}
}

func TestAddressees(t *testing.T) {
	tests := []struct {
		name string
		res  persistence.StepResult
		want []string
	}{
		{"own mail, self and repeats left out",
			persistence.StepResult{Woken: []string{"self", "x", "x", "y"}}, []string{"x", "y"}},
		{"competing subscribers routed, not woken",
			persistence.StepResult{Woken: []string{"a", "b", "a", "b"}, Queued: []persistence.QueuedMessage{queued("jobs", "a", "b"), queued("jobs", "a", "b")}}, nil},
		{"a subscriber with mail of its own too",
			persistence.StepResult{Woken: []string{"a", "b", "a"}, Queued: []persistence.QueuedMessage{queued("jobs", "a", "b")}}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Addressees("self", tt.res); !slices.Equal(got, tt.want) {
				t.Fatalf("Addressees = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPickHandsToOneSureConsumer(t *testing.T) {
	r := NewRouter[string]()
	jobs := []string{"jobs"}
	filtered := onChannel("jobs")
	filtered.Spec.HasFrom = true
	r.Wait("filtered", []mailbox.Receive{filtered}, nil, jobs)
	r.Wait("typed", []mailbox.Receive{{Type: "Invoice", Spec: mailbox.Spec{HasChannel: true, Channel: "jobs"}}}, nil, jobs)
	r.Wait("not-handable", []mailbox.Receive{onChannel("jobs")}, nil, nil)
	r.Wait("stopping", []mailbox.Receive{onChannel("jobs")}, nil, jobs)
	r.Wait("sure", []mailbox.Receive{onChannel("jobs")}, nil, jobs)
	live := func(c string) bool { return c != "stopping" }

	if c, ok := r.Pick("jobs", "Order", live); !ok || c != "sure" {
		t.Fatalf("Pick = %q, %v; want sure, the one consumer that takes an Order for sure", c, ok)
	}
	if r.Waiting("sure") {
		t.Fatal("the consumer picked is still registered")
	}
	if c, ok := r.Pick("jobs", "Order", live); ok {
		t.Fatalf("second Pick = %q: nobody else takes an Order for sure", c)
	}
	if c, ok := r.Pick("jobs", "Invoice", live); !ok || c != "typed" {
		t.Fatalf("Pick of an Invoice = %q, %v; want typed", c, ok)
	}
	if _, ok := r.Pick("other", "", live); ok {
		t.Fatal("Pick on a channel nobody waits on")
	}
	// A consumer that leaves its wait is no longer handed anything, and
	// one registered again without the channel is not either.
	r.Wait("a", []mailbox.Receive{onChannel("jobs")}, nil, jobs)
	r.Busy("a")
	r.Wait("b", []mailbox.Receive{onChannel("jobs")}, nil, jobs)
	r.Wait("b", []mailbox.Receive{onChannel("jobs")}, nil, nil)
	if c, ok := r.Pick("jobs", "", live); ok {
		t.Fatalf("Pick = %q after the consumers left", c)
	}
	// Route's pick also ends the hand-off registration.
	r.Wait("c", []mailbox.Receive{onChannel("jobs")}, nil, jobs)
	if d := r.Route(queued("jobs", "c"), "", node{"c": true}.live, node{"c": true}.registered); !slices.Equal(d.Wake, []string{"c"}) {
		t.Fatalf("Route woke %v, want c", d.Wake)
	}
	if c, ok := r.Pick("jobs", "", live); ok {
		t.Fatalf("Pick = %q, which Route picked already", c)
	}
	r.Busy("filtered")
	r.Leave("stopping")
	if len(r.handable) != 0 || len(r.handOn) != 0 {
		t.Fatalf("hand-off registrations left: %v %v", r.handable, r.handOn)
	}
}

func TestWaitQuiet(t *testing.T) {
	jobs := []mailbox.Receive{onChannel("jobs")}
	hand := []string{"jobs"}
	n := node{"a": true, "b": true}
	for _, tc := range []struct {
		name string
		run  func(r *Router[string])
		want bool
	}{
		{"first wait", func(*Router[string]) {}, false},
		{"busy, nothing missed", func(r *Router[string]) { r.Wait("a", jobs, nil, hand); r.Busy("a") }, true},
		{"waits again while registered", func(r *Router[string]) { r.Wait("a", jobs, nil, hand) }, true},
		{"handed", func(r *Router[string]) { r.Wait("a", jobs, nil, hand); r.Pick("jobs", "", n.a) }, true},
		{"busy while a message woke nobody", func(r *Router[string]) {
			r.Wait("a", jobs, nil, hand)
			r.Busy("a")
			r.Route(queued("jobs", "a"), "", n.live, n.registered)
		}, false},
		{"registered when something was missed", func(r *Router[string]) { r.Wait("a", jobs, nil, hand); r.Missed() }, false},
		{"holds a wake", func(r *Router[string]) {
			r.Wait("a", jobs, nil, hand)
			r.Route(queued("jobs", "a", "b"), "", n.live, n.registered)
		}, false},
		{"another consumer took the wake", func(r *Router[string]) {
			r.Wait("a", jobs, nil, hand)
			r.Busy("a")
			r.Wait("b", jobs, nil, hand)
			r.Route(queued("jobs", "a", "b"), "", n.live, n.registered)
		}, true},
		{"left (stopped) and came back", func(r *Router[string]) { r.Wait("a", jobs, nil, hand); r.Leave("a") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRouter[string]()
			tc.run(r)
			if got := r.Wait("a", jobs, nil, hand); got != tc.want {
				t.Fatalf("quiet = %v, want %v", got, tc.want)
			}
		})
	}
}

func (n node) a(c string) bool { return n[c] }

// The store names a bounded sample of a channel's subscribers: a message
// whose named subscribers are busy or elsewhere goes to a registered
// consumer of its channel that it does not name, before any cold wake.
func TestRoutePicksConsumerTheMessageDoesNotName(t *testing.T) {
	r := NewRouter[string]()
	n := node{"x": true, "y": true, "gone": false}
	jobs := []string{"jobs"}
	r.Wait("x", []mailbox.Receive{onChannel("jobs")}, jobs, nil)
	r.Wait("y", []mailbox.Receive{onChannel("jobs")}, jobs, nil)
	r.Wait("elsewhere", []mailbox.Receive{onChannel("other")}, []string{"other"}, nil)
	r.Wait("gone", []mailbox.Receive{onChannel("jobs")}, jobs, nil)

	// except x: y it is, and the cold subscribers named are left alone.
	d := r.Route(queued("jobs", "cold-a", "cold-b"), "x", n.live, n.registered)
	if !slices.Equal(d.Wake, []string{"y"}) || d.Cold != nil {
		t.Fatalf("decision %+v, want y and no cold wake", d)
	}
	d = r.Route(queued("jobs", "cold-a", "cold-b"), "", n.live, n.registered)
	if !slices.Equal(d.Wake, []string{"x"}) || d.Cold != nil {
		t.Fatalf("decision %+v, want x and no cold wake", d)
	}
	// Both hold a wake, gone is no longer live: the cold ones it is.
	d = r.Route(queued("jobs", "cold-a", "cold-b"), "", n.live, n.registered)
	if len(d.Wake) != 0 || !slices.Equal(d.Cold, []string{"cold-a", "cold-b"}) {
		t.Fatalf("decision %+v, want the cold subscribers", d)
	}

	// A consumer whose filter may refuse it is woken too, and picks none.
	filtered := onChannel("jobs")
	filtered.Spec.HasFrom = true
	n["f"] = true
	r.Wait("f", []mailbox.Receive{filtered}, jobs, nil)
	d = r.Route(queued("jobs", "cold-a"), "", n.live, n.registered)
	if !slices.Equal(d.Wake, []string{"f"}) || !slices.Equal(d.Cold, []string{"cold-a"}) {
		t.Fatalf("decision %+v, want f woken and the cold subscriber", d)
	}
	// Busy, f is no longer a consumer Route picks from.
	r.Busy("f")
	d = r.Route(queued("jobs", "cold-a"), "", n.live, n.registered)
	if len(d.Wake) != 0 {
		t.Fatalf("decision %+v, want no live consumer woken", d)
	}
}
