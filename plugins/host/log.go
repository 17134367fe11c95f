package host

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// pluginLog is the hclog.Logger go-plugin writes to. go-plugin hands it
// every JSON line a plugin process writes on stderr (sdk.Log's records),
// through a logger Named after the executable; those records keep their
// level and gain the plugin's name. go-plugin's own chatter about starting
// and stopping processes is demoted to debug.
type pluginLog struct {
	l      *slog.Logger
	plugin string // the plugin's name as pipe knows it
	named  bool   // a plugin's own records (not go-plugin's)
	args   []any
}

func newPluginLog(l *slog.Logger, plugin string) hclog.Logger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return &pluginLog{l: l, plugin: plugin}
}

func (p *pluginLog) Log(level hclog.Level, msg string, args ...any) {
	lvl := slog.LevelDebug
	if p.named {
		switch level {
		case hclog.Info:
			lvl = slog.LevelInfo
		case hclog.Warn:
			lvl = slog.LevelWarn
		case hclog.Error:
			lvl = slog.LevelError
		}
	}
	ctx := context.Background()
	attrs := []any{slog.String("plugin", p.plugin)}
	attrs = append(attrs, p.args...)
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && (k == "timestamp" || k == "plugin") {
			continue // go-plugin's copy of the plugin's time, its path: the record has both
		}
		attrs = append(attrs, args[i], args[i+1])
	}
	p.l.Log(ctx, lvl, msg, attrs...)
}

func (p *pluginLog) Trace(msg string, args ...any) { p.Log(hclog.Trace, msg, args...) }
func (p *pluginLog) Debug(msg string, args ...any) { p.Log(hclog.Debug, msg, args...) }
func (p *pluginLog) Info(msg string, args ...any)  { p.Log(hclog.Info, msg, args...) }
func (p *pluginLog) Warn(msg string, args ...any)  { p.Log(hclog.Warn, msg, args...) }
func (p *pluginLog) Error(msg string, args ...any) { p.Log(hclog.Error, msg, args...) }

func (p *pluginLog) IsTrace() bool { return false }
func (p *pluginLog) IsDebug() bool { return p.l.Enabled(context.Background(), slog.LevelDebug) }
func (p *pluginLog) IsInfo() bool  { return p.l.Enabled(context.Background(), slog.LevelInfo) }
func (p *pluginLog) IsWarn() bool  { return p.l.Enabled(context.Background(), slog.LevelWarn) }
func (p *pluginLog) IsError() bool { return p.l.Enabled(context.Background(), slog.LevelError) }

func (p *pluginLog) ImpliedArgs() []any { return p.args }

func (p *pluginLog) With(args ...any) hclog.Logger {
	c := *p
	c.args = append([]any(nil), p.args...)
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == "plugin" {
			continue // go-plugin's path; the plugin's name is already there
		}
		c.args = append(c.args, args[i], args[i+1])
	}
	return &c
}

func (p *pluginLog) Name() string { return p.plugin }

// Named is how go-plugin marks a plugin's own records.
func (p *pluginLog) Named(string) hclog.Logger {
	c := *p
	c.named = true
	return &c
}

func (p *pluginLog) ResetNamed(name string) hclog.Logger { return p.Named(name) }

func (p *pluginLog) SetLevel(hclog.Level) {}

// GetLevel tells go-plugin which records to skip before parsing them:
// warnings always pass, since retries are counted whatever is printed.
func (p *pluginLog) GetLevel() hclog.Level {
	ctx := context.Background()
	switch {
	case p.l.Enabled(ctx, slog.LevelDebug):
		return hclog.Debug
	case p.l.Enabled(ctx, slog.LevelInfo):
		return hclog.Info
	}
	return hclog.Warn
}

func (p *pluginLog) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(p.l.Handler(), slog.LevelDebug)
}

func (p *pluginLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return p.StandardLogger(nil).Writer()
}

// lowestLevel names the lowest level a plugin process writes: the lowest
// l prints, but never above warnings (retries, which pipe counts).
func lowestLevel(l *slog.Logger) string {
	ctx := context.Background()
	for _, lvl := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		if l.Enabled(ctx, lvl) {
			return lvl.String()
		}
	}
	return slog.LevelWarn.String()
}
