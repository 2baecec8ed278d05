package cluster

import (
	"context"
	"log"
	"log/slog"
	"strings"
)

// memberlistLog is a *log.Logger for memberlist that writes into l at
// debug level: memberlist reports every lost probe and refused join as a
// warning or error, which is routine in a cluster that loses nodes; the
// cluster logs what matters (dead nodes, ownership) itself.
func memberlistLog(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l: l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	if !w.l.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	msg := strings.TrimSpace(string(p))
	// memberlist writes "[LEVEL] memberlist: text"; keep its level apart.
	level := ""
	if strings.HasPrefix(msg, "[") {
		if i := strings.IndexByte(msg, ']'); i > 0 {
			level, msg = msg[1:i], strings.TrimSpace(msg[i+1:])
		}
	}
	msg = strings.TrimPrefix(msg, "memberlist: ")
	if level != "" {
		w.l.Debug(msg, "memberlist_level", level)
	} else {
		w.l.Debug(msg)
	}
	return len(p), nil
}
