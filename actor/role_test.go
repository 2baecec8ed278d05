package actor

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/nornlabs/norn/persistence"
)

// fakeCluster gives even buckets to "a" and odd ones to "b", and records
// what it is asked.
type fakeCluster struct {
	mu     sync.Mutex
	woken  map[string][]string
	joined bool
	left   bool
	closed bool
}

func (c *fakeCluster) Join(context.Context, ClusterHost) error { c.joined = true; return nil }

func (c *fakeCluster) Owner(b int) string {
	if b%2 == 0 {
		return "a"
	}
	return "b"
}

func (c *fakeCluster) Wake(node string, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.woken == nil {
		c.woken = map[string][]string{}
	}
	c.woken[node] = append(c.woken[node], ids...)
}

func (c *fakeCluster) Leave(context.Context) error { c.left = true; return nil }
func (c *fakeCluster) Close() error                { c.closed = true; return nil }

// wakeStore records wake requests.
type wakeStore struct {
	persistence.Store
	requested []string
}

func (w *wakeStore) RequestWake(_ context.Context, ids []string) error {
	w.requested = append(w.requested, ids...)
	return nil
}

// idsIn finds an instance ID in an even and one in an odd bucket.
func idsIn(t *testing.T) (even, odd string) {
	t.Helper()
	for i := 0; even == "" || odd == ""; i++ {
		id := string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		if persistence.BucketOf(id)%2 == 0 {
			even = id
		} else {
			odd = id
		}
	}
	return even, odd
}

func TestRoleAlone(t *testing.T) {
	t.Parallel()
	r := newRole(Config{NodeID: "a"})
	if _, ok := r.(aloneRole); !ok {
		t.Fatalf("newRole without Client or Cluster = %T, want aloneRole", r)
	}
	even, odd := idsIn(t)
	for _, id := range []string{even, odd} {
		for _, from := range []origin{fromHere, fromPeer, fromStore} {
			if !r.actsOn(id, from) {
				t.Errorf("alone: a wake for %s from %d is not acted on", id, from)
			}
		}
		if !r.owns(id) {
			t.Errorf("alone: does not own %s", id)
		}
	}
	if !r.hosts() || !r.hearsAll() || r.buckets() != nil || !r.ownsBucket(7) {
		t.Errorf("alone: hosts %v, hearsAll %v, buckets %v (want nil: all), ownsBucket(7) %v", r.hosts(), r.hearsAll(), r.buckets(), r.ownsBucket(7))
	}
	if err := r.join(context.Background(), ClusterHost{}); err != nil {
		t.Fatal(err)
	}
}

func TestRoleMember(t *testing.T) {
	t.Parallel()
	c := &fakeCluster{}
	r := newRole(Config{NodeID: "a", Cluster: c})
	if _, ok := r.(*memberRole); !ok {
		t.Fatalf("newRole with a Cluster = %T, want *memberRole", r)
	}
	if err := r.join(context.Background(), ClusterHost{}); err != nil || !c.joined {
		t.Fatalf("join = %v, joined %v", err, c.joined)
	}
	even, odd := idsIn(t)
	if !r.owns(even) || r.owns(odd) {
		t.Errorf("member a: owns(%s) %v, owns(%s) %v; want true, false", even, r.owns(even), odd, r.owns(odd))
	}
	if !r.actsOn(even, fromHere) || !r.actsOn(even, fromStore) || !r.actsOn(even, fromPeer) {
		t.Errorf("member a: a wake for its own %s is not acted on", even)
	}
	if r.actsOn(odd, fromHere) || r.actsOn(odd, fromStore) {
		t.Errorf("member a: a wake for b's %s from here or the store is acted on", odd)
	}
	if !r.actsOn(odd, fromPeer) {
		t.Errorf("member a: a peer's wake for %s is not acted on (the lease decides)", odd)
	}
	if !r.hosts() || r.hearsAll() {
		t.Errorf("member: hosts %v, hearsAll %v; want true, false", r.hosts(), r.hearsAll())
	}
	bs := r.buckets()
	if len(bs) != persistence.NumBuckets/2 || slices.ContainsFunc(bs, func(b int) bool { return b%2 != 0 }) {
		t.Errorf("member a: %d buckets, want the %d even ones", len(bs), persistence.NumBuckets/2)
	}
	if err := r.forward(context.Background(), []string{even, odd}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.woken["b"], []string{odd}) || len(c.woken["a"]) != 0 {
		t.Errorf("forward woke %v; want only %s, at b", c.woken, odd)
	}
	if err := errors.Join(r.leave(context.Background()), r.close()); err != nil || !c.left || !c.closed {
		t.Errorf("leave, close = %v; left %v, closed %v", err, c.left, c.closed)
	}
}

func TestRoleClient(t *testing.T) {
	t.Parallel()
	even, odd := idsIn(t)
	check := func(t *testing.T, r role) {
		t.Helper()
		if _, ok := r.(*clientRole); !ok {
			t.Fatalf("newRole with Client = %T, want *clientRole", r)
		}
		if r.hosts() || r.owns(even) || r.ownsBucket(0) {
			t.Errorf("client: hosts %v, owns %v, ownsBucket(0) %v; want nothing", r.hosts(), r.owns(even), r.ownsBucket(0))
		}
		if bs := r.buckets(); bs == nil || len(bs) != 0 {
			t.Errorf("client: buckets %v; want none (not nil: nil is all)", bs)
		}
		for _, from := range []origin{fromHere, fromPeer, fromStore} {
			if r.actsOn(even, from) {
				t.Errorf("client: a wake from %d is acted on", from)
			}
		}
	}
	t.Run("alone", func(t *testing.T) {
		t.Parallel()
		st := &wakeStore{}
		r := newRole(Config{NodeID: "c", Client: true, Store: st})
		check(t, r)
		if err := r.join(context.Background(), ClusterHost{}); err != nil {
			t.Fatal(err)
		}
		if err := r.forward(context.Background(), []string{even, odd}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(st.requested, []string{even, odd}) {
			t.Errorf("wake requests %v; want %v", st.requested, []string{even, odd})
		}
		// A store that takes no wake requests (it notifies): nothing to do.
		if err := newRole(Config{NodeID: "c", Client: true}).forward(context.Background(), []string{even}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := &fakeCluster{}
		st := &wakeStore{}
		r := newRole(Config{NodeID: "c", Client: true, Cluster: c, Store: st})
		check(t, r)
		if err := r.join(context.Background(), ClusterHost{}); err != nil {
			t.Fatal(err)
		}
		if err := r.forward(context.Background(), []string{even, odd}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.woken["a"], []string{even}) || !slices.Equal(c.woken["b"], []string{odd}) || len(st.requested) != 0 {
			t.Errorf("forward woke %v, requested %v; want the owners woken, no requests", c.woken, st.requested)
		}
	})
	t.Run("owning", func(t *testing.T) {
		t.Parallel()
		c := &fakeCluster{}
		r := newRole(Config{NodeID: "b", Client: true, Cluster: c})
		err := r.join(context.Background(), ClusterHost{})
		var rc *RoleConflictError
		if !errors.As(err, &rc) || !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("join as a client the cluster gives buckets = %v; want a *RoleConflictError that is ErrInvalidInput", err)
		}
		if rc.NodeID != "b" || rc.Buckets != persistence.NumBuckets/2 {
			t.Errorf("error names %s with %d buckets; want b with %d", rc.NodeID, rc.Buckets, persistence.NumBuckets/2)
		}
		if !c.left || !c.closed {
			t.Errorf("the refused client did not leave (%v) and close (%v) the cluster", c.left, c.closed)
		}
	})
}
