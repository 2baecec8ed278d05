package viewer

import (
	"net/http"
	"time"
)

// SetClock makes the handler h (from New) read the time from now, so that
// tests move it past a form token's expiry. Call it before serving.
func SetClock(h http.Handler, now func() time.Time) { h.(*handler).now = now }
