package plugin

import (
	"runtime"
	"testing"
	"time"
)

// A work that does not return (a panic, which ends the process a moment
// later; here runtime.Goexit, which runs the same deferred calls without
// ending it) must not look done: report would return and the server send
// pipe "done" for a fill or upload that never finished. It did, in about
// one TestFill run in twenty, while the completion signal was deferred.
func TestReportWaitsForItsWork(t *testing.T) {
	returned := make(chan error, 1)
	go func() {
		_, _, err := report(func() {}, func(func(int64)) (int64, error) {
			runtime.Goexit()
			return 0, nil
		}, func(int64) error { return nil })
		returned <- err
	}()
	select {
	case err := <-returned:
		t.Fatalf("report returned (%v) though its work never did", err)
	case <-time.After(300 * time.Millisecond):
	}
}
