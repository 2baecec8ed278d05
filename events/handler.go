package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence"
)

// DefaultMaxBodyBytes is the default limit of a request body (WithMaxBodyBytes).
const DefaultMaxBodyBytes = 1 << 20

// Option configures NewHandler.
type Option func(*config)

type config struct {
	maxBody  int64
	log      *slog.Logger
	starters map[string][]starter // by event type
}

// WithMaxBodyBytes bounds a request body; a larger one is refused with 413.
// Default DefaultMaxBodyBytes (1 MiB).
func WithMaxBodyBytes(n int64) Option { return func(c *config) { c.maxBody = n } }

// WithLogger sets where the handler logs the requests it fails with 5xx
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// starter starts one workflow for an event: prepare decodes the workflow's
// input (an error is the client's: 400) and returns the spawn to commit.
type starter struct {
	workflow string
	prepare  func(ev event.Event) (func(ctx context.Context, sys *actor.System) error, error)
}

// Handle makes every event of eventType start an instance of wf instead of
// being published. The instance's ID is InstanceID(wf.Name(), source, id),
// so a redelivered event starts nothing new (as long as the instance's
// record exists). Its input is the event's data decoded from JSON as In;
// a workflow that takes Event[T] (In = events.Event[T]) gets the whole
// event, with every attribute and extension, and its data decoded as T.
// Data that does not decode is refused with 400 before anything is
// committed. wf must be registered on the System (with the default JSON
// codec when In is Event[T]). Several workflows may handle one type: each
// event starts one instance of each.
func Handle[In, Out any](eventType string, wf *actor.WorkflowDef[In, Out]) Option {
	return func(c *config) {
		st := starter{workflow: wf.Name()}
		st.prepare = func(ev event.Event) (func(context.Context, *actor.System) error, error) {
			var in In
			var err error
			if p, ok := any(&in).(eventInput); ok {
				err = p.setEvent(ev)
			} else {
				in, err = decodeData[In](ev)
			}
			if err != nil {
				return nil, err
			}
			id := InstanceID(wf.Name(), ev.Source(), ev.ID())
			return func(ctx context.Context, sys *actor.System) error {
				_, err := actor.Spawn(ctx, sys, wf, in, actor.WithID(id))
				return err
			}, nil
		}
		c.starters[eventType] = append(c.starters[eventType], st)
	}
}

// handler is the CloudEvents HTTP ingress (see NewHandler).
type handler struct {
	sys *actor.System
	cfg config
	pub coalescer
}

// NewHandler returns the HTTP ingress of sys: it takes CloudEvents 1.0 by
// HTTP POST in binary, structured (application/cloudevents+json) and batch
// (application/cloudevents-batch+json) content mode, and answers 202
// Accepted once every event of the request is committed to the store.
// CloudEvents 0.3 is taken too, read as sdk-go reads it and stored as the
// 1.0 event it maps to (see the package documentation); the events of a
// batch share one specversion.
// Each event is, in this order of precedence:
//   - sent to one instance's mailbox if it carries the extension
//     norninstance (ExtInstance) naming it (404 if there is no such
//     instance, 410 if it has ended);
//   - given to the workflows registered for its type with Handle;
//   - otherwise published on the channel named by its type.
//
// A batch is all or nothing: an invalid event refuses the whole request,
// and the deliveries commit in one store step. (Instances that Handle
// starts are created one step each after it; should the store fail in
// between, the client's retry of the batch completes them without
// duplicates.) Other answers: 400 with a JSON body {"error", "index"} for
// a malformed or invalid event, naming the attribute; 405 for a method
// other than POST; 413 for a body over the limit or an event over
// actor.Config.MaxPayload; 415 for a media type that is no CloudEvent;
// 503 when the store or node is unavailable (safe to retry).
//
// NewHandler fails with actor.ErrInvalidInput if a Handle names a
// workflow that sys has not registered, or an invalid event type, or the
// body limit is not positive.
func NewHandler(sys *actor.System, opts ...Option) (http.Handler, error) {
	cfg := config{maxBody: DefaultMaxBodyBytes, log: slog.Default(), starters: map[string][]starter{}}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxBody <= 0 {
		return nil, fmt.Errorf("%w: events: WithMaxBodyBytes(%d): the limit must be positive", actor.ErrInvalidInput, cfg.maxBody)
	}
	registered := sys.Workflows()
	for typ, sts := range cfg.starters {
		if err := channelFor(typ); err != nil {
			return nil, fmt.Errorf("%w: events: Handle(%q): %v", actor.ErrInvalidInput, typ, err)
		}
		for _, st := range sts {
			if !slices.Contains(registered, st.workflow) {
				return nil, fmt.Errorf("%w: events: Handle(%q, %q): the workflow is not registered on the System", actor.ErrInvalidInput, typ, st.workflow)
			}
			if err := persistence.ValidateID("instance ID", InstanceID(st.workflow, "", "")); err != nil {
				return nil, fmt.Errorf("%w: events: Handle(%q, %q): %v", actor.ErrInvalidInput, typ, st.workflow, err)
			}
		}
	}
	return &handler{sys: sys, cfg: cfg, pub: coalescer{sys: sys, arrived: make(chan struct{}, 1)}}, nil
}

