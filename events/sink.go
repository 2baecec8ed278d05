package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// ErrPermanent marks a delivery failure that trying again cannot fix: the
// sink refused the event itself (HTTPSink: a 4xx answer other than 408 and
// 429). A Sink returns an error wrapping it; the Relayer then marks the
// event invalid and never sends it again. Any other error is taken as
// transient, and the event is retried.
var ErrPermanent = errors.New("events: permanent delivery failure")

// Sink is where a Relayer delivers events. Send returns nil once the sink
// has accepted e, an error wrapping ErrPermanent if it refused e for good,
// and any other error if it may accept e later. It must respect ctx: the
// relayer cancels it before its claim on the event runs out, since another
// relayer may then send the event too. Send is called concurrently (see
// RelayerConfig.Concurrency). Delivery is at least once: a sink sees an
// event again after a relayer died before recording its outcome, and
// should deduplicate on e.ID(), which is the same on every attempt.
type Sink interface {
	Send(ctx context.Context, e event.Event) error
}

// SinkMode is how HTTPSink puts an event into an HTTP request (the
// CloudEvents HTTP protocol binding's content modes).
type SinkMode int

// Content modes.
const (
	// Binary sends the event's data as the request body, with its content
	// type, and the other attributes as ce-* headers (ce-id, ce-source,
	// ce-type, ce-traceparent …). It is the default.
	Binary SinkMode = iota
	// Structured sends the whole event as one JSON document, with content
	// type application/cloudevents+json.
	Structured
)

func (m SinkMode) String() string {
	switch m {
	case Binary:
		return "binary"
	case Structured:
		return "structured"
	}
	return fmt.Sprintf("SinkMode(%d)", int(m))
}

// HTTPSink delivers events by HTTP POST to URL, encoded with the
// CloudEvents HTTP binding in Mode. The answer decides the outcome: 2xx is
// accepted; 4xx is permanent (ErrPermanent: the event is marked invalid),
// except 408 Request Timeout and 429 Too Many Requests, which say "later";
// anything else, and any network error, is retried. Redirects are followed
// as Client follows them. The error text quotes the start of the answer's
// body, so that ListOutbox shows why a sink refused an event.
type HTTPSink struct {
	// URL receives the POSTs. Required.
	URL string
	// Mode is the content mode. Default Binary.
	Mode SinkMode
	// Client sends the requests. Default http.DefaultClient. A request
	// ends with the relayer's context (before the event's claim runs out),
	// so a Client timeout is only needed to make sends shorter than that.
	// http.DefaultTransport keeps two idle connections per host; with a
	// relayer's Concurrency above that, give Client a Transport whose
	// MaxIdleConnsPerHost is at least Concurrency, or connections to the
	// sink are opened and closed for every other event.
	Client *http.Client
}

// errorBodyLen bounds how much of a refusal's body goes into the error.
const errorBodyLen = 256

// drainLen bounds how much of an answer is read to reuse the connection.
const drainLen = 64 << 10

// Send implements Sink.
func (s *HTTPSink) Send(ctx context.Context, e event.Event) error {
	if s.URL == "" {
		// A configuration error: retried, so that the events are still
		// there once the sink is fixed (or expire at their maximum age).
		return errors.New("events: HTTPSink has no URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, nil)
	if err != nil {
		return fmt.Errorf("events: HTTPSink URL %q: %w", s.URL, err)
	}
	var wctx context.Context
	switch s.Mode {
	case Binary:
		wctx = binding.WithForceBinary(ctx)
	case Structured:
		wctx = binding.WithForceStructured(ctx)
	default:
		return fmt.Errorf("events: HTTPSink has an unknown mode %d", int(s.Mode))
	}
	if err := cehttp.WriteRequest(wctx, binding.ToMessage(&e), req); err != nil {
		// The event itself cannot be written (an attribute no header can
		// hold): no later attempt does better.
		return fmt.Errorf("%w: encode event %s for HTTP: %v", ErrPermanent, e.ID(), err)
	}
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("events: POST %s: %w", s.URL, err)
	}
	defer resp.Body.Close()
	head := make([]byte, errorBodyLen)
	n, _ := io.ReadFull(resp.Body, head)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLen))
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	msg := fmt.Sprintf("POST %s: %s", s.URL, resp.Status)
	if body := strings.TrimSpace(strings.ToValidUTF8(string(head[:n]), "\uFFFD")); body != "" {
		msg += ": " + body
	}
	if code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests {
		return fmt.Errorf("%w: %s", ErrPermanent, msg)
	}
	return errors.New("events: " + msg)
}
