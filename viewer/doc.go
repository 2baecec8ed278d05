// Package viewer is Norn's web viewer: an http.Handler that shows the
// instances in a System's store and, when allowed, cancels them or sends
// them messages.
//
// The list page filters instances by workflow, status, parent, creation
// and update time and input fields, opens one by ID and pages through the
// rest with a page token. An
// instance's page shows its status, input and output (or failure), a
// timeline chart of what ran when (activities, timers, receives and
// children as bars on a time axis, one row each while they overlap), its
// history event by event (activities with their attempts and durations,
// messages with their channel and sender, timers with their due times,
// children), its mailbox, subscriptions and pending timers. A long history
// shows its first and last events, with a link to page through the rest,
// so a page costs the same for ten events or a million. Its query form
// asks the instance a query its workflow registered (actor.HandleQuery)
// and shows the answer: from the live activation when the System runs it,
// else by replaying its history, with the System's workflows or
// Options.Workflows. A query writes nothing, so the read-only viewer has
// the form too.
//
// The channels page lists every channel with its mode, subscribers,
// waiting messages and the oldest one's age; the counts page the instances
// by workflow and status, and every page's header their totals by status
// (counted from an index, reused for five seconds). The list, instance,
// channels and counts pages refresh themselves every five seconds (the
// header's button pauses that), unless the user is typing in a form, has
// opened a payload or selected text.
//
// Pages are rendered on the server with html/template; the stylesheet and a
// small script are embedded in the binary, so there is no front-end build
// step and nothing is loaded from elsewhere.
//
// The viewer is read-only unless Options.AllowActions is set, and open to
// anyone who reaches it unless Options.Token is set:
//
//	sys, err := actor.Start(ctx, actor.Config{Store: store, Client: true})
//	if err != nil { ... }
//	h, err := viewer.New(sys, viewer.Options{Token: token, BasePath: "/norn"})
//	if err != nil { ... }
//	mux := http.NewServeMux()
//	mux.Handle("/norn/", h)
//	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
//
// A browser then opens http://127.0.0.1:8080/norn/?token=… once; the token
// is kept in a cookie for that path. Scripts send "Authorization: Bearer …".
package viewer
