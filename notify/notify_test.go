package notify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipebackup/pipe/internal/syncbuf"
)

// receiver records what it was sent: each request's path and body.
type receiver struct {
	mu   sync.Mutex
	got  []request
	srv  *httptest.Server
	hook func(w http.ResponseWriter, r *http.Request) bool // true: answered
}

type request struct {
	Path   string
	Header http.Header
	Event  Event
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rc.hook != nil && rc.hook(w, r) {
			return
		}
		b, _ := io.ReadAll(r.Body)
		var ev Event
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Errorf("body is not an event: %v: %s", err, b)
		}
		rc.mu.Lock()
		rc.got = append(rc.got, request{Path: r.URL.Path, Header: r.Header, Event: ev})
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.got...)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// logged is a logger whose records go to a buffer.
func logged() (*slog.Logger, *syncbuf.Buffer) {
	b := &syncbuf.Buffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

func TestWebhookGetsEachEventInOrder(t *testing.T) {
	rc := newReceiver(t)
	n := New([]Target{{Name: "ops", Webhook: rc.srv.URL + "/hook/s3cr3t-token", Headers: map[string]string{"Authorization": "Bearer abc"}, Timeout: 2 * time.Second}}, Options{Log: quiet()})
	defer n.Close()
	n.Send(Event{Kind: Start, Pipeline: "db", RunID: "r1"})
	n.Send(Event{Kind: Failure, Pipeline: "db", RunID: "r1", Error: "pg_dump exited with status 1", Summary: map[string]any{"streams": 3}})
	n.Flush()
	got := rc.requests()
	if len(got) != 2 {
		t.Fatalf("got %d requests, want 2: %+v", len(got), got)
	}
	for i, want := range []string{Start, Failure} {
		ev := got[i].Event
		if ev.Kind != want || ev.Pipeline != "db" || ev.RunID != "r1" || ev.Host == "" || ev.Time.IsZero() || ev.ID != "r1/db/"+want {
			t.Errorf("request %d: %+v, want a %s event of db, run r1, with host, time and id", i, ev, want)
		}
		if got[i].Path != "/hook/s3cr3t-token" || got[i].Header.Get("Authorization") != "Bearer abc" || got[i].Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d went to %s with headers %v", i, got[i].Path, got[i].Header)
		}
	}
	if ev := got[1].Event; ev.OK || !strings.Contains(ev.Text, "pipeline db failed") || !strings.Contains(ev.Text, "pg_dump exited") || ev.Summary == nil {
		t.Errorf("the failure event is %+v", ev)
	}
}

func TestHealthchecksPings(t *testing.T) {
	rc := newReceiver(t)
	n := New([]Target{{Name: "hc", Healthchecks: rc.srv.URL + "/ping/uuid/", Timeout: 2 * time.Second}}, Options{Log: quiet()})
	defer n.Close()
	for _, k := range []string{Start, Success, Start, Partial, RetentionFailure, VerifySuccess, VerifyFailure} {
		n.Send(Event{Kind: k, Pipeline: "db"})
	}
	n.Flush()
	var paths []string
	for _, r := range rc.requests() {
		paths = append(paths, r.Path)
	}
	want := "/ping/uuid/start /ping/uuid /ping/uuid/start /ping/uuid/fail /ping/uuid/fail /ping/uuid /ping/uuid/fail"
	if strings.Join(paths, " ") != want {
		t.Errorf("pinged %v, want %s", paths, want)
	}
}

func TestOnFiltersEvents(t *testing.T) {
	rc := newReceiver(t)
	n := New([]Target{{Name: "pager", Webhook: rc.srv.URL, On: []string{Failure, Partial}, Timeout: time.Second}}, Options{Log: quiet()})
	defer n.Close()
	for _, k := range []string{Start, Success, Start, Failure} {
		n.Send(Event{Kind: k, Pipeline: "db"})
	}
	n.Flush()
	got := rc.requests()
	if len(got) != 1 || got[0].Event.Kind != Failure {
		t.Errorf("got %+v, want the failure only", got)
	}
}

// A target that answers 503 twice gets the event on the third try, once.
func TestRetriesWhatTheTargetDidNotTake(t *testing.T) {
	rc := newReceiver(t)
	var calls atomic.Int32
	rc.hook = func(w http.ResponseWriter, r *http.Request) bool {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	n := New([]Target{{Name: "ops", Webhook: rc.srv.URL, Timeout: 5 * time.Second}}, Options{Log: quiet()})
	defer n.Close()
	n.Send(Event{Kind: Failure, Pipeline: "db"})
	n.Flush()
	if got := rc.requests(); len(got) != 1 || calls.Load() != 3 {
		t.Errorf("%d requests, %d recorded; want 3 and 1", calls.Load(), len(got))
	}
}

// A refusal (4xx) is not tried again, and is logged without the URL.
func TestRefusalIsLoggedWithoutTheURL(t *testing.T) {
	rc := newReceiver(t)
	var calls atomic.Int32
	rc.hook = func(w http.ResponseWriter, r *http.Request) bool {
		calls.Add(1)
		w.WriteHeader(http.StatusNotFound)
		return true
	}
	log, buf := logged()
	n := New([]Target{{Name: "ops", Webhook: rc.srv.URL + "/T0/s3cr3t", Timeout: 2 * time.Second}}, Options{Log: log})
	defer n.Close()
	n.Send(Event{Kind: Failure, Pipeline: "db"})
	n.Flush()
	if calls.Load() != 1 {
		t.Errorf("%d requests, want 1", calls.Load())
	}
	if out := buf.String(); !strings.Contains(out, `notify \"ops\": the failure event was not delivered: the target answered 404 Not Found`) || strings.Contains(out, "s3cr3t") {
		t.Errorf("log: %s", out)
	}
}

// A target nobody listens on is given up on within its timeout, the
// error without the URL.
func TestUnreachableTargetCostsItsTimeout(t *testing.T) {
	rc := newReceiver(t)
	u := rc.srv.URL + "/s3cr3t"
	rc.srv.Close()
	log, buf := logged()
	n := New([]Target{{Name: "ops", Webhook: u, Timeout: 500 * time.Millisecond}}, Options{Log: log})
	defer n.Close()
	start := time.Now()
	n.Send(Event{Kind: Failure, Pipeline: "db"})
	n.Flush()
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("flush took %s against a timeout of 500ms", d)
	}
	if out := buf.String(); !strings.Contains(out, "was not delivered") || !strings.Contains(out, "connection refused") || strings.Contains(out, "s3cr3t") {
		t.Errorf("log: %s", out)
	}
}

