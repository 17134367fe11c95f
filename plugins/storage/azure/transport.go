package azure

import (
	"net/http"
	"time"

	"github.com/pipebackup/pipe/plugins/storage/internal/bulkhttp"
)

// newHTTPClient returns the client azcore sends requests with: the bulk
// transport of package bulkhttp, with stall as its stall timeout (instead
// of a deadline on whole requests, so a slow but moving transfer is never
// cut while a stalled one fails in bounded time) and an idle pool that
// keeps a connection for every block in flight of several objects.
func newHTTPClient(concurrency int, stall time.Duration) *http.Client {
	return &http.Client{Transport: bulkhttp.NewTransport(bulkhttp.Options{
		IdleConns:      poolSize(concurrency),
		ConnectTimeout: min(stall, 30*time.Second),
		StallTimeout:   stall,
	})}
}

// poolSize is how many idle connections to one host the pool keeps: every
// block of four objects in flight at once (pipe's profiles move two), so
// connections are reused instead of redialled.
func poolSize(concurrency int) int { return max(8, 4*concurrency) }