// errorBody is the JSON body of a refused request.
type errorBody struct {
	Error string `json:"error"`
	Index *int   `json:"index,omitempty"` // the event of a batch it concerns (0 for a single event)
}

// ServeHTTP implements http.Handler.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.refuse(w, r, &requestError{status: http.StatusMethodNotAllowed, index: -1, msg: "method " + r.Method + " not allowed; POST events"})
		return
	}
	mode, rerr := requestMode(r.Header)
	if rerr != nil {
		h.refuse(w, r, rerr)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, r, &requestError{status: http.StatusRequestEntityTooLarge, index: -1,
				msg: fmt.Sprintf("the body is over the limit of %d bytes", tooLarge.Limit)})
			return
		}
		h.refuse(w, r, badRequest("reading the body: %v", err))
		return
	}
	evs, rerr := readEvents(mode, r.Header, body)
	if rerr == nil {
		rerr = h.commit(r.Context(), evs)
	}
	if rerr != nil {
		h.refuse(w, r, rerr)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = fmt.Fprintf(w, `{"accepted":%d}`+"\n", len(evs))
}

// refuse answers with a JSON error body.
func (h *handler) refuse(w http.ResponseWriter, r *http.Request, e *requestError) {
	if e.status >= 500 {
		h.cfg.log.Warn("events: request failed", "status", e.status, "error", e.msg, "remote", r.RemoteAddr)
		if e.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
	}
	body := errorBody{Error: e.msg}
	if e.index >= 0 {
		body.Index = &e.index
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(b, '\n'))
}

// channelFor checks that an event type can name a channel.
func channelFor(typ string) error {
	if typ == "" {
		return errors.New("an event type must not be empty")
	}
	if strings.HasPrefix(typ, persistence.SystemChannelPrefix) {
		return fmt.Errorf("an event type must not start with %q (the runtime's own channels)", persistence.SystemChannelPrefix)
	}
	return persistence.ValidateID("type", typ)
}

