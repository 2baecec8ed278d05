// Package metrics exports a Norn node's metrics in the Prometheus format.
//
// Most series come from the node's Hooks (instances started and ended,
// activations, activity attempts, retries and failures, timers fired and
// their lateness, lease take-overs) and from the store driver's commit
// observer (group-commit batch sizes and latency, steps committed, failed
// transactions). Counting from hooks costs a map lookup per event and
// nothing at scrape time, and it is exact for what this node did; a
// cluster's totals are the sum over its nodes.
//
// What the store holds (instances not yet ended by workflow and status,
// pending timers, waiting messages, the deepest mailbox) is not what one
// node saw happen, so it is read from the store on scrape, cached for
// Options.StatsTTL so that frequent scrapes do not cost one count query
// each (see Metrics.ReadStats).
//
// Metrics are registered on a registry of their own unless
// Options.Registerer names one; never on Prometheus's global registry.
//
//	m, err := metrics.New(metrics.Options{ConstLabels: prometheus.Labels{"node": nodeID}})
//	st, err := storeurl.Open(ctx, url) // or a driver's Open, or a wrapper
//	defer m.ObserveStore(st)() // commits and the store's counts
//	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: wfs,
//		Hooks: actor.MultiHooks(m.Hooks(), actor.SlogHooks{Logger: logger})})
//	http.Handle("/metrics", m.Handler())
package metrics
