package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/internal/testutil"
)

// A cluster does not mix nodes with and without remote TLS, even with the
// right gossip key: a plain node cannot join a TLS cluster (it would serve
// its wake endpoint in clear text), nor a TLS node a plain one; the
// joining node's Join says why, and the cluster goes on without it.
func TestRemoteTLSMismatchCannotJoin(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	key := []byte("0123456789abcdef")
	authority := newCA(t)
	secure := spawn(t, spec{Name: "secure", SecretKey: key, TLS: authority.spec(t)})
	_, err := trySpawn(t, spec{Name: "plain", Seeds: []string{secure.self.GossipAddr}, SecretKey: key})
	if err == nil || !strings.Contains(err.Error(), "remote TLS differs") || !strings.Contains(err.Error(), "serves its remote endpoint with TLS, this node in plain text") {
		t.Fatalf("a node without TLS joining a TLS cluster: %v", err)
	}

	plain := spawn(t, spec{Name: "plain-1", SecretKey: key})
	_, err = trySpawn(t, spec{Name: "secure-2", Seeds: []string{plain.self.GossipAddr}, SecretKey: key, TLS: authority.spec(t)})
	if err == nil || !strings.Contains(err.Error(), "serves its remote endpoint in plain text, this node with TLS") {
		t.Fatalf("a TLS node joining a plain cluster: %v", err)
	}

	// In this process: the error is typed.
	cfg := cluster.Loopback()
	cfg.Logger = testutil.Logger()
	cfg.SecretKey = key
	cfg.Seeds = []string{secure.self.GossipAddr}
	c, err := cluster.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &host{}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := c.Join(ctx, h.of("plain-2", testutil.Logger())); !errors.Is(err, cluster.ErrTLSMismatch) {
		t.Fatalf("Join of a plain node to a TLS cluster = %v, want ErrTLSMismatch", err)
	}

	// Those that agree still join, and the refused ones were never members.
	agree(t, []*proc{secure, spawn(t, spec{Name: "secure-3", Seeds: []string{secure.self.GossipAddr}, SecretKey: key, TLS: authority.spec(t)})},
		"secure", "secure-3")
	agree(t, []*proc{plain, spawn(t, spec{Name: "plain-3", Seeds: []string{plain.self.GossipAddr}, SecretKey: key})},
		"plain-1", "plain-3")
}
