package s3

import (
	"net/http"

	"github.com/pipebackup/pipe/plugins/storage/internal/bulkhttp"
)

// newTransport returns the HTTP transport for bulk transfer (see package
// bulkhttp), with an idle pool that keeps a connection for every part in
// flight of several objects at once, and timeout as its stall timeout.
func newTransport(c connConfig) *http.Transport {
	idle := c.Connections
	if idle == 0 {
		idle = max(64, 16*c.Concurrency)
	}
	return bulkhttp.NewTransport(bulkhttp.Options{
		IdleConns:      idle,
		ReadBuffer:     int(c.ReadBuffer),
		WriteBuffer:    int(c.WriteBuffer),
		ConnectTimeout: c.ConnectTimeout,
		StallTimeout:   c.Timeout,
	})
}
