package testutil

import (
	"os"
	"testing"
)

// SoakEnv names the environment variable that turns the suite's soak sizes
// on: with NORN_TEST_SOAK=1, tests that take a size from Soak run their big
// version (more messages, more rounds), which takes minutes rather than
// seconds. Without it they run a size that checks the same properties
// quickly enough for every `go test ./...`.
const SoakEnv = "NORN_TEST_SOAK"

// Soak returns big when SoakEnv is set and small otherwise (and small under
// -short either way).
func Soak(tb testing.TB, small, big int) int {
	tb.Helper()
	if testing.Short() || os.Getenv(SoakEnv) == "" {
		return small
	}
	tb.Logf("testutil: %s is set: soak size %d (default %d)", SoakEnv, big, small)
	return big
}
