package viewer_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/nornlabs/norn/actor"
	"github.com/nornlabs/norn/persistence/sqlite"
	"github.com/nornlabs/norn/viewer"
)

// Serve the viewer under /norn/ with a token, from a client System that
// reads the store a program's nodes write.
func ExampleNew() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "norn-viewer-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "norn.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	sys, err := actor.Start(ctx, actor.Config{Store: st, Client: true})
	if err != nil {
		panic(err)
	}
	defer sys.Stop(ctx)

	h, err := viewer.New(sys, viewer.Options{Token: "s3cret", BasePath: "/norn"})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/norn/", h)
	srv := httptest.NewServer(mux) // a program would use http.ListenAndServe
	defer srv.Close()

	for _, auth := range []string{"", "Bearer s3cret"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/norn/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.Contains(string(body), "No instances"))
	}
	// Output:
	// 401 false
	// 200 true
}
