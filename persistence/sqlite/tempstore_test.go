package sqlite

import (
	"context"
	"path/filepath"
	"testing"
)

// The writer keeps its savepoint journal in memory: on disk, a step that
// rewrites more than 64 KiB of pages costs two write syscalls per page,
// which was a sixth of the writer's time when many instances woke at once.
// Readers keep the default, their sorts may be large.
func TestWriterJournalsSavepointsInMemory(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(t.TempDir(), "norn.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var w, r int
	if err := st.w.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&w); err != nil {
		t.Fatal(err)
	}
	if err := st.r.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&r); err != nil {
		t.Fatal(err)
	}
	if w != 2 {
		t.Errorf("writer temp_store = %d, want 2 (memory)", w)
	}
	if r != 0 {
		t.Errorf("reader temp_store = %d, want 0 (the default)", r)
	}
}
