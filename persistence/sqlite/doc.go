// Package sqlite is Norn's embedded default store: one SQLite file, pure Go
// (modernc.org/sqlite, no cgo).
//
// Durability: the database runs in WAL mode with PRAGMA synchronous=FULL by
// default, so every commit is fsynced before Apply returns. Norn promises
// "durable before acknowledged": a Send or Spawn that returned must survive a
// power cut, not just a process crash, and NORMAL (which skips the fsync of
// each WAL commit) would only give the latter. The cost of FULL is paid once
// per batch, not once per step: a single writer goroutine takes every step
// queued while the previous commit was being flushed and applies them in one
// transaction (group commit), with a savepoint around each step that can
// fail after it has written (consuming, subscribing, firing a timer, a
// MustDeliver send); should another step fail part-way, the commit is
// redone with a savepoint around every step. When fewer steps are
// queued than the previous commit carried, it waits up to
// Options.CommitDelay (50µs) for the callers that commit answered, who are
// usually back by then; a lone caller never waits. Options.Synchronous =
// Normal trades power-loss durability for latency where that is acceptable.
//
// A step is applied as persistence.Step specifies, one small function per
// concern in that order (see applyStep), each with prepared statements.
//
// Several processes may open one file: migrations run under BEGIN IMMEDIATE,
// writes take the write lock with a busy timeout, and leases fence writers.
//
//	st, err := sqlite.Open(ctx, "norn-data/norn.db", sqlite.Options{})
//	if err != nil { ... }
//	defer st.Close()
package sqlite
