package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/metrics"
	"github.com/nornlabs/norn/persistence/storeurl"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "norn-metrics-example-")
	defer os.RemoveAll(dir)

	m, err := metrics.New(metrics.Options{})
	if err != nil {
		panic(err)
	}
	st, err := storeurl.Open(ctx, "sqlite://"+filepath.Join(dir, "norn.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	defer m.ObserveStore(st)()

	hello := actor.Workflow("hello", func(ctx *actor.Context, name string) (string, error) { return "hello " + name, nil })
	sys, err := actor.Start(ctx, actor.Config{Store: st, Workflows: actor.Register(hello), Hooks: m.Hooks()})
	if err != nil {
		panic(err)
	}
	pid, _ := actor.Spawn(ctx, sys, hello, "ann")
	if _, err := actor.Await(ctx, sys, hello, pid); err != nil {
		panic(err)
	}
	_ = sys.Stop(ctx)

	// In a program: http.Handle("/metrics", m.Handler()).
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	printSeries(resp.Body, "norn_instances_started_total", "norn_instances_ended_total", "norn_live_activations{")
	// Output:
	// norn_instances_ended_total{status="completed",workflow="hello"} 1
	// norn_instances_started_total{workflow="hello"} 1
	// norn_live_activations{workflow="hello"} 0
}

// printSeries prints the sample lines that start with one of prefixes.
func printSeries(r io.Reader, prefixes ...string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		for _, p := range prefixes {
			if strings.HasPrefix(sc.Text(), p) {
				fmt.Println(sc.Text())
			}
		}
	}
}
