package plan

import (
	"fmt"
	"io"
	"strings"

	"github.com/pipebackup/pipe/pipefile"
)

// NotifyJSON is a notify block in the plan: where to, never the URL.
type NotifyJSON struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"`
	Command []string `json:"command,omitempty"`
	On      []string `json:"on,omitempty"`
	Timeout float64  `json:"timeout_seconds"`
}

// HookJSON is a pipeline's hook in the plan.
type HookJSON struct {
	When    string   `json:"when"`
	Command []string `json:"command"`
	Timeout float64  `json:"timeout_seconds"`
}

func notifyJSON(n *pipefile.Notify) NotifyJSON {
	t := n.Target
	return NotifyJSON{Name: n.Name, Kind: n.Kind, Command: t.Command, On: t.On, Timeout: t.Timeout.Seconds()}
}

func hooksJSON(p *pipefile.Pipeline) []HookJSON {
	var out []HookJSON
	for _, h := range p.Hooks {
		out = append(out, HookJSON{When: h.When, Command: h.Command, Timeout: h.Timeout.Seconds()})
	}
	return out
}

// printNotify writes a notify block's line: its URL is a secret.
func printNotify(w io.Writer, n *pipefile.Notify) {
	t := n.Target
	where := n.Kind + " (sensitive)"
	if n.Kind == "command" {
		where = "command " + quoted(t.Command)
	}
	on := "every event"
	if len(t.On) > 0 {
		on = strings.Join(t.On, ", ")
	}
	fmt.Fprintf(w, "notify %q: %s, on %s, timeout %s\n", n.Name, where, on, t.Timeout)
}

// printHooks writes a pipeline's hooks.
func printHooks(w io.Writer, p *pipefile.Pipeline) {
	for _, h := range p.Hooks {
		fmt.Fprintf(w, "  hook %-7s %s, timeout %s\n", h.When, quoted(h.Command), h.Timeout)
	}
}

func quoted(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = fmt.Sprintf("%q", a)
	}
	return "[" + strings.Join(q, " ") + "]"
}
