package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// The end of a base backup waits until the server has archived the last
// segment the backup needs: without it the backup does not restore.
// PostgreSQL's own wait (BASE_BACKUP without NOWAIT) looks at the
// segment's archive status once a second, so a backup whose last segment
// archive_command stores in 50 ms still ends about a second late: most of
// a small incremental's time. Where it can, pipe asks the server not to
// wait and watches the archiver itself, on a second, ordinary connection,
// reading pg_stat_archiver every few milliseconds.

// Archive watching needs the archiver's statistics in shared memory,
// updated as each file is archived (15 and later; 13 and 14 send them to
// the statistics collector, which publishes them up to half a second
// late).
const watchArchiveVersion = 150000

// archiveQuery reads what the archiver did last.
const archiveQuery = "SELECT coalesce(last_archived_wal, ''), coalesce(last_failed_wal, ''), coalesce(last_failed_time::text, '') FROM pg_stat_archiver"

const (
	// archivePollFirst and archivePollLongest bound the pause between two
	// looks at the archiver: it doubles from the first to the second.
	archivePollFirst   = 5 * time.Millisecond
	archivePollLongest = 200 * time.Millisecond
	// archiveWarnAfter is when a wait that goes on is worth a warning,
	// as the server warns after a minute.
	archiveWarnAfter = time.Minute
)

// watchArchive opens the connection that watches the archiver, or
// returns nil when it cannot (a pg_hba.conf that allows the user only
// replication connections, a database it may not connect to): the
// server then waits for the archive itself, a second late.
func (c conn) watchArchive(ctx context.Context, dial pgconn.DialFunc) *pgconn.PgConn {
	cfg, err := c.connectConfig(dial, false)
	if err != nil {
		return nil
	}
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err == nil {
		_, _, _, err = lastArchived(ctx, pc)
		if err == nil {
			return pc
		}
		pc.Close(context.Background())
	}
	sdk.Log().Debug("the server waits for the archive itself, looking once a second: pipe cannot read pg_stat_archiver on an ordinary connection", "endpoint", "postgres_basebackup", "error", scrub(err.Error(), c.password))
	return nil
}

// canWatchArchive reports whether pipe may watch this server's archiver
// instead of letting it wait: a primary (a standby's backup waits on
// its own archiving, if any) of 15 or later that archives.
func canWatchArchive(settings map[string]string) bool {
	n, _ := strconv.Atoi(settings["server_version_num"])
	return n >= watchArchiveVersion && settings["in_hot_standby"] != "on" && (settings["archive_mode"] == "on" || settings["archive_mode"] == "always")
}

// lastArchived reads pg_stat_archiver: the last file archived, the last
// that failed and when.
func lastArchived(ctx context.Context, pc *pgconn.PgConn) (archived, failed, failedAt string, err error) {
	res, err := pc.Exec(ctx, archiveQuery).ReadAll()
	if err != nil {
		return "", "", "", err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 3 {
		return "", "", "", fmt.Errorf("%s: unexpected answer", archiveQuery)
	}
	row := res[0].Rows[0]
	return string(row[0]), string(row[1]), string(row[2]), nil
}

// archivedThrough reports whether the archiver, whose last archived file
// is last, has archived the segment named end. The archiver stores the
// files it finds ready in the order of their names, so once a file of
// end's timeline whose name begins with end or a later segment is
// archived, so is end. That holds for the backup history file too
// (<start segment>.<offset>.backup): the server writes it after the
// switch that completed the backup's last segment. A history file, or a
// file of an earlier timeline, says nothing of end.
func archivedThrough(last, end string) bool {
	if len(last) < 24 || len(end) != 24 {
		return false
	}
	seg := strings.ToUpper(last[:24])
	rest := last[24:]
	if strings.Trim(seg, "0123456789ABCDEF") != "" || (rest != "" && rest != ".partial" && !(strings.HasPrefix(rest, ".") && strings.HasSuffix(rest, ".backup"))) {
		return false
	}
	return seg[:8] == end[:8] && seg >= end
}

// awaitArchive waits until the server has archived the last segment of
// the backup that ended at s.end, warning once when that takes a minute
// (the archive_command fails, or falls behind).
func (s *BaseSource) awaitArchive(ctx context.Context) error {
	end, err := lastSegment(s.facts[factStartLSN], s.end[factStopLSN], s.end[factStopTLI], s.facts[factSegSize])
	if err != nil {
		return fmt.Errorf("waiting for the archive: %w", err)
	}
	began := time.Now()
	pause, warned := archivePollFirst, false
	for {
		archived, failed, failedAt, err := lastArchived(ctx, s.watch)
		if err != nil {
			return fmt.Errorf("waiting for the server to archive %s, the backup's last WAL segment: reading pg_stat_archiver: %w", end, serverGone(err))
		}
		if archivedThrough(archived, end) {
			return nil
		}
		if !warned && time.Since(began) >= archiveWarnAfter {
			warned = true
			why := "the archiver has not reached it yet (last archived: " + orNone(archived) + ")"
			if failed != "" {
				why = fmt.Sprintf("archive_command last failed on %s at %s", failed, failedAt)
			}
			sdk.Log().Warn(fmt.Sprintf("still waiting for the server to archive %s, the last WAL segment this backup needs: %s; check archive_command and the server's log", end, why), "endpoint", "postgres_basebackup")
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for the server to archive %s, the backup's last WAL segment: %w", end, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, archivePollLongest)
	}
}

// lastSegment names the last WAL segment a backup from start to stop
// needs, the one that holds the byte before stop (XLByteToPrevSeg), as
// the catalog reads the range (wal.BackupRange): on timeline tli, for
// segments of segSize bytes.
func lastSegment(start, stop, tli, segSize string) (string, error) {
	from, err := pglogrepl.ParseLSN(start)
	if err != nil {
		return "", fmt.Errorf("start position %q: %w", start, err)
	}
	to, err := pglogrepl.ParseLSN(stop)
	if err != nil {
		return "", fmt.Errorf("end position %q: %w", stop, err)
	}
	t, err := strconv.ParseUint(tli, 10, 32)
	if err != nil || t == 0 {
		return "", fmt.Errorf("timeline %q is not a timeline", tli)
	}
	size, err := strconv.ParseUint(segSize, 10, 32)
	if err != nil || size < 1<<20 || size > 1<<30 || size&(size-1) != 0 {
		return "", fmt.Errorf("wal_segment_size %q is not a segment size", segSize)
	}
	n := uint64(from) / size
	if to > from {
		n = (uint64(to) - 1) / size
	}
	per := 0x100000000 / size
	return fmt.Sprintf("%08X%08X%08X", t, n/per, n%per), nil
}

// orNone is v, or "none" when empty.
func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}
