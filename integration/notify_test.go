package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
)

// eventReceiver is a webhook that records the events pipe sends it.
type eventReceiver struct {
	mu     sync.Mutex
	events []string
	bodies []string
	url    string
}

func newEventReceiver(t *testing.T) *eventReceiver {
	rc := &eventReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var ev struct {
			Kind string `json:"event"`
		}
		_ = json.Unmarshal(b, &ev)
		rc.mu.Lock()
		rc.events = append(rc.events, ev.Kind)
		rc.bodies = append(rc.bodies, string(b))
		rc.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL
	return rc
}

// take returns the events received since the last take, in order, and
// their bodies.
func (rc *eventReceiver) take() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s := strings.Join(rc.events, " ")
	rc.events = nil
	return s
}

func (rc *eventReceiver) body() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return strings.Join(rc.bodies, "\n")
}

// TestNotifyS3Down: a backup to S3 whose store stops answering (Toxiproxy
// disabled mid-run) fails, and the webhook hears its start and its
// failure, once each, with the store's error; the credentials are in
// neither.
func TestNotifyS3Down(t *testing.T) {
	b := newS3Bench(t)
	bucket := b.bucket(t, "notify")
	px := startToxiproxy(t, b.m.IP+":9000")
	rc := newEventReceiver(t)
	dir := t.TempDir()
	randomFile(t, filepath.Join(dir, "data", "big"), 64<<20, 7)
	file := s3Vars + `
notify "ops" {
  webhook = "` + rc.url + `"
}
pipeline "backup" {
  source "fs" { path = "data" }
  ` + s3Block("sink", `key = "n/${run.id}/"`) + `
}
`
	writeFile(t, filepath.Join(dir, "p.hcl"), []byte(file))
	if _, err := px.AddToxic("slow", "bandwidth", "upstream", 1, toxiclient.Attributes{"rate": 4000}); err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() {
		done <- runPipe(t, dir, b.env(bucket, "http://"+px.HostPort, "PIPE_VAR_timeout=1s", "PIPE_VAR_retries=1"), "run", "p.hcl")
	}()
	time.Sleep(3 * time.Second)
	if err := px.Disable(); err != nil {
		t.Fatal(err)
	}
	// Back after longer than pipe is told to retry: the run has failed by
	// then, and takes back its upload at once rather than for a minute.
	time.Sleep(6 * time.Second)
	if err := px.Enable(); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the run did not end within 3 minutes of the outage")
	}
	if r.Err == nil {
		t.Fatalf("the backup succeeded through an outage:\n%s", r.Stderr)
	}
	if got := rc.take(); got != "start failure" {
		t.Errorf("the webhook heard %q, want \"start failure\"\n%s", got, r.Stderr)
	}
	body := rc.body()
	if !strings.Contains(body, `"event":"failure"`) || !strings.Contains(body, "sink s3") {
		t.Errorf("the failure event does not say what failed: %s", body)
	}
	if strings.Contains(r.Stderr, b.m.Pass) || strings.Contains(body, b.m.Pass) {
		t.Error("the secret key was printed or sent")
	}
}
