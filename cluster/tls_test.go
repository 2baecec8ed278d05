package cluster_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/internal/testutil"
)

// ca is a certificate authority made for one test.
type ca struct {
	*testutil.CA
	pool *x509.CertPool
}

func newCA(t *testing.T) *ca {
	c := testutil.NewCA(t)
	return &ca{CA: c, pool: c.Pool}
}

// leaf is a node certificate for 127.0.0.1, good for serving and dialing.
func (c *ca) leaf(t *testing.T) tls.Certificate { return c.Leaf(t, "norn node") }

// spec is TLS material for one node: the CA and a leaf of its own.
func (c *ca) spec(t *testing.T) *tlsSpec {
	t.Helper()
	cert, key := testutil.LeafPEM(t, c.leaf(t))
	return &tlsSpec{CA: c.PEM(), Cert: cert, Key: key}
}

// clientTLS trusts this CA and shows a node certificate of it.
func (c *ca) clientTLS(t *testing.T) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{c.leaf(t)},
		RootCAs:      c.pool,
		MinVersion:   tls.VersionTLS12,
	}
}

func TestRemoteOverTLS(t *testing.T) {
	authority := newCA(t)
	a := spawn(t, spec{Name: "a", TLS: authority.spec(t)})
	b := spawn(t, spec{Name: "b", Seeds: []string{a.self.GossipAddr}, TLS: authority.spec(t)})
	agree(t, []*proc{a, b}, "a", "b")

	a.wake("b", "over-tls")
	testutil.Eventually(t, wait, "b is woken over TLS", func() bool {
		return slices.Equal(b.woken(), []string{"over-tls"})
	})

	// The gRPC server speaks first (its settings frame) once it accepts a
	// client; a refused client reads the TLS alert instead.
	read := func(cfg *tls.Config) error {
		cfg.NextProtos = []string{"h2"}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", b.self.RemoteAddr, cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := conn.SetDeadline(time.Now().Add(wait)); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	if err := read(authority.clientTLS(t)); err != nil {
		t.Fatalf("a client with a certificate of the cluster's CA: %v", err)
	}
	stranger := newCA(t).clientTLS(t)
	stranger.RootCAs = authority.pool // it trusts the server, but the server does not trust it
	if err := read(stranger); err == nil {
		t.Fatal("a client with a certificate of another CA was served")
	}
	anonymous := &tls.Config{RootCAs: authority.pool, MinVersion: tls.VersionTLS12}
	if err := read(anonymous); err == nil {
		t.Fatal("a client without a certificate was served")
	}
}

// MutualTLS builds the two halves of the remote endpoint's TLS from PEM
// files, and says which file it could not use.
func TestMutualTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteCerts(t, dir, "node")
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
	server, client, err := cluster.MutualTLS(ca, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if server.ClientAuth != tls.RequireAndVerifyClientCert || server.ClientCAs == nil || len(server.Certificates) != 1 {
		t.Errorf("server half: %+v", server)
	}
	if client.RootCAs == nil || len(client.Certificates) != 1 {
		t.Errorf("client half: %+v", client)
	}
	cfg := cluster.Loopback()
	cfg.RemoteServerTLS, cfg.RemoteClientTLS = server, client
	if _, err := cluster.New(cfg); err != nil {
		t.Errorf("New with MutualTLS: %v", err)
	}
	for _, c := range []struct{ name, ca, cert, key, want string }{
		{"no CA file", filepath.Join(dir, "none.pem"), cert, key, "read the CA"},
		{"a key for a CA", key, cert, key, "no PEM certificate"},
		{"no key file", ca, cert, filepath.Join(dir, "none.pem"), "load the certificate"},
	} {
		if _, _, err := cluster.MutualTLS(c.ca, c.cert, c.key); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
