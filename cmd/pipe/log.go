package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// logFlags choose how pipe logs: records go to stderr, as lines for people
// (the default) or JSON for a log pipeline.
type logFlags struct {
	format  string
	level   string
	onRetry *atomic.Pointer[func(endpoint string)]
}

func (f *logFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.format, "log-format", "text", "log records on stderr as text or json (one JSON object a line; replaces the run summary)")
	cmd.PersistentFlags().StringVar(&f.level, "log-level", "", "lowest level logged: debug, info, warn, error (default: warn for text, info for json)")
}

// newLogger builds the logger for f, with r redacting secrets from every
// record.
func (f *logFlags) newLogger(w io.Writer, r *redactor) (*slog.Logger, error) {
	var level slog.Level
	switch f.level {
	case "":
		level = slog.LevelWarn
		if f.format == "json" {
			level = slog.LevelInfo
		}
	default:
		if err := level.UnmarshalText([]byte(f.level)); err != nil {
			return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", f.level)
		}
	}
	var h slog.Handler
	switch f.format {
	case "text":
		h = &textHandler{w: w, mu: new(sync.Mutex), level: level}
	case "json":
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", f.format)
	}
	r.next = h
	return slog.New(&retryTap{next: r, hook: f.retries()}), nil
}

// retries is where the run says what to do when a plugin retries.
func (f *logFlags) retries() *atomic.Pointer[func(endpoint string)] {
	if f.onRetry == nil {
		f.onRetry = new(atomic.Pointer[func(endpoint string)])
	}
	return f.onRetry
}

// onRetryDo makes fn see every record with event = "retry" (sdk.Log's
// convention), whatever the level printed, with the record's endpoint
// attribute, else the plugin's name.
func (f *logFlags) onRetryDo(fn func(endpoint string)) { f.retries().Store(&fn) }

// labelValue is what a retry's endpoint may be to become a metric label:
// an endpoint type or a plugin's name.
var labelValue = regexp.MustCompile(`^[A-Za-z0-9_.#-]{1,40}$`)

// retryTap sees every warning on its way to next, to count retries, and
// passes on what next prints.
type retryTap struct {
	next             slog.Handler
	hook             *atomic.Pointer[func(endpoint string)]
	plugin, endpoint string // from WithAttrs
}

func (t *retryTap) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || t.next.Enabled(ctx, l)
}

func (t *retryTap) Handle(ctx context.Context, r slog.Record) error {
	if fn := t.hook.Load(); fn != nil && r.Level >= slog.LevelWarn {
		retry, plugin, endpoint := false, t.plugin, t.endpoint
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "event":
				retry = retry || a.Value.String() == "retry"
			case "plugin":
				plugin = a.Value.String()
			case "endpoint":
				endpoint = a.Value.String()
			}
			return true
		})
		// A label takes a short name, never a URL or an object's key.
		if !labelValue.MatchString(endpoint) {
			endpoint = plugin
		}
		if !labelValue.MatchString(endpoint) {
			endpoint = "unknown"
		}
		if retry {
			(*fn)(endpoint)
		}
	}
	if !t.next.Enabled(ctx, r.Level) {
		return nil
	}
	return t.next.Handle(ctx, r)
}

func (t *retryTap) WithAttrs(as []slog.Attr) slog.Handler {
	c := *t
	for _, a := range as {
		switch a.Key {
		case "plugin":
			c.plugin = a.Value.String()
		case "endpoint":
			c.endpoint = a.Value.String()
		}
	}
	c.next = t.next.WithAttrs(as)
	return &c
}

func (t *retryTap) WithGroup(name string) slog.Handler {
	c := *t
	c.next = t.next.WithGroup(name)
	return &c
}

// textHandler writes a record as a line for people: "Warning: message
// key=value …", with the plugin that logged it, if any, up front.
type textHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	level slog.Level
	attrs []slog.Attr
	group string
}

