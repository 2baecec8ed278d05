// Package testutil holds helpers shared by the tests of the norn packages.
//
// Its main job is PostgreSQL test infrastructure: PostgresURL hands every
// test a fresh, empty database of its own, on a PostgreSQL server that is
// either given by the NORN_TEST_POSTGRES_URL environment variable or started
// from the system's PostgreSQL binaries once per test binary (a throw-away
// server on a random 127.0.0.1 port, with its data in a temp directory). If
// neither is available, such tests are skipped; on Debian, install the
// postgresql package to run them. RestartPostgres restarts the throw-away
// server, for tests of behaviour across a database restart.
//
// Example:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		testutil.StopPostgres() // stop the throw-away server, remove its data
//		os.Exit(code)
//	}
//
//	func TestStore(t *testing.T) {
//		ctx := context.Background()
//		conn, err := pgx.Connect(ctx, testutil.PostgresURL(t))
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(func() { conn.Close(context.Background()) })
//		// ... create tables, run the code under test ...
//	}
//
// The package is for tests only; do not import it from non-test code.
package testutil
