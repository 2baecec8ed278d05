// Package events brings CloudEvents 1.0 into Norn: an HTTP ingress that
// makes each event durable before it acknowledges it, the workflow side
// that waits for events or is started by them, and a transactional outbox
// that sends the events workflows emit. The event model is sdk-go's
// (github.com/cloudevents/sdk-go/v2, event.Event).
//
// # Ingress
//
// NewHandler returns an http.Handler to mount. It takes events by POST in
// binary mode (attributes in ce- headers, data in the body), structured mode
// (application/cloudevents+json) and batch mode
// (application/cloudevents-batch+json), and answers 202 Accepted only once
// every event of the request is committed to the store: an acknowledged
// event survives a crash. Invalid input gets 400 with a JSON body naming
// the problem and the event, {"error": "time: \"lunchtime\" is not an RFC
// 3339 timestamp", "index": 0}; other answers are 405, 413, 415, and 503 when
// the store is unavailable (safe to retry). A batch is all or nothing.
//
// Validation is strict where the spec is: attribute names of lower-case
// letters and digits, required attributes present and non-empty, optional
// ones non-empty when present, RFC 3339 times, RFC 2046 media types,
// extension values that are strings, booleans or 32-bit integers, data or
// data_base64 but not both, no member given twice.
//
// CloudEvents 0.3 is accepted as well, in every mode, and stored as the 1.0
// event sdk-go maps it to, so that workflows see one version: specversion
// becomes 1.0, schemaurl becomes dataschema, and in structured mode
// datacontentencoding "base64" says that data holds the base64 text of the
// bytes, which are decoded and then carried as 1.0 carries binary data
// (data_base64); the encoding attribute itself is dropped. A 0.3 schemaurl
// must be an absolute URI, since 1.0's dataschema is. The 1.0 names
// dataschema and data_base64 in a 0.3 event, ce-datacontentencoding in
// binary mode (the body is the data as is), a datacontentencoding other
// than base64, and any other specversion are refused with 400 naming the
// attribute. In a 1.0 event, schemaurl and datacontentencoding are
// ordinary extensions.
//
// # Routing
//
// An event is published on the channel named by its type. The message's
// payload is the whole event in structured JSON (nothing is lost: every
// attribute, extension and the data), its type is MessageType
// ("cloudevents"), and its metadata carries ce-id, ce-source, ce-type and
// ce-subject (MetaID …), for mailbox filters. Channels fan out as usual: a
// workflow must subscribe to the type (Subscribe, mailbox.Broadcast or
// mailbox.Competing) to receive it; events published on a type nobody has
// subscribed to wait in the channel's queue for a competing subscriber
// (actor.Config.QueueRetention).
//
// An event with the extension attribute norninstance (ExtInstance) set to
// an instance ID goes to that instance's mailbox only, subscribed or not.
// An event whose type has a workflow registered with Handle starts an
// instance of it instead of being published.
//
// Concurrent requests share store steps: while one step commits, the
// deliveries of the requests that arrive meanwhile queue up and go into the
// next step together (waiting at most half a commit, and 1ms, for the
// clients just answered), so that the store's writer commits many events
// per transaction. Each request is still answered only after the commit
// that holds its events, and alone: if a shared step fails, its requests
// are committed again one by one, and only the faulty one is refused.
//
// # Duplicates
//
// A CloudEvent is identified by its source and id. Each is delivered under a
// message ID derived from the two (MessageID), so an event received again
// within actor.Config.DedupeWindow (default 7 days) is acknowledged with 202
// and not delivered again; after the window it would be. An event that
// starts a workflow (Handle) does so under an instance ID derived from the
// two (InstanceID), so a redelivery starts no second instance.
//
// # In a workflow
//
// Wait takes the next event of a type, with its data decoded as T, and
// returns an Event[T]: the sdk-go event (every attribute and extension)
// plus Data. It keeps the event's traceparent extension (the W3C trace
// context) so that TraceParent, and the events the workflow emits, continue
// the trace.
//
// # Outbox
//
// Emit records an outgoing event in the outbox, in the transaction of the
// workflow step that emits it: a step that is not committed (the workflow
// panicked, the process crashed, the commit failed) emits nothing, and is
// run again from history; a committed one is always relayed. A workflow
// that returns an error commits its last step with the failure, so the
// events it emitted before are sent: emit news of success after the work
// succeeded, and news of failure in the failure path (see Emit). A Relayer claims pending events from the store,
// sends them to a Sink (HTTPSink: binary or structured mode) and records
// the outcome: sent; invalid (the sink refused it for good, 4xx), kept
// visible and never retried; or, after transient failures retried with
// back-off until RelayerConfig.MaxAge, expired. Claims keep relayers that
// share a store from sending one event at once; a relayer killed mid-send
// loses its claims when they expire, and a relayer that stops releases the
// events it claimed but did not send at once, without counting an attempt.
//
// Relaying is woken by commits, not by polling. Pass the System's
// WatchOutbox() as RelayerConfig.Wake: it is signalled by the node's own
// commits that emit, and, on PostgreSQL, by those of every other process
// sharing the database (the step's transaction sends a NOTIFY, delivered at
// its commit; see persistence.OutboxNotifier). A relayer given no Wake
// listens to such a store itself. The poll (RelayerConfig.PollInterval,
// default 5s) is only a safety net, for lost notifications and for SQLite
// files shared by processes, which cannot notify one another.
//
// Events whose delivery ended stay in the outbox, visible to
// persistence.Outbox.ListOutbox, for RelayerConfig.Retention (default 7
// days) after they ended; the relayer then deletes them. A negative
// Retention keeps them forever. Pending events are never deleted.
//
// Example: orders placed over HTTP wait for their payment event.
//
//	type Order struct{ ID string; Total int }
//	type Payment struct{ Amount int }
//
//	var orderFlow = actor.Workflow("order", func(ctx *actor.Context, in events.Event[Order]) (string, error) {
//		events.Adopt(ctx, in) // continue the producer's trace
//		// Competing: a payment published before this subscribed waits in
//		// the channel's queue; WithSubject leaves other orders' payments.
//		if err := events.Subscribe(ctx, "com.example.payment.received", mailbox.Competing); err != nil {
//			return "", err
//		}
//		paid, err := events.Wait[Payment](ctx, "com.example.payment.received",
//			events.WithSubject(in.Data.ID), events.Timeout(24*time.Hour))
//		if errors.Is(err, actor.ErrTimeout) {
//			return "expired", nil
//		}
//		if err != nil {
//			return "", err
//		}
//		return fmt.Sprintf("paid %d by %s", paid.Data.Amount, paid.Source()), nil
//	})
//
//	sys, _ := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(orderFlow)})
//	h, err := events.NewHandler(sys, events.Handle("com.example.order.placed", orderFlow))
//	if err != nil { … }
//	http.Handle("/events", h)
//
// A producer then posts, for instance in binary mode:
//
//	curl -X POST localhost:8080/events -H 'ce-specversion: 1.0' -H 'ce-id: 1' \
//	  -H 'ce-source: /shop' -H 'ce-type: com.example.order.placed' \
//	  -H 'Content-Type: application/json' -d '{"ID": "o-1", "Total": 30}'
package events
