package pipefile

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/pipebackup/pipe/notify"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Notify is a notify block: a target told of the file's runs.
type Notify struct {
	Name  string
	Range hcl.Range
	// Kind is "webhook", "healthchecks" or "command".
	Kind   string
	Target notify.Target
}

// Hook is a hook block of a pipeline: a command run before the run, after
// it succeeded, or after it failed.
type Hook struct {
	// When is "before", "after" or "failure".
	When    string
	Range   hcl.Range
	Command []string
	Timeout time.Duration
}

// HookKinds are the hook blocks a pipeline may have, in the order a run
// may run them.
var HookKinds = []string{"before", "after", "failure"}

var notifyAttrs = []sdk.Attribute{
	{Name: "webhook", Type: sdk.String, Secret: true, Description: "A URL each event is POSTed to, as JSON: the event, a line for people (text) and the run's summary. A secret: never printed."},
	{Name: "headers", Type: sdk.StringMap, Secret: true, Description: "HTTP headers of the webhook's requests (an Authorization token). Secrets: never printed."},
	{Name: "healthchecks", Type: sdk.String, Secret: true, Description: "A healthchecks.io-style ping URL: URL/start when a run starts, URL when it succeeds, URL/fail on every failure event; each with the event as JSON. A secret: never printed."},
	{Name: "command", Type: sdk.StringList, Description: "A program and its arguments, run for each event with the event as JSON on its standard input, in its own process group, with the environment plugins get."},
	{Name: "on", Type: sdk.StringList, Description: "The events this target gets (default: every event): " + strings.Join(notify.Events, ", ") + "."},
	{Name: "timeout", Type: sdk.Duration, Default: 2 * time.Second, Description: "The longest one event's delivery takes, retries included; a target that takes longer is given up on, and the run's result never changes."},
}

var hookAttrs = []sdk.Attribute{
	{Name: "command", Type: sdk.StringList, Required: true, Description: "A program and its arguments. It runs in its own process group, ended with the run, with the environment plugins get, PIPE_HOOK, PIPE_PIPELINE and PIPE_RUN_ID, and the run's event as JSON on its standard input; what it prints goes to the log."},
	{Name: "timeout", Type: sdk.Duration, Default: 10 * time.Minute, Description: "The longest it may run; it is then killed, with everything it started, and counts as failed."},
}

// loadNotify decodes a notify block into f.Notifies.
func (f *File) loadNotify(b *hcl.Block, vars map[string]cty.Value, funcs map[string]functionT, o *Options, src []byte) hcl.Diagnostics {
	name := b.Labels[0]
	if d := blockName("notify", b, func(name string) *hcl.Range {
		for _, n := range f.Notifies {
			if n.Name == name {
				return &n.Range
			}
		}
		return nil
	}); d != nil {
		return d
	}
	blk, diags := f.decodeBlock(b, "notify", notifyAttrs, "", evalContext(vars, "", o.RunID, funcs), src)
	n := &Notify{Name: name, Range: b.DefRange, Target: notify.Target{Name: name,
		Webhook: blk.String("webhook"), Healthchecks: blk.String("healthchecks"), Command: blk.Strings("command"),
		On: blk.Strings("on")}}
	n.Target.Headers, _ = blk.Values["headers"].(map[string]string)
	n.Target.Timeout, _ = blk.Values["timeout"].(time.Duration)
	diags = append(diags, checkNotify(blk, n)...)
	f.Notifies = append(f.Notifies, n)
	return diags
}

