package cluster_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/persistence"
)

func Example() {
	cfg := cluster.Loopback() // cluster.LAN() on a real network
	// The first node lists no seeds; the others list its gossip address,
	// e.g. cfg.Seeds = []string{"10.0.0.1:7946"}.
	cfg.SecretKey = []byte("0123456789abcdef0123456789abcdef")
	c, err := cluster.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	// A System takes the Cluster in its Config and calls Join, Owner,
	// Wake, Leave and Close itself:
	//
	//	sys, err := actor.Start(ctx, actor.Config{Store: store, Cluster: c})
	//
	// Here a stand-in host plays the System's part.
	var _ actor.Cluster = c
	ctx := context.Background()
	err = c.Join(ctx, actor.ClusterHost{
		NodeID:  "node-1",
		Wake:    func(ids []string) {},
		Changed: func(dead []string) {},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Alone, the node owns every bucket.
	fmt.Println(c.Owner(persistence.BucketOf("order-42")))
	for _, m := range c.Members() {
		fmt.Println(m.Name, m.State)
	}
	if err := c.Leave(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after Leave: %q\n", c.Owner(persistence.BucketOf("order-42")))
	// Output:
	// node-1
	// node-1 alive
	// after Leave: ""
}