// commit routes the events (see NewHandler) and commits them: the
// deliveries in one store step (which concurrent requests may share, see
// coalescer), then the instances Handle starts.
func (h *handler) commit(ctx context.Context, evs []event.Event) *requestError {
	var (
		outs   []actor.Outgoing
		outIdx []int // event index of each outgoing message
		spawns []func(context.Context, *actor.System) error
		spIdx  []int
	)
	for i, ev := range evs {
		m, err := message(ev)
		if err != nil {
			return badEvent(i, err)
		}
		if m.Target == "" {
			if sts := h.cfg.starters[ev.Type()]; len(sts) > 0 {
				for _, st := range sts {
					spawn, err := st.prepare(ev)
					if err != nil {
						return badEvent(i, fmt.Errorf("data: not the input of workflow %s: %w", st.workflow, err))
					}
					spawns, spIdx = append(spawns, spawn), append(spIdx, i)
				}
				continue
			}
		}
		outs, outIdx = append(outs, m), append(outIdx, i)
	}
	if len(outs) > 0 {
		if err := h.pub.publish(ctx, outs); err != nil {
			index := -1
			var be *actor.BatchError
			if errors.As(err, &be) && be.Index >= 0 && be.Index < len(outIdx) {
				index = outIdx[be.Index]
			}
			return commitError(index, err)
		}
	}
	for k, spawn := range spawns {
		if err := spawn(ctx, h.sys); err != nil {
			return commitError(spIdx[k], err)
		}
	}
	return nil
}

// message makes the delivery of one event: its structured JSON as the
// payload, its identity in the metadata, a message ID derived from
// (source, id), and the channel of its type or the instance it names.
func message(ev event.Event) (actor.Outgoing, error) {
	if err := channelFor(ev.Type()); err != nil {
		return actor.Outgoing{}, &attrError{attr: "type", msg: err.Error()}
	}
	md := map[string]string{MetaID: ev.ID(), MetaSource: ev.Source(), MetaType: ev.Type()}
	if s := ev.Subject(); s != "" {
		md[MetaSubject] = s
	}
	for _, attr := range []string{"id", "source", "subject"} {
		if err := persistence.ValidateText(attr, md["ce-"+attr], persistence.MaxMetadataValueLen); err != nil {
			return actor.Outgoing{}, &attrError{attr: attr, msg: err.Error()}
		}
	}
	payload, err := encodeEvent(ev)
	if err != nil {
		return actor.Outgoing{}, err
	}
	m := actor.Outgoing{Channel: ev.Type(), Payload: payload, Type: MessageType, Metadata: md, ID: MessageID(ev.Source(), ev.ID())}
	if v, ok := ev.Extensions()[ExtInstance]; ok {
		inst, isString := v.(string)
		if !isString || inst == "" {
			return actor.Outgoing{}, attrErr(ExtInstance, "must be a non-empty string (an instance ID)")
		}
		if err := persistence.ValidateID(ExtInstance, inst); err != nil {
			return actor.Outgoing{}, &attrError{attr: ExtInstance, msg: err.Error()}
		}
		// A plain send by PID, not a direct send on the type's channel:
		// that channel may have broadcast or competing subscribers, and a
		// channel has one mode. Wait takes the event either way.
		m.Channel, m.Target = "", actor.PID(inst)
	}
	return m, nil
}

// commitError turns an error of the commit into the answer.
func commitError(index int, err error) *requestError {
	e := &requestError{index: index, msg: err.Error()}
	switch {
	case errors.Is(err, actor.ErrPayloadTooLarge):
		e.status = http.StatusRequestEntityTooLarge
	case errors.Is(err, actor.ErrNotFound):
		e.status, e.msg = http.StatusNotFound, ExtInstance+": no such instance: "+err.Error()
	case errors.Is(err, actor.ErrInstanceDone):
		e.status, e.msg = http.StatusGone, ExtInstance+": the instance has ended: "+err.Error()
	case errors.Is(err, actor.ErrChannelModeConflict), errors.Is(err, actor.ErrIDConflict):
		e.status = http.StatusConflict
	case errors.Is(err, actor.ErrInvalidInput):
		e.status = http.StatusBadRequest
	case errors.Is(err, actor.ErrUnknownWorkflow):
		e.status, e.index = http.StatusInternalServerError, -1
	default:
		// The store or the node: nothing (or, for Handle, not everything)
		// was committed, and a retry is safe.
		e.status, e.index = http.StatusServiceUnavailable, -1
		e.msg = "not committed, retry: " + err.Error()
	}
	return e
}
