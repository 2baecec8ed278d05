package nornmcp

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MinTokenLen is the shortest bearer token NewHTTPHandler accepts.
const MinTokenLen = 16

// HTTPConfig configures NewHTTPHandler.
type HTTPConfig struct {
	// Token is the bearer token every request must carry
	// (Authorization: Bearer <Token>); a request without it is answered
	// 401. At least MinTokenLen bytes, no spaces. Required.
	Token string
	// MaxRequestBytes bounds a request body (default the SDK's, 4 MiB).
	MaxRequestBytes int64
}

// NewHTTPHandler serves s over MCP's streamable HTTP transport, behind a
// bearer token. The handler is stateless: every request is answered on
// its own, with nothing kept per client session, so any node of a cluster
// behind a load balancer can answer any call (the instances live in the
// store, not in the connection).
func NewHTTPHandler(s *Server, cfg HTTPConfig) (http.Handler, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil Server", ErrInvalidConfig)
	}
	if len(cfg.Token) < MinTokenLen {
		return nil, fmt.Errorf("%w: Token is %d bytes, want at least %d", ErrInvalidConfig, len(cfg.Token), MinTokenLen)
	}
	if strings.IndexFunc(cfg.Token, unicode.IsSpace) >= 0 {
		return nil, fmt.Errorf("%w: Token holds white space", ErrInvalidConfig)
	}
	if cfg.MaxRequestBytes < 0 {
		return nil, fmt.Errorf("%w: MaxRequestBytes %d is negative", ErrInvalidConfig, cfg.MaxRequestBytes)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: cfg.MaxRequestBytes})
	// Hashing both sides first makes the comparison constant-time in the
	// token's length too.
	want := sha256.Sum256([]byte(cfg.Token))
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			return nil, fmt.Errorf("%w: wrong bearer token", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: "bearer"}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h), nil
}
