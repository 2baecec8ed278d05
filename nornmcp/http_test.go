package nornmcp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nornlabs/norn/internal/testutil"
	"github.com/nornlabs/norn/nornmcp"
)

const token = "s3cret-token-0123456789"

// bearer adds the token to every request, as an MCP client configured with
// it does.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func httpServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := newServer(t, startNode(t))
	h, err := nornmcp.NewHTTPHandler(srv, nornmcp.HTTPConfig{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

func connectHTTP(t *testing.T, url, tok string) (*mcp.ClientSession, error) {
	t.Helper()
	client := &http.Client{Transport: http.DefaultTransport}
	if tok != "" {
		client.Transport = bearer{token: tok, next: http.DefaultTransport}
	}
	t.Cleanup(client.CloseIdleConnections)
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: client, MaxRetries: -1}
	return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(testutil.Ctx(t, 30*time.Second), tr, nil)
}

func TestHTTPNeedsToken(t *testing.T) {
	t.Parallel()
	ts := httpServer(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for name, auth := range map[string]string{
		"none":         "",
		"wrong":        "Bearer " + strings.Repeat("x", len(token)),
		"prefix":       "Bearer " + token[:len(token)-1],
		"not bearer":   "Basic " + token,
		"token alone":  token,
		"longer token": "Bearer " + token + "0",
	} {
		req, err := http.NewRequestWithContext(testutil.Ctx(t, 10*time.Second), http.MethodPost, ts.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, resp.StatusCode)
		}
	}
	// The SDK's client without the token cannot connect either.
	if cs, err := connectHTTP(t, ts.URL, ""); err == nil {
		cs.Close()
		t.Fatal("a client without the token connected")
	}
	if cs, err := connectHTTP(t, ts.URL, "not-the-token-but-long"); err == nil {
		cs.Close()
		t.Fatal("a client with a wrong token connected")
	}
}

func TestHTTPStartResult(t *testing.T) {
	t.Parallel()
	ts := httpServer(t)
	cs, err := connectHTTP(t, ts.URL, token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(testutil.Ctx(t, 10*time.Second), nil)
	if err != nil || len(tools.Tools) != 8 {
		t.Fatalf("list tools over HTTP: %v, %v", tools, err)
	}
	st := call[nornmcp.Started](t, cs, "say_start", map[string]any{"id": "h-1", "input": "over http"})
	if st.ID != "h-1" || st.Existed {
		t.Fatalf("start over HTTP: %+v", st)
	}
	if st = call[nornmcp.Started](t, cs, "say_start", map[string]any{"id": "h-1", "input": "again"}); !st.Existed {
		t.Fatalf("second start over HTTP: %+v, want existed", st)
	}
	r := call[struct {
		Status string `json:"status"`
		Output string `json:"output"`
	}](t, cs, "say_result", map[string]any{"id": "h-1", "wait_seconds": 30})
	if r.Status != "completed" || r.Output != "over http" {
		t.Fatalf("result over HTTP: %+v", r)
	}
	if msg := callErr(t, cs, "say_status", map[string]any{"id": "nobody"}); !strings.Contains(msg, "no instance") {
		t.Fatalf("unknown instance over HTTP: %q", msg)
	}
}

func TestNewHTTPHandlerValidates(t *testing.T) {
	t.Parallel()
	srv := newServer(t, startNode(t))
	for name, cfg := range map[string]nornmcp.HTTPConfig{
		"no token":    {},
		"short token": {Token: "short"},
		"space":       {Token: "a token with spaces"},
		"negative":    {Token: token, MaxRequestBytes: -1},
	} {
		if _, err := nornmcp.NewHTTPHandler(srv, cfg); !errors.Is(err, nornmcp.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := nornmcp.NewHTTPHandler(nil, nornmcp.HTTPConfig{Token: token}); !errors.Is(err, nornmcp.ErrInvalidConfig) {
		t.Errorf("nil server: %v, want ErrInvalidConfig", err)
	}
}