// A target that hangs costs a flush its timeout, not more, however many
// events wait for it; a second target gets its events meanwhile.
func TestHangingTargetCostsAtMostItsTimeout(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	rc := newReceiver(t)
	rc.hook = func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
		return true
	}
	ok := newReceiver(t)
	log, buf := logged()
	n := New([]Target{
		{Name: "stuck", Webhook: rc.srv.URL, Timeout: 700 * time.Millisecond},
		{Name: "ok", Webhook: ok.srv.URL, Timeout: 700 * time.Millisecond},
	}, Options{Log: log})
	defer n.Close()
	start := time.Now()
	n.Send(Event{Kind: Start, Pipeline: "db"})
	n.Send(Event{Kind: Failure, Pipeline: "db"})
	n.Send(Event{Kind: RetentionFailure, Pipeline: "db"})
	n.Flush()
	if d := time.Since(start); d < 700*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("flush took %s; the hanging target's timeout is 700ms", d)
	}
	if got := ok.requests(); len(got) != 3 {
		t.Errorf("the other target got %d events, want 3", len(got))
	}
	out := buf.String()
	for _, k := range []string{Start, Failure, RetentionFailure} {
		if !strings.Contains(out, `notify \"stuck\": the `+k+` event was not delivered`) {
			t.Errorf("the %s event's loss is not logged: %s", k, out)
		}
	}
	// Later events are tried again: the target is not given up on for good.
	n.Send(Event{Kind: Start, Pipeline: "next"})
	start = time.Now()
	n.Flush()
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Errorf("the next flush took %s: the next event was not tried", d)
	}
}

func TestCommandGetsTheEvent(t *testing.T) {
	var got []byte
	var target string
	n := New([]Target{{Name: "script", Command: []string{"notify-send"}, Timeout: time.Second}}, Options{Log: quiet(),
		RunCommand: func(ctx context.Context, tg *Target, stdin []byte) error {
			got, target = stdin, tg.Name
			return nil
		}})
	n.Send(Event{Kind: Success, Pipeline: "db", RunID: "r9"})
	n.Close()
	var ev Event
	if err := json.Unmarshal(got, &ev); err != nil || ev.Kind != Success || ev.RunID != "r9" || target != "script" {
		t.Errorf("the command got %s (%v) for %q", got, err, target)
	}
}

// A command that fails is not run again: it may have acted.
func TestFailedCommandRunsOnce(t *testing.T) {
	var runs atomic.Int32
	log, buf := logged()
	n := New([]Target{{Name: "script", Command: []string{"x"}, Timeout: time.Second}}, Options{Log: log,
		RunCommand: func(ctx context.Context, tg *Target, stdin []byte) error {
			runs.Add(1)
			return errors.New("x exited with status 3")
		}})
	n.Send(Event{Kind: Failure, Pipeline: "db"})
	n.Close()
	if runs.Load() != 1 || !strings.Contains(buf.String(), "x exited with status 3") {
		t.Errorf("%d runs; log: %s", runs.Load(), buf.String())
	}
}

func TestScrubbedErrors(t *testing.T) {
	log, buf := logged()
	n := New([]Target{{Name: "script", Command: []string{"x"}, Timeout: time.Second}}, Options{Log: log,
		Scrub: func(s string) string { return strings.ReplaceAll(s, "hunter2", "[redacted]") },
		RunCommand: func(ctx context.Context, tg *Target, stdin []byte) error {
			return errors.New("x: wrong password hunter2")
		}})
	n.Send(Event{Kind: Failure})
	n.Close()
	if out := buf.String(); strings.Contains(out, "hunter2") || !strings.Contains(out, "[redacted]") {
		t.Errorf("log: %s", out)
	}
}

func TestNoTargetsIsFree(t *testing.T) {
	var n *Notifier
	n.Send(Event{Kind: Start})
	n.Flush()
	n.Close()
	e := New(nil, Options{})
	e.Send(Event{Kind: Start})
	e.Close()
	if !e.Empty() || !n.Empty() {
		t.Error("a notifier without targets is not empty")
	}
}
