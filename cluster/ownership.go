package cluster

import (
	"slices"

	"github.com/nornlabs/norn/persistence"
)

// table is one ownership snapshot: who owns each bucket, and where to send
// wake-ups. It is never changed once published, so Owner and Wake read it
// without a lock.
type table struct {
	owners []string          // bucket -> node, len persistence.NumBuckets
	remote map[string]string // node -> remote address, for the owners' peers
}

// owners assigns every bucket to one of nodes by rendezvous hashing
// (highest random weight): each bucket goes to the node whose hash with
// it is highest. A node that comes or goes moves only the buckets it wins
// or held, about 1/n of them, and every node computes the same table from
// the same member list, with no coordination. With no nodes every owner
// is "".
func owners(nodes []string) []string {
	out := make([]string, persistence.NumBuckets)
	if len(nodes) == 0 {
		return out
	}
	nodes = slices.Clone(nodes)
	slices.Sort(nodes) // ties go to the smaller name, whatever the input order
	seeds := make([]uint64, len(nodes))
	for i, n := range nodes {
		seeds[i] = fnv64a(n)
	}
	for b := range out {
		bh := mix64(uint64(b) + 0x9e3779b97f4a7c15)
		best, bestW := 0, uint64(0)
		for i, s := range seeds {
			if w := mix64(s ^ bh); i == 0 || w > bestW {
				best, bestW = i, w
			}
		}
		out[b] = nodes[best]
	}
	return out
}

func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is SplitMix64's finalizer: FNV of similar names ("node-1",
// "node-2") differs in few bits, and the weights must look independent.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
