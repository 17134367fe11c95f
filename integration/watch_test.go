package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/internal/promtest"
	"github.com/pipebackup/pipe/internal/syncbuf"
)

// watched is a pipe run a test acts on while it goes (adds a fault,
// interrupts it) once its data is moving, rather than after a fixed time a
// loaded machine can outrun: pipe serves its metrics on a port of its own,
// and moved waits on them.
type watched struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	stdout bytes.Buffer
	stderr syncbuf.Buffer
	done   chan struct{} // closed when the process ended
	err    error         // the process's, after done
	url    string        // the metrics' address, once pipe told it
}

// startPipe starts the pipe binary in dir, like runPipe, serving its
// metrics on a port it picks.
func startPipe(t *testing.T, dir string, env []string, args ...string) *watched {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	w := &watched{cancel: cancel, done: make(chan struct{})}
	w.cmd = exec.CommandContext(ctx, pipeBin, append(args, "--metrics-addr", "127.0.0.1:0")...)
	w.cmd.Dir = dir
	w.cmd.Env = append(os.Environ(), env...)
	w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
	w.cmd.WaitDelay = 10 * time.Second // a child left holding its output does not hold the test
	if err := w.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() { w.cancel(); <-w.done })
	return w
}

// wait waits for the run to end.
func (w *watched) wait() result {
	<-w.done
	w.cancel()
	return result{Stdout: w.stdout.String(), Stderr: w.stderr.String(), Err: w.err}
}

// moved waits until the stage named stage ("source", "sink s3") has moved
// at least n bytes in direction ("in" or "out"). A sink
// counts bytes once it accepted them (a store's sink may hold a part's
// worth before sending any), a source a chunk once it read all of it. The
// test fails if the run ends first, or not enough moves in two minutes.
func (w *watched) moved(t *testing.T, stage, direction string, n float64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if w.url == "" {
			w.url, _, _ = promtest.ServedAt(w.stderr.String())
		}
		if w.url != "" && w.stageBytes(stage, direction) >= n {
			return
		}
		select {
		case <-w.done:
			t.Fatalf("pipe %s ended (%v) before its %s had moved %.0f bytes:\n%s", strings.Join(w.cmd.Args[1:], " "), w.err, stage, n, w.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pipe's %s moved less than %.0f bytes in two minutes:\n%s", stage, n, w.stderr.String())
		}
	}
}

var scraper = &http.Client{Timeout: 5 * time.Second}

// stageBytes scrapes pipe_stage_bytes_total of the stage in direction. A
// scrape that fails or is cut short (the run is ending) counts nothing:
// moved then sees the run end, or its deadline.
func (w *watched) stageBytes(stage, direction string) float64 {
	resp, err := scraper.Get(w.url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	ms, err := promtest.Parse(resp.Body)
	if err != nil {
		return 0
	}
	v, _ := promtest.Find(ms, "pipe_stage_bytes_total", fmt.Sprintf("stage=%q", stage), fmt.Sprintf("direction=%q", direction))
	return v
}
