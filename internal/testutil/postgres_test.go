package testutil_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/nornlabs/norn/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.StopPostgres()
	// Checked after StopPostgres: the goroutine waiting for the server
	// process must be gone too.
	if err := goleak.Find(); err != nil && code == 0 {
		slog.Error("leaked goroutines", "err", err)
		code = 1
	}
	os.Exit(code)
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	admin := connect(t, testutil.PostgresAdminURL(t))
	var exists bool
	err := admin.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestPostgresURLGivesSeparateEmptyDatabases(t *testing.T) {
	ctx := context.Background()
	url1, url2 := testutil.PostgresURL(t), testutil.PostgresURL(t)
	if url1 == url2 {
		t.Fatalf("PostgresURL returned %s twice", url1)
	}
	conn1, conn2 := connect(t, url1), connect(t, url2)

	var db1, db2 string
	if err := conn1.QueryRow(ctx, "SELECT current_database()").Scan(&db1); err != nil {
		t.Fatal(err)
	}
	if err := conn2.QueryRow(ctx, "SELECT current_database()").Scan(&db2); err != nil {
		t.Fatal(err)
	}
	if db1 == db2 {
		t.Fatalf("both URLs lead to database %s", db1)
	}

	for _, conn := range []*pgx.Conn{conn1, conn2} {
		var n int
		err := conn.QueryRow(ctx,
			"SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("new database %s has %d relations in schema public, want 0", conn.Config().Database, n)
		}
	}

	if _, err := conn1.Exec(ctx, "CREATE TABLE things (id int PRIMARY KEY, name text)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn1.Exec(ctx, "INSERT INTO things VALUES (1, 'one')"); err != nil {
		t.Fatal(err)
	}
	var in1, in2 bool
	const q = "SELECT to_regclass('public.things') IS NOT NULL"
	if err := conn1.QueryRow(ctx, q).Scan(&in1); err != nil {
		t.Fatal(err)
	}
	if err := conn2.QueryRow(ctx, q).Scan(&in2); err != nil {
		t.Fatal(err)
	}
	if !in1 || in2 {
		t.Errorf("table things exists in first database: %v (want true), in second: %v (want false)", in1, in2)
	}
}

func TestPostgresURLDropsDatabaseOnCleanup(t *testing.T) {
	var name string
	t.Run("sub", func(t *testing.T) {
		conn := connect(t, testutil.PostgresURL(t))
		name = conn.Config().Database
		if !databaseExists(t, name) {
			t.Fatalf("database %s does not exist during the test", name)
		}
		// conn deliberately stays open until the cleanups run.
	})
	if databaseExists(t, name) {
		t.Errorf("database %s still exists after the test finished", name)
	}
}

func TestPostgresURLParallel(t *testing.T) {
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			conn := connect(t, testutil.PostgresURL(t))
			ctx := context.Background()
			if _, err := conn.Exec(ctx, "CREATE TABLE t (v int)"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
				t.Fatal(err)
			}
			var v int
			if err := conn.QueryRow(ctx, "SELECT v FROM t").Scan(&v); err != nil {
				t.Fatal(err)
			}
			if v != i {
				t.Errorf("got %d, want %d", v, i)
			}
		})
	}
}

func TestPostgresAdminURL(t *testing.T) {
	conn := connect(t, testutil.PostgresAdminURL(t))
	var super bool
	if err := conn.QueryRow(context.Background(), "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		t.Fatal(err)
	}
	if !super {
		t.Error("admin role cannot create databases")
	}
}

// TestThrowAwayServerSkipsFlushes: the throw-away server does not wait on
// the disk (the suite's PostgreSQL tests would take longer otherwise).
func TestThrowAwayServerSkipsFlushes(t *testing.T) {
	if os.Getenv(testutil.PostgresURLEnv) != "" {
		t.Skipf("%s is set: the server is not the throw-away one", testutil.PostgresURLEnv)
	}
	conn := connect(t, testutil.PostgresAdminURL(t))
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
		var v string
		if err := conn.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "off" {
			t.Errorf("%s = %s, want off", name, v)
		}
	}
}

func TestRestartPostgresKeepsData(t *testing.T) {
	ctx := context.Background()
	url := testutil.PostgresURL(t)

	conn := connect(t, url)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO kept VALUES ('before restart')"); err != nil {
		t.Fatal(err)
	}

	testutil.RestartPostgres(t)

	// The connection from before the restart is broken...
	if err := conn.Ping(ctx); err == nil {
		t.Error("connection opened before the restart still works")
	}
	// ...but the URL still works, and the data is still there.
	conn2 := connect(t, url)
	var v string
	if err := conn2.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != "before restart" {
		t.Errorf("got %q, want %q", v, "before restart")
	}
	// And new databases can still be created.
	connect(t, testutil.PostgresURL(t))
}
