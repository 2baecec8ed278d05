package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// resolveStore is --store, else $NORN_STORE, checked for a known scheme.
func (e *env) resolveStore(cmd string) (string, error) {
	u := e.storeURL
	if u == "" {
		u = e.getenv(StoreEnv)
	}
	if u == "" {
		return "", usagef(cmd, "no store: give --store URL or set %s", StoreEnv)
	}
	if scheme, _, ok := strings.Cut(u, "://"); ok {
		switch scheme {
		case "sqlite", "postgres", "postgresql":
		default:
			// The URL itself is not repeated: it may hold a password.
			return "", usagef(cmd, "unknown store scheme %q (want an SQLite path, sqlite:// or postgres://)", scheme)
		}
	}
	return u, nil
}

// sqlitePath is the file of an SQLite store URL; ok is false for others.
func sqlitePath(u string) (path string, ok bool) {
	switch {
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return "", false
	case strings.HasPrefix(u, "sqlite://"):
		path, _, _ = strings.Cut(strings.TrimPrefix(u, "sqlite://"), "?")
		return path, true
	}
	return u, true
}

// openStore opens the store. Only migrate (create) makes a store: every
// other command opens an existing one and creates nothing, neither an
// SQLite file nor the schema in an empty PostgreSQL database, so that a
// mistyped --store fails instead of leaving an empty store behind.
func (e *env) openStore(cmd string, create bool) (persistence.Store, string, error) {
	u, err := e.resolveStore(cmd)
	if err != nil {
		return nil, "", err
	}
	path, isFile := sqlitePath(u)
	if isFile {
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return nil, "", usagef(cmd, "store %s is a directory, not an SQLite file%s", path, dbFilesIn(path))
		}
	}
	var st persistence.Store
	if create {
		st, err = storeurl.Open(e.ctx, u)
	} else {
		st, err = storeurl.OpenExisting(e.ctx, u)
	}
	switch {
	case errors.Is(err, persistence.ErrNoSchema) && isFile:
		if _, serr := os.Stat(path); errors.Is(serr, os.ErrNotExist) {
			return nil, "", fmt.Errorf("store %s does not exist%s ('%s migrate' creates a store)", path, dbFilesIn(filepath.Dir(path)), e.name)
		}
		return nil, "", fmt.Errorf("store %s holds no Norn schema: not a Norn store ('%s migrate' creates one)", path, e.name)
	case errors.Is(err, persistence.ErrNoSchema):
		return nil, "", fmt.Errorf("store %s holds no Norn schema: not a Norn store ('%s migrate' creates one)", describeStore(u), e.name)
	case err != nil:
		return nil, "", fmt.Errorf("open store: %w", err)
	}
	return st, u, nil
}

// dbFilesIn lists the SQLite files in dir, for an error about a store path
// that is not one: the examples and nodes name their files themselves.
func dbFilesIn(dir string) string {
	names, _ := filepath.Glob(filepath.Join(dir, "*.db"))
	if len(names) == 0 {
		return ""
	}
	const most = 10
	more := ""
	if len(names) > most {
		names, more = names[:most], fmt.Sprintf(", and %d more", len(names)-most)
	}
	return "; the SQLite files in " + dir + " are: " + strings.Join(names, ", ") + more
}

// describeStore is a store URL fit for messages: without its password.
func describeStore(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Redacted()
	}
	return "(unparsable URL)"
}

// joinTimeout bounds the start of the client System, which with --seeds
// joins the cluster.
const joinTimeout = 30 * time.Second

// client is an open store and a System on it that runs no instances.
type client struct {
	store persistence.Store
	sys   *actor.System
}

// openClient opens the store and starts a client System on it: it runs
// no instances (the nodes do), while Send, Cancel and the reads work.
func (e *env) openClient(cmd string) (*client, error) {
	st, _, err := e.openStore(cmd, false)
	if err != nil {
		return nil, err
	}
	cfg := actor.Config{Store: st, Client: true, NodeID: e.nodeID(), Logger: e.log, Codec: e.opts.Codec, Errors: e.opts.Errors}
	ccfg, err := e.clusterConfig(cmd)
	if err != nil {
		st.Close()
		return nil, err
	}
	if ccfg != nil {
		cl, err := cluster.New(*ccfg)
		if err != nil {
			st.Close()
			return nil, usagef(cmd, "%v", err)
		}
		cfg.Cluster = cl
	}
	// Joining a cluster whose seeds do not answer must not hang.
	ctx, cancel := context.WithTimeout(e.ctx, joinTimeout)
	defer cancel()
	sys, err := actor.Start(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &client{store: st, sys: sys}, nil
}

// close stops the System and closes the store.
func (c *client) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(c.sys.Stop(ctx), c.store.Close())
}

// withClient runs fn with an open client and closes it after.
func (e *env) withClient(cmd string, fn func(c *client) error) (err error) {
	c, err := e.openClient(cmd)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	return fn(c)
}
