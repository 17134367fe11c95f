package host

import (
	"strings"
	"sync"
)

// hiddenEnv is what a plugin process is not given of pipe's environment:
// pipe's own variables (PIPE_*, which hold --var values such as
// PIPE_VAR_password, and the plugin protocol's settings, which the host
// sets anew), and the variables the pipeline file reads with env() (pipe
// read them; endpoints get their values through attributes only).
type hiddenEnv struct {
	mu    sync.Mutex
	names map[string]bool
}

func (h *hiddenEnv) add(name string) {
	h.mu.Lock()
	h.names[name] = true
	h.mu.Unlock()
}

// filter returns env (KEY=VALUE entries) without what is hidden.
func (h *hiddenEnv) filter(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PIPE_") || h.hides(name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (h *hiddenEnv) hides(name string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.names[name]
}
