// Package cluster spreads a Norn actor System over several processes: it
// implements actor.Cluster with gossip membership (hashicorp/memberlist),
// ownership of buckets by rendezvous hashing, and wake-ups carried by
// protoactor remote (gRPC).
//
// Give every node a Config (LAN for a real network, Loopback for nodes on
// one host), the gossip address of one or more running nodes as Seeds, and
// the Cluster from New to the System (actor.Config.Cluster); the System
// joins, asks Owner which node hosts an instance, Wakes other nodes, and
// Leaves and Closes on Stop. Each node needs its gossip port (UDP and TCP)
// and its remote port (TCP) open to the others. All nodes share one store:
// a PostgreSQL database, or an SQLite file for processes on one host.
// A member with Config.Client set owns nothing: API front ends and tools
// spawn, send and await through it while the other nodes run the work.
//
// Each node runs one Cluster per process (protoactor's remote endpoint
// keeps process-wide state).
//
// Ownership: each bucket (persistence.BucketOf of an instance ID) belongs
// to the live member whose hash with it is highest. Every node computes
// the same table from the same member list; a node that joins or goes
// takes or leaves about 1/n of the buckets, and the others keep theirs.
// Ownership only says who should try: the store's leases decide.
//
// Failures: memberlist probes members and declares a silent one dead after
// a suspicion time; the other nodes then take its buckets and, through
// ClusterHost.Changed, may take over its leases. A node that cannot tell
// others' failure from its own isolation (it hears directly from fewer
// than half of the nodes it has known recently) reports no one dead and
// lets the leases expire; so may a healthy node of a cluster of many
// dozens of nodes, whose probes reach each member too seldom (see Join).
// A node that Leaves is never reported dead. Every
// RejoinInterval a node joins again the seeds and the dead members it
// remembers, so that a healed partition merges.
//
// Security: gossip is encrypted with SecretKey (16, 24 or 32 bytes, the
// same on every node). The remote endpoint is not; for TLS give every node
// RemoteServerTLS (its certificate, ClientCAs of the cluster's CA and
// ClientAuth tls.RequireAndVerifyClientCert, so that only nodes with a
// certificate of that CA can wake it) and RemoteClientTLS (RootCAs of the
// CA and Certificates with its own certificate). Server certificates must
// name the node's remote advertise address (an IP SAN for an IP), since
// clients check the host they dial; one certificate with both server and
// client usage per node serves both sides.
//
// The wire messages are defined in internal/wire/wire.proto; regenerate
// their Go code with
//
//	go generate ./cluster/...
//
// which needs only the Go module proxy.
package cluster
