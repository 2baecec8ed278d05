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

// debugOnly passes a library's records on at debug level, keeping their
// own level as an attribute: protoactor reports every lost connection to a
// node that died or left as an error, which is routine in a cluster; the
// cluster logs what matters (dead nodes, ownership) itself.
type debugOnly struct{ h slog.Handler }

func (d debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugOnly) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
	out.AddAttrs(slog.String("lib_level", r.Level.String()))
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(a)
		return true
	})
	return d.h.Handle(ctx, out)
}

func (d debugOnly) WithAttrs(as []slog.Attr) slog.Handler { return debugOnly{d.h.WithAttrs(as)} }
func (d debugOnly) WithGroup(name string) slog.Handler    { return debugOnly{d.h.WithGroup(name)} }
