package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/pipebackup/pipe/notify"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/runner"
)

// notifier starts the notifier of the file's notify blocks (an empty one
// when it has none).
func (a *app) notifier(f *pipefile.File, secrets []string) *notify.Notifier {
	var ts []notify.Target
	for _, n := range f.Notifies {
		ts = append(ts, n.Target)
	}
	return notify.New(ts, notify.Options{
		Log:   a.log,
		Scrub: func(s string) string { return scrub(s, secrets) },
		RunCommand: func(ctx context.Context, t *notify.Target, stdin []byte) error {
			return a.registry.RunProgram(ctx, host.Program{Argv: t.Command, Label: "notify " + t.Name, Stdin: stdin, Secrets: secrets,
				Output: func(line string) { a.log.Info(line, "notify", t.Name) }})
		},
	})
}

// event is a pipeline's event of a kind.
func (r *pipeRun) event(pp *plan.Pipeline, kind string) notify.Event {
	return notify.Event{Kind: kind, File: r.plan.File.Path, Pipeline: pp.Name, RunID: r.runID, OK: !notify.Failed(kind)}
}

// hooked runs the pipeline after its before hook (whose failure fails
// the run, which then does not start) and, once it succeeded, its after
// hook (whose failure fails the run, which stays complete). The failure
// hook is failureHook's.
func (a *app) hooked(ctx context.Context, r *pipeRun, pp *plan.Pipeline, o runner.Options) (*runner.Report, error) {
	if err := a.hook(ctx, r, pp, "before", r.event(pp, notify.Start)); err != nil {
		return nil, fmt.Errorf("%w; the run did not start", err)
	}
	rep, err := runner.Run(ctx, pp, o)
	if err == nil {
		ev := r.event(pp, notify.Success)
		ev.Summary = summarize(pp, rep, nil, r.secrets)
		if herr := a.hook(ctx, r, pp, "after", ev); herr != nil {
			err = fmt.Errorf("the run itself succeeded, but %w", herr)
		}
	}
	return rep, err
}

// failureHook runs the failure hook of a run that failed, however it
// failed (also when interrupted: it may have to undo what before did);
// its own failure is logged.
func (a *app) failureHook(ctx context.Context, r *pipeRun, pp *plan.Pipeline, s runSummary) {
	ev := r.event(pp, endKind(s))
	ev.Error, ev.Summary = s.Error, s
	if herr := a.hook(context.WithoutCancel(ctx), r, pp, "failure", ev); herr != nil {
		a.log.Error(herr.Error(), "pipeline", pp.Name)
	}
}

// hook runs the pipeline's hook of kind when it has one, with ev on its
// standard input; what it prints goes to the log.
func (a *app) hook(ctx context.Context, r *pipeRun, pp *plan.Pipeline, kind string, ev notify.Event) error {
	h := pp.Def.Hook(kind)
	if h == nil {
		return nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, h.Timeout, fmt.Errorf("it ran longer than its timeout (%s)", h.Timeout))
	defer cancel()
	stdin, _ := json.Marshal(ev)
	start := time.Now()
	a.log.Info("hook started", "pipeline", pp.Name, "hook", kind)
	err := a.registry.RunProgram(ctx, host.Program{Argv: h.Command, Label: "hook " + kind, Stdin: stdin, Secrets: r.secrets,
		Env:    []string{"PIPE_HOOK=" + kind, "PIPE_PIPELINE=" + pp.Name, "PIPE_RUN_ID=" + r.runID},
		Output: func(line string) { a.log.Info(line, "pipeline", pp.Name, "hook", kind) }})
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
			err = fmt.Errorf("%w (%v)", err, cause)
		}
		return fmt.Errorf("%s:%d:%d: the %s hook failed: %s", h.Range.Filename, h.Range.Start.Line, h.Range.Start.Column, kind, scrub(err.Error(), r.secrets))
	}
	a.log.Info("hook ended", "pipeline", pp.Name, "hook", kind, "seconds", time.Since(start).Seconds())
	return nil
}

// endKind is the event that tells how a run ended.
func endKind(s runSummary) string {
	switch {
	case s.OK:
		return notify.Success
	case len(s.Manifests) > 0 && (len(s.Failed) > 0 || s.Damage != ""):
		return notify.Partial
	}
	return notify.Failure
}

// notifyEnded tells the targets how the pipeline's run ended, and of a
// retention that failed.
func (r *pipeRun) notifyEnded(pp *plan.Pipeline, s runSummary) {
	if r.note.Empty() {
		return
	}
	ev := r.event(pp, endKind(s))
	ev.Error, ev.Summary = s.Error, s
	r.note.Send(ev)
	if msg := retentionErrors(s); msg != "" {
		ev := r.event(pp, notify.RetentionFailure)
		ev.Error, ev.Summary = scrub(msg, r.secrets), s
		r.note.Send(ev)
	}
}

// retentionErrors says what failed in the run's retention, "" when
// nothing did.
func retentionErrors(s runSummary) string {
	var msgs []string
	for _, rr := range s.Retention {
		if rr.Error != "" {
			msgs = append(msgs, "sink "+rr.Sink+": "+rr.Error)
		}
	}
	if w := s.WALRetention; w != nil && w.Error != "" {
		msgs = append(msgs, "archive "+w.Archive+": "+w.Error)
	}
	return strings.Join(msgs, "; ")
}

// notifyVerified tells the file's notify targets what pipe verify found,
// and waits for them (at most their timeouts).
func (a *app) notifyVerified(f *pipefile.File, pipeline string, rep *runner.VerifyReport, err error) {
	note := a.notifier(f, f.Secrets())
	defer note.Close()
	ev := notify.Event{Kind: notify.VerifySuccess, File: f.Path, Pipeline: pipeline, OK: true, Summary: rep}
	if err != nil || !rep.OK() {
		ev.Kind, ev.OK = notify.VerifyFailure, false
	}
	if err != nil {
		ev.Error = scrub(err.Error(), f.Secrets())
	} else if len(rep.Runs) == 0 {
		ev.Error = "no run to verify"
	} else if !rep.OK() {
		ev.Error = fmt.Sprintf("%d of %d objects bad", rep.Bad, rep.Objects)
	}
	note.Send(ev)
}

// notifyBacklog tells the file's notify targets that the archive's
// backlog passed its limit, and waits for them (at most their timeouts).
func (a *app) notifyBacklog(file string, pa *plan.Archive, waiting int) {
	if a.walFile == nil {
		return
	}
	note := a.notifier(a.walFile, a.walFile.Secrets())
	defer note.Close()
	note.Send(notify.Event{Kind: notify.WALBacklog, File: file, Archive: pa.Name,
		Error: fmt.Sprintf("%d files wait in pg_wal/archive_status to be archived, more than max_backlog (%d): pg_wal keeps every segment until it is archived, and pipe drops none", waiting, pa.MaxBacklog)})
}
