package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pipebackup/pipe/wal"
)

// walArchive is what this invocation did with, or found in, one WAL
// archive (label archive: the archive block's name).
type walArchive struct {
	pushed, pushedBytes, stored float64
	lastPush                    time.Time
	backlog                     int
	backlogSet, exceeded        bool
	fetched                     map[string]float64 // by where from: store, spool
	fetchFailures               float64
	listing                     *wal.Listing
	verify                      *wal.VerifyReport
	verifyOK                    bool
}

func (m *Metrics) wal(archive string) *walArchive {
	if m.wals == nil {
		m.wals = map[string]*walArchive{}
	}
	w := m.wals[archive]
	if w == nil {
		w = &walArchive{fetched: map[string]float64{}}
		m.wals[archive] = w
	}
	return w
}

// WALPushed records a file pipe wal push archived (or found archived).
func (m *Metrics) WALPushed(archive string, r *wal.PushResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.wal(archive)
	w.pushed++
	w.pushedBytes += float64(r.Bytes)
	w.stored += float64(r.Stored)
	w.lastPush = m.now()
}

// WALBacklog records the files waiting to be archived.
func (m *Metrics) WALBacklog(archive string, waiting int, exceeded bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.wal(archive)
	w.backlog, w.backlogSet, w.exceeded = waiting, true, exceeded
}

// WALFetched records a file pipe wal fetch restored, from "store" or
// "spool" (prefetched), or a fetch that failed (from "").
func (m *Metrics) WALFetched(archive, from string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.wal(archive)
	if from == "" {
		w.fetchFailures++
		return
	}
	w.fetched[from]++
}

// WALChecked records what pipe wal list or verify found (rep nil: list).
func (m *Metrics) WALChecked(archive string, l *wal.Listing, rep *wal.VerifyReport, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.wal(archive)
	w.listing, w.verify, w.verifyOK = l, rep, ok
}

type walDescs struct {
	pushed, pushedBytes, storedBytes, lastPush *prometheus.Desc
	backlog, exceeded                          *prometheus.Desc
	fetched, fetchFailures                     *prometheus.Desc
	segments, missing, newest, newestAge       *prometheus.Desc
	verifyBad, verifySuccess                   *prometheus.Desc
}

func newWALDescs(d func(name, help string, labels ...string) *prometheus.Desc) *walDescs {
	a := "archive"
	return &walDescs{
		pushed:        d("pipe_wal_pushed_files_total", "Files (segments, history, backup labels) pipe wal push archived or found archived already.", a),
		pushedBytes:   d("pipe_wal_pushed_bytes_total", "Bytes of the files pipe wal push archived, before compression.", a),
		storedBytes:   d("pipe_wal_stored_bytes_total", "Bytes pipe wal push wrote to the store (0 for a file archived already).", a),
		lastPush:      d("pipe_wal_last_push_timestamp_seconds", "When pipe wal push last archived a file; a textfile keeps it across invocations that push nothing. Alert on time() minus this.", a),
		backlog:       d("pipe_wal_backlog_files", "Files PostgreSQL marked ready (pg_wal/archive_status/*.ready) and not archived yet, when an async push began.", a),
		exceeded:      d("pipe_wal_backlog_exceeded", "1 when more files wait than the archive's max_backlog allows: pg_wal grows, and pipe drops none.", a),
		fetched:       d("pipe_wal_fetched_files_total", "Files pipe wal fetch restored, from the store or from the prefetch spool.", a, "from"),
		fetchFailures: d("pipe_wal_fetch_failures_total", "Fetches that failed for another reason than a file that is not archived.", a),
		segments:      d("pipe_wal_segments", "Segments in the archive, by cluster and timeline (pipe wal list and verify).", a, "system_identifier", "timeline"),
		missing:       d("pipe_wal_missing_segments", "Segments missing between the first and the last of each timeline: recovery cannot pass a gap.", a),
		newest:        d("pipe_wal_newest_segment_timestamp_seconds", "When the newest segment in the archive was stored.", a),
		newestAge:     d("pipe_wal_newest_segment_age_seconds", "How long ago the newest segment in the archive was stored, when the metrics were gathered.", a),
		verifyBad:     d("pipe_wal_verify_bad_objects", "Objects pipe wal verify found damaged.", a),
		verifySuccess: d("pipe_wal_verify_success", "1 if pipe wal verify found every object good and no gap, else 0.", a),
	}
}

func (d *walDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.pushed, d.pushedBytes, d.storedBytes, d.lastPush, d.backlog, d.exceeded,
		d.fetched, d.fetchFailures, d.segments, d.missing, d.newest, d.newestAge, d.verifyBad, d.verifySuccess}
}

// collectWAL sends the WAL metrics; m.mu is held.
func (m *Metrics) collectWAL(d *walDescs, now time.Time, counter, gauge func(*prometheus.Desc, float64, ...string)) {
	pushedNow := map[string]bool{}
	for name, w := range m.wals {
		if w.pushed > 0 {
			counter(d.pushed, w.pushed, name)
			counter(d.pushedBytes, w.pushedBytes, name)
			counter(d.storedBytes, w.stored, name)
			gauge(d.lastPush, seconds(w.lastPush), name)
			pushedNow[name] = true
		}
		if w.backlogSet {
			gauge(d.backlog, float64(w.backlog), name)
			gauge(d.exceeded, b2f(w.exceeded), name)
		}
		for from, n := range w.fetched {
			counter(d.fetched, n, name, from)
		}
		if w.fetchFailures > 0 {
			counter(d.fetchFailures, w.fetchFailures, name)
		}
		if l := w.listing; l != nil {
			for _, t := range l.Timelines {
				gauge(d.segments, float64(t.Segments), name, fmt.Sprint(t.SystemID), fmt.Sprintf("%08X", t.Timeline))
			}
			gauge(d.missing, float64(l.Gaps()), name)
			if !l.Newest.IsZero() {
				gauge(d.newest, seconds(l.Newest), name)
				gauge(d.newestAge, now.Sub(l.Newest).Seconds(), name)
			}
		}
		if w.verify != nil {
			gauge(d.verifyBad, float64(len(w.verify.Bad)), name)
			gauge(d.verifySuccess, b2f(w.verifyOK), name)
		}
	}
	for name, ts := range m.carriedPush {
		if !pushedNow[name] {
			gauge(d.lastPush, ts, name)
		}
	}
}
