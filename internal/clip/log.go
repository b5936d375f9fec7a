package clip

import (
	"context"
	"log/slog"
)

// NewLogHandler returns a handler that passes every record to h with every
// string in it — its message, and its attributes' strings, errors and
// fmt.Stringers, inside groups too — passed through redact (when not nil)
// and then Escape. Whatever a request, an item or an upstream put in a
// record, the line h writes holds no control character.
func NewLogHandler(h slog.Handler, redact func(string) string) slog.Handler {
	return &logHandler{h: h, redact: redact}
}

type logHandler struct {
	h      slog.Handler
	redact func(string) string
}

func (l *logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.h.Enabled(ctx, level)
}

func (l *logHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, l.text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(l.attr(a))
		return true
	})
	return l.h.Handle(ctx, out)
}

func (l *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = l.attr(a)
	}
	return &logHandler{h: l.h.WithAttrs(clean), redact: l.redact}
}

func (l *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h: l.h.WithGroup(name), redact: l.redact}
}

func (l *logHandler) text(s string) string {
	if l.redact != nil {
		s = l.redact(s)
	}
	return Escape(s)
}

func (l *logHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s, c := v.String(), l.text(v.String()); c != s {
			return slog.String(a.Key, c)
		}
	case slog.KindGroup:
		group := v.Group()
		clean := make([]slog.Attr, len(group))
		for i, g := range group {
			clean[i] = l.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(clean...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, l.text(x.Error()))
		case interface{ String() string }:
			return slog.String(a.Key, l.text(x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
