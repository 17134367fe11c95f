package plugin

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/pipebackup/pipe/plugins/internal/wire"
)

// processLog is the logger of a plugin process: JSON lines on stderr in
// the fields go-plugin parses (@level, @message, @timestamp), so pipe
// receives each record with its level and attributes. The level is the
// one pipe runs with (wire.LogLevelEnv), info when unset.
func processLog(w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv(wire.LogLevelEnv))); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: hclogFields}))
}

// hclogFields renames slog's built-in fields to hclog's JSON names.
func hclogFields(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.TimeKey:
		return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
	case slog.LevelKey:
		l := a.Value.Any().(slog.Level)
		name := "info"
		switch {
		case l < slog.LevelInfo:
			name = "debug"
		case l >= slog.LevelError:
			name = "error"
		case l >= slog.LevelWarn:
			name = "warn"
		}
		return slog.String("@level", name)
	case slog.MessageKey:
		return slog.String("@message", strings.TrimSpace(a.Value.String()))
	}
	return a
}
