package cluster

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornlabs/norn/cluster/internal/wire"
	"github.com/nornlabs/norn/internal/testutil"
)

// countingHandler counts the log records with a given message.
type countingHandler struct {
	msg string
	n   *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// A wake sent to a node that is gone makes protoactor retry the connection
// five times; once the endpoint stops, none of those connections may live
// on, reconnecting in the background.
func TestWakeToDeadNodeLeavesNoConnection(t *testing.T) {
	if testutil.InOwnProcess(t) { // it starts a remote endpoint in this process
		return
	}
	failures := &atomic.Int64{}
	log := slog.New(countingHandler{msg: "EndpointWriter failed to connect", n: failures})
	ep, err := startEndpoint(Loopback(), "127.0.0.1", log, func(*wire.Wake) {})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ep.send(dead, &wire.Wake{Instances: []string{"i-1"}, From: "test"})
	testutil.Eventually(t, time.Minute, "the writer gives up on the dead node", func() bool { return failures.Load() >= 5 })
	ep.stop()
	testutil.Eventually(t, 20*time.Second, "no gRPC goroutine is left", func() bool {
		return grpcGoroutines() == ""
	})
}

// grpcGoroutines returns the stacks of the goroutines running gRPC code.
func grpcGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "google.golang.org/grpc.") || strings.Contains(g, "google.golang.org/grpc/internal") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
