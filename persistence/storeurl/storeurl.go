// Package storeurl opens a store from a URL, for commands, examples and
// benchmarks that let their user choose the store:
//
//	sqlite:///var/lib/norn/norn.db   (or sqlite://relative/path.db, or a bare file path)
//	sqlite://norn.db?synchronous=normal   (trade power-loss durability for latency)
//	postgres://user:pass@host:5432/db
//
//	st, err := storeurl.Open(ctx, "sqlite://norn-data/norn.db")
//	if err != nil { ... }
//	defer st.Close()
package storeurl

import (
	"context"
	"fmt"
	"strings"

	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

// Open opens the store the URL names. On error the Store is nil (a nil
// interface, not a typed nil pointer).
func Open(ctx context.Context, url string) (persistence.Store, error) {
	return open(ctx, url, false)
}

// OpenExisting is Open for tools that only read: it creates nothing, and
// fails with an error matching persistence.ErrNoSchema when the SQLite
// file does not exist or the database holds no Norn schema.
func OpenExisting(ctx context.Context, url string) (persistence.Store, error) {
	return open(ctx, url, true)
}

func open(ctx context.Context, url string, noCreate bool) (persistence.Store, error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return openPostgres(ctx, url, noCreate)
	case strings.HasPrefix(url, "sqlite://"):
		path, query, _ := strings.Cut(strings.TrimPrefix(url, "sqlite://"), "?")
		if path == "" {
			return nil, fmt.Errorf("storeurl: %q has no file path", url)
		}
		opts := sqlite.Options{NoCreate: noCreate}
		for _, kv := range strings.Split(query, "&") {
			if kv == "" {
				continue
			}
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "synchronous":
				opts.Synchronous = sqlite.Synchronous(strings.ToUpper(v))
			default:
				return nil, fmt.Errorf("storeurl: unknown sqlite option %q in %q (known: synchronous)", k, url)
			}
		}
		return openSQLite(ctx, path, opts)
	case strings.Contains(url, "://"):
		return nil, fmt.Errorf("storeurl: unknown store scheme in %q (want sqlite:// or postgres://)", url)
	case url == "":
		return nil, fmt.Errorf("storeurl: empty store URL")
	default:
		return openSQLite(ctx, url, sqlite.Options{NoCreate: noCreate})
	}
}

// openSQLite returns a nil Store on error: a typed nil *sqlite.Store in the
// interface would compare non-nil and panic on Close.
func openSQLite(ctx context.Context, path string, opts sqlite.Options) (persistence.Store, error) {
	st, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	return st, nil
}
