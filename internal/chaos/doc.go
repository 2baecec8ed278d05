// Command chaos is Norn's kill -9 chaos run: worker processes run nodes on
// one store while the command kills a random one with SIGKILL, again and
// again, and starts it anew; afterwards it checks from the store alone that
// nothing was lost, recorded twice or left behind.
//
//	go run ./internal/chaos                                   # 10,000 workflows, 200 kills, temp SQLite file
//	go run ./internal/chaos -workflows 2000 -kills 50 -store sqlite,postgres://norn@localhost/chaos
//	go run ./internal/chaos -mode queue -workers 3 -store postgres://norn@localhost/chaos -seed 42 -v
//	go run ./internal/chaos -mode tx -workflows 5000 -kills 200 -store sqlite,postgres://norn@localhost/chaos
//
// Workers are the command itself, re-executed (no build step). Three
// workloads; chain and queue run together by default (-mode both), tx on
// its own (-mode tx) or with both others (-mode all):
//
//   - chain: -workflows instances of a workflow of three activities; every
//     activity execution appends "<idempotency key> <attempt> <payload>" to a
//     side-effect log shared by all workers. The spawns go through the
//     workers and count once a worker has acknowledged them (an
//     unacknowledged one is asked again, by ID, from a live worker).
//   - queue: -consumers consumer instances on one competing channel; each
//     receives on that channel in a loop (the receive a node's fetcher
//     serves: no other filter, no prefetch) and records every message with
//     an activity that logs the message ID, two messages at a time (so that
//     kills also land while a take waits uncommitted). The command publishes
//     -workflows messages with System.Publish from a node of its own that
//     runs no workflows; once the channel has drained, it publishes one
//     stop per consumer on it, and each consumer ends on the first stop it
//     receives (a stop received twice counts as recorded twice).
//   - tx: -workflows instances of a workflow with one transactional
//     activity (actor.TxActivity) that increments a row of a user table,
//     chaos_counter, in the store's own database (16 rows per run, so that
//     workflows contend for them), then logs its call. The check reads the
//     rows: each must equal the number of workflows whose count was
//     recorded, exactly (the "counted" column sums them), however often the
//     activity ran before a kill.
//
// Kills are spread over the run by progress (the k-th comes once the
// side-effect log has reached a random share of the expected executions);
// half of the restarts keep the worker's node ID, the others wait for the
// killed worker's leases to expire (-lease, default 2s). When every
// workflow has ended, or at -timeout, the workers are stopped cleanly and
// the command prints one row per store and workload:
//
//	completed        chain workflows completed with the right result (each activity recorded once),
//	                 messages received once and recorded
//	recorded twice   an activity ID with two results in one history, a message received twice,
//	                 a counter increment beyond the recorded counts (tx)
//	dup executions   side-effect log lines beyond the first per key (allowed: at least once)
//	lost             acknowledged but missing, consumed and never recorded, or a recorded
//	                 count missing from its counter (tx)
//	stuck            not ended at the deadline
//	failed           ended failed or cancelled, or with a wrong result
//	never ran        an activity result recorded with no execution logged
//	counted          the sum of the tx counters (tx only)
//	crashes          workers that exited on their own or did not stop cleanly
//
// It exits 1 if any of lost, recorded twice, stuck, failed, never ran or
// crashes is not zero, keeping the side-effect log and the workers' stderr
// (worker-N.log) in -dir. `go test ./internal/chaos/...` runs a short
// version on SQLite and, when a throw-away server can be started, on
// PostgreSQL.
package main