// checkNotify checks that a notify block says where to, once, and names
// known events.
func checkNotify(blk *Block, n *Notify) hcl.Diagnostics {
	var diags hcl.Diagnostics
	var set []string
	for _, a := range []string{"webhook", "healthchecks", "command"} {
		if blk.Has(a) {
			set = append(set, a)
		}
	}
	if len(set) > 0 {
		n.Kind = set[0]
	}
	switch {
	case len(set) == 0:
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Notify where?",
			Detail: fmt.Sprintf("notify %q needs one of webhook (a URL pipe POSTs JSON to), healthchecks (a ping URL) or command (a program).", n.Name), Subject: n.Range.Ptr()})
	case len(set) > 1:
		diags = append(diags, hclvalue.Diag(blk.attrs[set[1]], "One target per notify block",
			fmt.Sprintf("notify %q sets both %s and %s: write a notify block for each.", n.Name, set[0], set[1])))
	}
	for _, a := range []string{"webhook", "healthchecks"} {
		if v := blk.String(a); v != "" {
			if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				// The value is a secret: the message does not repeat it.
				diags = append(diags, hclvalue.Diag(blk.attrs[a], "Not an http(s) URL", a+" must be an http:// or https:// URL with a host."))
			}
		}
	}
	if blk.Has("headers") && !blk.Has("webhook") {
		diags = append(diags, hclvalue.Diag(blk.attrs["headers"], "Headers without a webhook", "headers are sent with webhook requests only."))
	}
	for _, e := range n.Target.On {
		if !slices.Contains(notify.Events, e) {
			hint := ""
			if s := suggest(e, notify.Events); s != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", s)
			}
			diags = append(diags, hclvalue.Diag(blk.attrs["on"], "Unknown event",
				fmt.Sprintf("%q is not an event%s; the events are %s.", e, hint, strings.Join(notify.Events, ", "))))
		}
	}
	if blk.Sensitive["command"] {
		diags = append(diags, commandSecret(blk))
	}
	if blk.Has("timeout") && n.Target.Timeout <= 0 {
		diags = append(diags, hclvalue.Diag(blk.attrs["timeout"], "Timeout too short", "A notify timeout is longer than zero (default 2s)."))
	}
	return diags
}

// loadHook decodes a hook block of pipeline p.
func (f *File) loadHook(p *Pipeline, b *hcl.Block, ectx *hcl.EvalContext, src []byte) hcl.Diagnostics {
	when := b.Labels[0]
	if !slices.Contains(HookKinds, when) {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unknown hook",
			Detail: fmt.Sprintf("hook %q: a hook is \"before\" (runs before the run; its failure fails it), \"after\" (after a run that succeeded) or \"failure\" (after one that failed).", when), Subject: b.LabelRanges[0].Ptr()}}
	}
	for _, h := range p.Hooks {
		if h.When == when {
			return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Duplicate hook",
				Detail: fmt.Sprintf("Pipeline %q already has a %q hook at %s; one command may run several things (sh -c \"…\").", p.Name, when, pos(h.Range)), Subject: b.LabelRanges[0].Ptr()}}
		}
	}
	blk, diags := f.decodeBlock(b, "hook", hookAttrs, "", ectx, src)
	h := &Hook{When: when, Range: b.DefRange, Command: blk.Strings("command")}
	h.Timeout, _ = blk.Values["timeout"].(time.Duration)
	if blk.Has("timeout") && h.Timeout <= 0 {
		diags = append(diags, hclvalue.Diag(blk.attrs["timeout"], "Timeout too short", "A hook's timeout is longer than zero (default 10m)."))
	}
	if blk.Sensitive["command"] {
		diags = append(diags, commandSecret(blk))
	}
	p.Hooks = append(p.Hooks, h)
	return diags
}

// Hook returns the pipeline's hook of a kind, nil when it has none.
func (p *Pipeline) Hook(when string) *Hook {
	for _, h := range p.Hooks {
		if h.When == when {
			return h
		}
	}
	return nil
}

// blockName checks the name of a labelled block of kind what: its form,
// and that no block of the kind before it (prev finds it) has it.
func blockName(what string, b *hcl.Block, prev func(name string) *hcl.Range) hcl.Diagnostics {
	name := b.Labels[0]
	if !nameRE.MatchString(name) {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid " + what + " name",
			Detail: fmt.Sprintf("%q: a %s name starts with a letter or _ and holds letters, digits, _ and -.", name, what), Subject: b.LabelRanges[0].Ptr()}}
	}
	if r := prev(name); r != nil {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Duplicate " + what,
			Detail: fmt.Sprintf("A %s block named %q is already defined at %s.", what, name, pos(*r)), Subject: b.LabelRanges[0].Ptr()}}
	}
	return nil
}

// commandSecret is the error of a command line that holds a sensitive
// value.
func commandSecret(blk *Block) *hcl.Diagnostic {
	return hclvalue.Diag(blk.attrs["command"], "A secret in a command line",
		"command holds a sensitive value, and a command line is visible to every user of the machine (ps): let the program read the secret from a file or its own configuration.")
}
