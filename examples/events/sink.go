package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// sink is the events' destination: an HTTP server on a free loopback port
// that answers 503 to its first two requests (as a service still starting
// would) and 200 after, printing each request.
type sink struct {
	URL string

	srv      *http.Server
	served   chan struct{}
	mu       sync.Mutex
	requests int
}

// failFirst is how many requests the sink refuses before it accepts.
const failFirst = 2

func startSink() (*sink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{URL: "http://" + l.Addr().String() + "/events", served: make(chan struct{})}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("sink: %v", err)
		}
	}()
	return s, nil
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	e, err := cehttp.NewEventFromHTTPRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests++
	n := s.requests
	s.mu.Unlock()
	if n <= failFirst {
		logf("sink %s: 503 to %s %s (request %d: still starting)", r.URL.Path, e.Type(), e.ID(), n)
		http.Error(w, "starting up", http.StatusServiceUnavailable)
		return
	}
	logf("sink %s: 200 to %s %s, source %s, traceparent %v, data %s", r.URL.Path, e.Type(), e.ID(), e.Source(), e.Extensions()["traceparent"], e.Data())
	w.WriteHeader(http.StatusOK)
}

// Close stops the server.
func (s *sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.served
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	return nil
}
