package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nornlabs/norn/cli"
)

// Run is the command without a process: here it creates a store and lists
// its (no) instances as JSON.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "norn-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store := filepath.Join(dir, "norn.db")
	ctx := context.Background()
	cli.Run(ctx, []string{"migrate", "--store", store}, cli.Options{Stdout: io.Discard})
	code := cli.Run(ctx, []string{"ls", "--store", store, "--json"}, cli.Options{})
	fmt.Println("exit code", code)
	// Output:
	// {
	//   "instances": []
	// }
	// exit code 0
}
