// Package notify tells people and systems what pipe's runs did: a webhook
// gets each event as JSON, a healthchecks-style URL its start, success and
// failure pings, a command the event on its standard input. Each target
// gets its events in order, each delivery within the target's timeout, and
// nothing a target does (refuse, hang, crash) changes a run's result or
// costs it more than that timeout.
package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// The events, as the "event" field and the on attribute name them.
const (
	// Start: a pipeline began.
	Start = "start"
	// Success: it ended well.
	Success = "success"
	// Failure: it failed and stored nothing (or restored nothing whole).
	Failure = "failure"
	// Partial: it stored a run that misses streams or holds damage.
	Partial = "partial"
	// RetentionFailure: the run is complete, its retention failed.
	RetentionFailure = "retention_failure"
	// VerifyFailure: pipe verify found a run or archive it cannot trust.
	VerifyFailure = "verify_failure"
	// VerifySuccess: pipe verify checked everything it was asked to.
	VerifySuccess = "verify_success"
	// WALBacklog: more WAL waits to be archived than the archive's
	// max_backlog.
	WALBacklog = "wal_backlog"
	// DrillSuccess: pipe drill restored a run and every check passed.
	DrillSuccess = "drill_success"
	// DrillFailure: the restore or a check of pipe drill failed.
	DrillFailure = "drill_failure"
)

// Events are every event, in the order the docs list them.
var Events = []string{Start, Success, Failure, Partial, RetentionFailure, VerifySuccess, VerifyFailure, DrillSuccess, DrillFailure, WALBacklog}

// Failed reports whether the event tells of a failure.
func Failed(kind string) bool {
	return kind != Start && kind != Success && kind != VerifySuccess && kind != DrillSuccess
}

// Event is what a target is told. It holds no secret: its messages went
// through the run's scrubbing, and its summary is the one pipe prints.
type Event struct {
	Kind string `json:"event"`
	// ID is the event's own name, the same in every retry of it, for a
	// receiver to recognise one it has already seen.
	ID       string    `json:"id"`
	Time     time.Time `json:"time"`
	Host     string    `json:"host"`
	File     string    `json:"file,omitempty"`
	Pipeline string    `json:"pipeline,omitempty"`
	Archive  string    `json:"archive,omitempty"`
	RunID    string    `json:"run_id,omitempty"`
	OK       bool      `json:"ok"`
	// Text is one line for people (chat webhooks show it).
	Text  string `json:"text"`
	Error string `json:"error,omitempty"`
	// Summary is the run's summary, as pipe run --json prints it.
	Summary any `json:"summary,omitempty"`
}

// Target is one notify block.
type Target struct {
	Name string
	// One of Webhook, Healthchecks and Command is set.
	Webhook      string
	Headers      map[string]string
	Healthchecks string
	Command      []string
	// On are the events it gets; empty: every event.
	On      []string
	Timeout time.Duration
}

// Wants reports whether the target gets events of kind.
func (t *Target) Wants(kind string) bool { return len(t.On) == 0 || slices.Contains(t.On, kind) }

// Options are what a Notifier needs beyond its targets.
type Options struct {
	// RunCommand runs a command target's program with the event on its
	// standard input (the host's RunProgram: its own process group, the
	// plugins' environment), ending it when ctx ends.
	RunCommand func(ctx context.Context, t *Target, stdin []byte) error
	// Log gets what went wrong with a delivery; nil: slog's default.
	Log *slog.Logger
	// Scrub removes secrets from messages.
	Scrub func(string) string
}

// Notifier delivers events to targets, each target's in order.
type Notifier struct {
	o       Options
	targets []*queue
	host    string
}

// New starts a notifier; Close ends it.
func New(targets []Target, o Options) *Notifier {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Scrub == nil {
		o.Scrub = func(s string) string { return s }
	}
	host, _ := os.Hostname()
	n := &Notifier{o: o, host: host}
	for i := range targets {
		q := &queue{t: &targets[i], n: n, wake: make(chan struct{}, 1), idle: make(chan struct{})}
		close(q.idle)
		n.targets = append(n.targets, q)
		go q.work()
	}
	return n
}

// Empty reports whether there is nobody to tell.
func (n *Notifier) Empty() bool { return n == nil || len(n.targets) == 0 }

// Send queues ev for every target that wants it and returns at once. It
// fills in the host and time when they are not set.
func (n *Notifier) Send(ev Event) {
	if n.Empty() {
		return
	}
	if ev.Host == "" {
		ev.Host = n.host
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if ev.ID == "" {
		run := ev.RunID
		if run == "" { // verify, an archive: the moment names the event
			run = ev.Time.Format("20060102T150405.000000000Z")
		}
		ev.ID = fmt.Sprintf("%s/%s%s/%s", run, ev.Pipeline, ev.Archive, ev.Kind)
	}
	if ev.Text == "" {
		ev.Text = text(ev)
	}
	for _, q := range n.targets {
		if q.t.Wants(ev.Kind) {
			q.push(ev)
		}
	}
}

// Flush waits until every event sent so far was delivered or given up
// on: at most each target's timeout from now, all targets at once.
// Deliveries still going then are ended, and the events still queued for
// that target are dropped, with a warning.
func (n *Notifier) Flush() {
	if n.Empty() {
		return
	}
	var wg sync.WaitGroup
	for _, q := range n.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.flush()
		}()
	}
	wg.Wait()
}

// Close flushes, then stops the notifier's workers.
func (n *Notifier) Close() {
	if n.Empty() {
		return
	}
	n.Flush()
	for _, q := range n.targets {
		q.stop()
	}
}

// says is what each event says of its pipeline or archive.
var says = map[string]string{
	Start:            " started",
	Success:          " succeeded",
	Failure:          " failed",
	Partial:          " stored a partial run",
	RetentionFailure: ": retention failed (the run itself is complete)",
	VerifySuccess:    ": verify passed",
	VerifyFailure:    ": verify failed",
	WALBacklog:       ": the WAL backlog is past its limit",
	DrillSuccess:     ": the restore drill passed",
	DrillFailure:     ": the restore drill failed",
}

// text is an event's line for people.
func text(ev Event) string {
	what := "pipeline " + ev.Pipeline
	if ev.Pipeline == "" && ev.Archive != "" {
		what = "archive " + ev.Archive
	}
	s, ok := says[ev.Kind]
	if !ok {
		s = ": " + ev.Kind
	}
	s = what + s
	if ev.RunID != "" {
		s += " (run " + ev.RunID + ")"
	}
	s = "pipe on " + ev.Host + ": " + s
	if ev.Error != "" {
		s += ": " + ev.Error
	}
	return s
}

// payload is an event as JSON.
func payload(ev Event) []byte {
	b, err := json.Marshal(ev)
	if err != nil { // a summary that cannot be marshalled: send the rest
		ev.Summary = nil
		b, _ = json.Marshal(ev)
	}
	return b
}