func (h *textHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("Error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("Warning: ")
	case r.Level < slog.LevelInfo:
		b.WriteString("debug: ")
	}
	var rest []slog.Attr
	plugin := ""
	collect := func(a slog.Attr) bool {
		if a.Key == "plugin" && h.group == "" {
			plugin = a.Value.String()
		} else {
			rest = append(rest, a)
		}
		return true
	}
	for _, a := range h.attrs {
		collect(a)
	}
	r.Attrs(collect)
	if plugin != "" {
		b.WriteString("plugin " + plugin + ": ")
	}
	b.WriteString(r.Message)
	for _, a := range rest {
		writeAttr(&b, h.group, a)
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func writeAttr(b *strings.Builder, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	key := a.Key
	if prefix != "" {
		key = prefix + "." + key
	}
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			writeAttr(b, key, g)
		}
		return
	}
	s := v.String()
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		s = strconv.Quote(s)
	}
	b.WriteString(" " + key + "=" + s)
}

func (h *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	for _, a := range as {
		if h.group != "" {
			a.Key = h.group + "." + a.Key
		}
		c.attrs = append(slices.Clip(c.attrs), a)
	}
	return &c
}

func (h *textHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

// redactor replaces secrets in every record before the next handler sees
// it: the values of the attributes the pipeline file's schemas mark secret
// (wherever they appear: a message, an error, a plugin's record), and any
// attribute named like one. Its children (WithAttrs, WithGroup) share its
// secrets.
type redactor struct {
	next    slog.Handler
	secrets *atomic.Pointer[secretSet]
}

type secretSet struct {
	values []string        // longest first
	keys   map[string]bool // attribute names marked secret
}

func newRedactor() *redactor { return &redactor{secrets: new(atomic.Pointer[secretSet])} }

// learn makes r redact what p's file holds secret.
func (r *redactor) learn(p *plan.Plan) {
	s := &secretSet{values: p.File.Secrets(), keys: map[string]bool{}}
	for _, pp := range p.Pipelines {
		for _, e := range append([]*pipefile.Endpoint{pp.Source}, pp.Sinks...) {
			for _, a := range e.Schema.Attributes {
				if a.Secret {
					s.keys[a.Name] = true
				}
			}
		}
	}
	for _, k := range stagekind.All {
		for _, a := range k.Attributes {
			if a.Secret {
				s.keys[a.Name] = true
			}
		}
	}
	slices.SortFunc(s.values, func(a, b string) int { return len(b) - len(a) })
	r.secrets.Store(s)
}

func (r *redactor) scrub(s string) string {
	if set := r.secrets.Load(); set != nil {
		return scrub(s, set.values)
	}
	return s
}

func (r *redactor) attr(a slog.Attr) slog.Attr {
	if set := r.secrets.Load(); set != nil && set.keys[a.Key] {
		return slog.String(a.Key, sdk.Redacted)
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindAny:
		if list, ok := v.Any().([]string); ok {
			out := make([]string, len(list))
			for i, x := range list {
				out[i] = r.scrub(x)
			}
			return slog.Any(a.Key, out)
		}
		return slog.String(a.Key, r.scrub(v.String()))
	case slog.KindString:
		return slog.String(a.Key, r.scrub(v.String()))
	case slog.KindGroup:
		g := v.Group()
		out := make([]any, len(g))
		for i, x := range g {
			out[i] = r.attr(x)
		}
		return slog.Group(a.Key, out...)
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (r *redactor) Enabled(ctx context.Context, l slog.Level) bool { return r.next.Enabled(ctx, l) }

func (r *redactor) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, r.scrub(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.next.Handle(ctx, out)
}

func (r *redactor) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = r.attr(a)
	}
	return &redactor{next: r.next.WithAttrs(red), secrets: r.secrets}
}

func (r *redactor) WithGroup(name string) slog.Handler {
	return &redactor{next: r.next.WithGroup(name), secrets: r.secrets}
}
