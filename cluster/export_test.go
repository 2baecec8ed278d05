package cluster

// SetPartitioned cuts c off the network (gossip both ways, wake-ups both
// ways) or heals it. Tests only: a partition is not a user's knob.
func SetPartitioned(c *Cluster, on bool) { c.partitioned.Store(on) }
