package safeurl

import (
	"context"
	"log/slog"
)

// NewLogHandler returns a handler that passes every record to h with the
// URLs in its message and attributes redacted (RedactText): strings,
// errors and fmt.Stringers, inside groups too.
func NewLogHandler(h slog.Handler) slog.Handler { return &logHandler{h: h} }

type logHandler struct{ h slog.Handler }

func (l *logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l *logHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, RedactText(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return l.h.Handle(ctx, out)
}

func (l *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = redactAttr(a)
	}
	return &logHandler{h: l.h.WithAttrs(red)}
}

func (l *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h: l.h.WithGroup(name)}
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s, r := v.String(), RedactText(v.String()); r != s {
			return slog.String(a.Key, r)
		}
	case slog.KindGroup:
		group := v.Group()
		red := make([]slog.Attr, len(group))
		for i, g := range group {
			red[i] = redactAttr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(red...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, RedactText(x.Error()))
		case interface{ String() string }:
			return slog.String(a.Key, RedactText(x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
