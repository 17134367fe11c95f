package sdk

import (
	"log/slog"
	"sync/atomic"
)

var logger atomic.Pointer[slog.Logger]

func init() { logger.Store(slog.New(slog.DiscardHandler)) }

// Log returns the logger an endpoint writes to. In a plugin process pipe
// receives its records, adds the plugin's name, drops those below its
// --log-level and prints the rest with its own, in text or JSON; values of
// attributes a schema marks secret are redacted there. Never log a
// secret's value yourself, nor a whole command line or connection string.
//
// Log retries at Warn with the attribute "event" = "retry" (and "endpoint"
// = your endpoint type): pipe counts them in its pipe_retries_total metric
// whatever level it prints.
func Log() *slog.Logger { return logger.Load() }

// SetLog replaces the logger Log returns. The plugin server and pipe's
// in-process endpoints call it; endpoints don't.
func SetLog(l *slog.Logger) { logger.Store(l) }
