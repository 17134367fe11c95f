package gcs

import (
	"net/http"
	"time"

	"github.com/pipebackup/pipe/plugins/storage/internal/bulkhttp"
)

// newTransport is the HTTP transport for bulk data (see package
// bulkhttp), with timeout as its stall timeout (0: none) and an idle pool
// for every range and chunk in flight of several objects at once.
func newTransport(timeout time.Duration) *http.Transport {
	return bulkhttp.NewTransport(bulkhttp.Options{IdleConns: 100, StallTimeout: timeout})
}
