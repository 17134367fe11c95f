package spool

import (
	"sync"
	"testing"
)

// A pusher or prefetcher that starts while commands poll whether one runs
// (locked takes the lock for an instant) still takes the lock: a poll is
// not another pusher.
func TestLockBesidePolls(t *testing.T) {
	dir := t.TempDir()
	stop := make(chan struct{})
	var poller sync.WaitGroup
	poller.Go(func() {
		for {
			select {
			case <-stop:
				return
			default: // far more often than commands poll (every 2 ms at most)
				Locked(dir, PrefetchLock)
			}
		}
	})
	defer func() { close(stop); poller.Wait() }()
	for i := range 200 {
		l, err := Lock(dir, PrefetchLock)
		if err != nil {
			t.Fatalf("lock %d beside polls: %v", i, err)
		}
		l.Close()
	}
}
