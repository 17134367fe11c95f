package sdk

// The facts a physical PostgreSQL base backup records (the
// postgres_basebackup source's, under Describe and Conclude) that pipe
// reads back: the WAL a backup needs, which its WAL archive checks
// (pipe verify) and keeps (retention), and the run a recovery target can
// reach. A source of physical backups of another kind that records them
// gets the same checks.
const (
	// FactSystemID is the cluster's system identifier, in decimal.
	FactSystemID = "system_identifier"
	// FactTimeline and FactStartLSN are where the backup started:
	// "1", "16/B374D848".
	FactTimeline = "timeline"
	FactStartLSN = "start_lsn"
	// FactStopLSN and FactStopTimeline are where it ended, FactStopTime
	// when (RFC 3339): recovery from it is consistent past FactStopLSN.
	FactStopLSN      = "stop_lsn"
	FactStopTimeline = "stop_timeline"
	FactStopTime     = "stop_time"
	// FactWALSegmentSize is the cluster's WAL segment size in bytes.
	FactWALSegmentSize = "wal_segment_size"
)
