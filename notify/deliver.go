package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// queue is one target's events, delivered in order by one goroutine.
type queue struct {
	t    *Target
	n    *Notifier
	wake chan struct{}

	mu      sync.Mutex
	events  []Event
	busy    bool
	cancel  context.CancelFunc
	idle    chan struct{} // closed while nothing is queued or in flight
	stopped bool
}

func (q *queue) push(ev Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	if len(q.events) == 0 && !q.busy {
		q.idle = make(chan struct{})
	}
	q.events = append(q.events, ev)
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue) work() {
	for range q.wake {
		for q.next() {
		}
	}
}

// next delivers the oldest queued event; false when there was none.
func (q *queue) next() bool {
	q.mu.Lock()
	if len(q.events) == 0 {
		q.mu.Unlock()
		return false
	}
	ev := q.events[0]
	q.events = q.events[1:]
	q.busy = true
	ctx, cancel := context.WithTimeout(context.Background(), q.t.Timeout)
	q.cancel = cancel
	q.mu.Unlock()

	start := time.Now()
	err := q.deliver(ctx, ev)
	cancel()
	if err != nil {
		q.n.o.Log.Warn(fmt.Sprintf("notify %q: the %s event was not delivered: %s", q.t.Name, ev.Kind, q.n.o.Scrub(err.Error())))
	} else {
		q.n.o.Log.Debug("notified", "notify", q.t.Name, "event", ev.Kind, "seconds", time.Since(start).Seconds())
	}

	q.mu.Lock()
	q.busy, q.cancel = false, nil
	if len(q.events) == 0 {
		close(q.idle)
	}
	q.mu.Unlock()
	return true
}

// flush waits for the queue to empty, at most the target's timeout; then
// it ends the delivery in flight and drops what is queued.
func (q *queue) flush() {
	q.mu.Lock()
	idle := q.idle
	q.mu.Unlock()
	t := time.NewTimer(q.t.Timeout)
	defer t.Stop()
	select {
	case <-idle:
		return
	case <-t.C:
	}
	q.mu.Lock()
	dropped := q.events
	q.events = nil
	if q.cancel != nil {
		q.cancel()
	}
	if !q.busy && len(dropped) > 0 {
		close(q.idle)
	}
	q.mu.Unlock()
	for _, ev := range dropped {
		q.n.o.Log.Warn(fmt.Sprintf("notify %q: the %s event was not delivered: the target had not taken the events before it within its timeout (%s)", q.t.Name, ev.Kind, q.t.Timeout))
	}
	<-idle
}

func (q *queue) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.stopped {
		q.stopped = true
		close(q.wake)
	}
}

// deliver sends ev to the target, trying again while the failure says
// the target did not take it (no connection, a 5xx, 429 or 408 answer)
// and ctx lasts. A command is run once: it may have acted before it
// failed.
func (q *queue) deliver(ctx context.Context, ev Event) error {
	body := payload(ev)
	if len(q.t.Command) > 0 {
		return q.n.o.RunCommand(ctx, q.t, body)
	}
	u, err := q.url(ev.Kind)
	if err != nil {
		return err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, time.Second
	var last error
	err = backoff.Retry(func() error {
		last = q.post(ctx, u, body)
		return last
	}, backoff.WithContext(b, ctx))
	if err != nil && last != nil {
		return last // not backoff's "context deadline exceeded"
	}
	return err
}

// url is where the event goes: the webhook, or the healthchecks URL with
// /start or /fail.
func (q *queue) url(kind string) (string, error) {
	if q.t.Webhook != "" {
		return q.t.Webhook, nil
	}
	u, err := url.Parse(q.t.Healthchecks)
	if err != nil {
		return "", errors.New("the healthchecks URL does not parse")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	switch {
	case kind == Start:
		u.Path += "/start"
	case Failed(kind):
		u.Path += "/fail"
	}
	return u.String(), nil
}

// client is the one HTTP client of every target; each request's context
// bounds it.
var client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

// post sends body to u once. Errors never hold the URL: it is a secret
// (a webhook's token, a check's id).
func (q *queue) post(ctx context.Context, u string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return backoff.Permanent(errors.New("the URL is not one pipe can send to"))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "pipe")
	for k, v := range q.t.Headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return backoff.Permanent(fmt.Errorf("no answer within the timeout (%s)", q.t.Timeout))
		}
		return fmt.Errorf("sending: %w", err) // the connection failed: try again
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c >= 500, c == http.StatusTooManyRequests, c == http.StatusRequestTimeout:
		return fmt.Errorf("the target answered %s", resp.Status)
	default:
		return backoff.Permanent(fmt.Errorf("the target answered %s", resp.Status))
	}
}
