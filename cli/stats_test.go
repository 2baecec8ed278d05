package cli_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/cli"
	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/persistence/storeurl"
)

// TestStats checks 'norn stats' against the seeded store: the table (a
// golden file) and the JSON, which must equal the store's own counts.
func TestStats(t *testing.T) {
	t.Parallel()
	url := filepath.Join(t.TempDir(), "norn.db")
	seed(t, url)
	env := []string{cli.StoreEnv + "=" + url}

	out := norn(t, env, "stats").ok(t).stdout
	golden(t, "stats", out)
	lines := trimLines(out)
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "WORKFLOW") || !strings.HasPrefix(lines[len(lines)-1], "TOTAL") {
		t.Fatalf("stats table:\n%s", out)
	}

	var got []struct {
		Workflow, Status string
		Count            int
	}
	if err := json.Unmarshal([]byte(norn(t, env, "stats", "--json").ok(t).stdout), &got); err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Ctx(t, time.Minute)
	st, err := storeurl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	want, err := st.CountInstances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var g, w []string
	for _, c := range got {
		g = append(g, fmt.Sprintf("%s/%s=%d", c.Workflow, c.Status, c.Count))
	}
	for _, c := range want {
		w = append(w, fmt.Sprintf("%s/%s=%d", c.Workflow, c.Status, c.Count))
	}
	if len(w) == 0 || !slices.Equal(g, w) {
		t.Fatalf("stats --json = %v, store counts %v", got, want)
	}

	if r := norn(t, env, "stats", "extra"); r.code != 2 {
		t.Fatalf("stats with an argument: exit %d, want 2", r.code)
	}
}
