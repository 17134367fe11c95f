package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BinlogStats is what a running binlog archiver reports when gathered.
type BinlogStats func() BinlogArchiver

// BinlogArchiver is a binlog archiver's numbers: how long its oldest
// byte not yet stored has waited, what it stored, and how often it found
// files the server purged before they were stored.
type BinlogArchiver struct {
	Lag                   time.Duration
	Bytes, Segments, Gaps int64
}

type binlogDescs struct {
	lag, bytes, segments, gaps *prometheus.Desc
}

func newBinlogDescs(d func(name, help string, labels ...string) *prometheus.Desc) *binlogDescs {
	a := "archive"
	return &binlogDescs{
		lag:      d("pipe_binlog_lag_seconds", "How long the oldest byte of the server's binlog not yet in the archive has waited (0: the archive holds everything the files hold).", a),
		bytes:    d("pipe_binlog_stored_bytes_total", "Binlog bytes pipe binlog archive stored since it started.", a),
		segments: d("pipe_binlog_segments_total", "Segments (objects) pipe binlog archive stored since it started.", a),
		gaps:     d("pipe_binlog_gaps_total", "Times pipe binlog archive found that the server had purged binlog files the archive lacks: recoveries cannot pass them (alert on any).", a),
	}
}

func (d *binlogDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.lag, d.bytes, d.segments, d.gaps}
}

// BinlogArchiving registers a running binlog archiver of archive.
func (m *Metrics) BinlogArchiving(archive string, stats BinlogStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.binlogs == nil {
		m.binlogs = map[string]BinlogStats{}
	}
	m.binlogs[archive] = stats
}

// collectBinlogs sends the archivers' metrics; m.mu is held.
func (m *Metrics) collectBinlogs(d *binlogDescs, counter, gauge func(*prometheus.Desc, float64, ...string)) {
	for name, stats := range m.binlogs {
		a := stats()
		gauge(d.lag, a.Lag.Seconds(), name)
		counter(d.bytes, float64(a.Bytes), name)
		counter(d.segments, float64(a.Segments), name)
		counter(d.gaps, float64(a.Gaps), name)
	}
}
