package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nornlabs/norn/viewer"
)

// ViewerTokenEnv is the environment variable the viewer's token can come
// from, so that it does not show in the process list.
const ViewerTokenEnv = "NORN_VIEWER_TOKEN"

func viewerCommand() *command {
	return &command{
		name: "viewer", synopsis: "[--addr HOST:PORT] [--token T] [--actions]", summary: "serve the web viewer over the store",
		help: `Serves the web viewer (package viewer) until interrupted: the instance
list with filters, each instance's history as a timeline, its mailbox,
subscriptions, timers and a diagram. It is read-only unless --actions is
given, which enables cancel and send; without a token it refuses --actions
on an address other than loopback. With --token (or $` + ViewerTokenEnv + `)
every request needs the token: open the printed address once with
?token=... in a browser, or send "Authorization: Bearer ...". The address it
listens on is printed on stdout; --addr 127.0.0.1:0 picks a free port.`,
		setup: func(e *env, fs *flag.FlagSet) func([]string) error {
			addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
			token := fs.String("token", "", "require this token on every request (default $"+ViewerTokenEnv+")")
			actions := fs.Bool("actions", false, "enable the cancel and send actions (default: read-only)")
			base := fs.String("base-path", "", "path prefix to serve under, e.g. /norn")
			return func(args []string) error {
				if len(args) != 0 {
					return usagef("viewer", "viewer takes no arguments, only flags")
				}
				if *token == "" {
					*token = e.getenv(ViewerTokenEnv)
				}
				if *actions && *token == "" && !loopback(*addr) {
					return usagef("viewer", "--actions without a token only on a loopback address (127.0.0.1, ::1, localhost): "+
						"anyone who reaches %s could cancel instances; give --token (or $%s), or --addr 127.0.0.1:PORT", *addr, ViewerTokenEnv)
				}
				bp := strings.TrimRight(*base, "/")
				if bp != "" && !strings.HasPrefix(bp, "/") {
					return usagef("viewer", "--base-path must start with /")
				}
				return e.withClient("viewer", func(c *client) error {
					h, err := viewer.New(c.sys, viewer.Options{AllowActions: *actions, Token: *token, BasePath: bp, Logger: e.log,
						Workflows: e.opts.Workflows})
					if err != nil {
						return usagef("viewer", "%v", err)
					}
					ln, err := net.Listen("tcp", *addr)
					if err != nil {
						return fmt.Errorf("listen on %s: %w", *addr, err)
					}
					mux := http.NewServeMux()
					mux.Handle(bp+"/", h)
					srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
					served := make(chan error, 1)
					go func() { served <- srv.Serve(ln) }()
					mode := "read-only"
					if *actions {
						mode = "actions enabled"
					}
					fmt.Fprintf(e.stdout, "viewer on http://%s%s/ (%s)\n", ln.Addr(), bp, mode)
					select {
					case err := <-served:
						return fmt.Errorf("viewer server: %w", err)
					case <-e.ctx.Done():
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := srv.Shutdown(ctx); err != nil {
						return fmt.Errorf("stop the viewer: %w", err)
					}
					if err := <-served; !errors.Is(err, http.ErrServerClosed) {
						return fmt.Errorf("viewer server: %w", err)
					}
					return nil
				})
			}
		},
	}
}

// loopback reports whether addr (HOST:PORT) listens on loopback only. An
// empty host listens on every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
