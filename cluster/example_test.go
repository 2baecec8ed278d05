package cluster_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/cluster"
	"github.com/nornlabs/norn/persistence"
	"github.com/nornlabs/norn/persistence/sqlite"
)

func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "norn-cluster-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// Nodes on one host may share an SQLite file; on several hosts they
	// share a PostgreSQL database.
	store, err := sqlite.Open(ctx, filepath.Join(dir, "norn.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	cfg := cluster.Loopback() // cluster.LAN() on a real network
	// The first node lists no seeds; the others list its gossip address,
	// e.g. cfg.Seeds = []string{"10.0.0.1:7946"}.
	cfg.SecretKey = []byte("0123456789abcdef0123456789abcdef")
	cl, err := cluster.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	greet := actor.Workflow("greet", func(ctx *actor.Context, name string) (string, error) {
		return "hello " + name, nil
	})
	// The System joins the cluster, hosts the instances this node owns,
	// and leaves it on Stop.
	sys, err := actor.Start(ctx, actor.Config{Store: store, NodeID: "node-1", Cluster: cl, Workflows: actor.Register(greet)})
	if err != nil {
		log.Fatal(err)
	}
	pid, err := actor.Spawn(ctx, sys, greet, "cluster", actor.WithID("greet-1"))
	if err != nil {
		log.Fatal(err)
	}
	out, err := actor.Await(ctx, sys, greet, pid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
	// Alone, the node owns every bucket.
	fmt.Println("owner:", cl.Owner(persistence.BucketOf(string(pid))))
	for _, m := range cl.Members() {
		fmt.Println(m.Name, m.State)
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sys.Stop(stop); err != nil {
		log.Fatal(err)
	}
	// Output:
	// hello cluster
	// owner: node-1
	// node-1 alive
}
