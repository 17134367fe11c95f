package mysql

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pipebackup/pipe/internal/binlogfile"
	"github.com/pipebackup/pipe/plugins/internal/command"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// replayTarget is where a point-in-time restore stops: a time, or a GTID.
type replayTarget struct {
	at     time.Time // zero: not a time
	gtid   string
	domain uint32
	seq    uint64
}

// parseGTID reads a GTID ("0-1-100": domain, server id, sequence).
func parseGTID(s string) (domain uint32, seq uint64, err error) {
	parts := strings.Split(s, "-")
	if len(parts) == 3 {
		d, err1 := strconv.ParseUint(parts[0], 10, 32)
		_, err2 := strconv.ParseUint(parts[1], 10, 32)
		n, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil {
			return uint32(d), n, nil
		}
	}
	return 0, 0, fmt.Errorf("%q is not a GTID: write it as MariaDB prints one, domain-server_id-sequence (e.g. \"0-1-4711\")", s)
}

// reached reports whether a binlog event is at or past the target: the
// replay holds every transaction before it, and the target's own (a
// GTID's; every transaction of the target's second).
func (t replayTarget) reached(e binlogfile.Event) bool {
	if !t.at.IsZero() {
		return int64(e.Timestamp) > t.at.Unix()
	}
	return e.Type == binlogfile.GTIDEvent && e.Domain == t.domain && e.Seq >= t.seq
}

// replay brings the prepared data directory forward from the backup's
// binlog position to the target: it fetches the archived binlog files
// from the backup's on (binlog_fetch), checks they reach the target,
// starts a server of its own on the directory (no network, its own
// socket, no binlog of its own) and feeds it what mariadb-binlog prints
// from the position to the target, then shuts it down.
func (s *PhysicalSink) replay(ctx context.Context) error {
	info, err := readInfo(s.c.DataDir, "info")
	if err != nil {
		return err
	}
	m := binlogPos.FindStringSubmatch(info["binlog_pos"])
	if m == nil {
		return errors.New("the backup records no binlog position (was the server's binlog on, log_bin?): it cannot be brought to a point in time")
	}
	file, pos := m[1], m[2]
	if s.target.gtid != "" {
		for _, g := range strings.Split(m[3], ",") {
			dom, seq, err := parseGTID(g)
			switch {
			case err != nil || dom != s.target.domain:
			case seq == s.target.seq:
				return nil // the backup ends at the target's transaction
			case seq > s.target.seq:
				return fmt.Errorf("the run restored is past the target: its binlog position follows GTID %s, at or after %s; name an earlier run in the source (run = \"…\")", g, s.target.gtid)
			}
		}
	}
	tmp := filepath.Join(filepath.Dir(s.c.DataDir), "."+filepath.Base(s.c.DataDir)+".pipe-binlog")
	if err := os.RemoveAll(tmp); err != nil {
		return sdk.ExplainIO(err)
	}
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return sdk.ExplainIO(err)
	}
	defer os.RemoveAll(tmp)
	files, err := s.fetchBinlogs(ctx, tmp, file)
	if err != nil {
		return err
	}
	start, _ := strconv.ParseInt(pos, 10, 64)
	if err := s.checkReach(files, start); err != nil {
		return err
	}
	if s.uid >= 0 { // the data directory is the owner's already (prepare)
		if err := os.Chown(tmp, s.uid, s.gid); err != nil {
			return sdk.ExplainIO(err)
		}
	}
	server, err := s.startServer(ctx, tmp)
	if err != nil {
		return err
	}
	err = s.feed(ctx, tmp, files, pos)
	return errors.Join(err, stopServer(server))
}

// fetchBinlogs fetches the archived binlog files from first on into dir,
// until one is not archived (binlog_fetch exits 1).
func (s *PhysicalSink) fetchBinlogs(ctx context.Context, dir, first string) ([]string, error) {
	var files []string
	for name := first; ; {
		dest := filepath.Join(dir, name)
		cmd := strings.NewReplacer("%f", shellQuote(name), "%p", shellQuote(dest), "%%", "%").Replace(s.c.Fetch)
		c := command.New(ctx, command.Spec{Argv: []string{"/bin/sh", "-c", cmd}, Label: "binlog_fetch"})
		err := c.Run()
		if c.Cmd().ProcessState != nil && c.Cmd().ProcessState.ExitCode() == 1 {
			break // not archived: the end of the archive
		}
		if err != nil {
			return nil, fmt.Errorf("fetching the binlog file %s: %w", name, err)
		}
		files = append(files, dest)
		next, err := binlogfile.NextName(name)
		if err != nil {
			return nil, err
		}
		name = next
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("the binlog archive holds no %s, where the backup's binlog position is: archive the server's binlog (pipe binlog archive), and check binlog_fetch", first)
	}
	return files, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// checkReach fails unless the fetched files hold an event at or past the
// target: a replay that ran out of binlog before it would stop short,
// and the restored server would miss what the target asked for.
func (s *PhysicalSink) checkReach(files []string, start int64) error {
	var last uint32
	for i, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return sdk.ExplainIO(err)
		}
		from := int64(0)
		if i == 0 {
			from = start
		}
		found := false
		err = binlogfile.Scan(f, from, func(e binlogfile.Event) bool {
			if e.Timestamp > last {
				last = e.Timestamp
			}
			found = s.target.reached(e)
			return !found
		})
		f.Close()
		if err != nil {
			return fmt.Errorf("reading the binlog file %s: %w", filepath.Base(path), err)
		}
		if found {
			return nil
		}
	}
	what := "transaction at or after GTID " + s.target.gtid
	if !s.target.at.IsZero() {
		what = "event after " + s.target.at.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("the binlog archive ends before the target: it holds no %s (its newest event is of %s); archive the server's binlog up to the target (pipe binlog archive), or choose an earlier target", what, time.Unix(int64(last), 0).UTC().Format(time.RFC3339))
}

// startServer starts a server on the data directory that only its own
// socket in dir reaches, with the grant tables off (the replay flushes
// them on), and waits until it answers.
func (s *PhysicalSink) startServer(ctx context.Context, dir string) (*command.Cmd, error) {
	argv := []string{s.server, "--defaults-file=" + filepath.Join(s.c.DataDir, "backup-my.cnf"),
		"--datadir=" + s.c.DataDir, "--socket=" + filepath.Join(dir, "mysqld.sock"), "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--skip-networking", "--skip-grant-tables", "--skip-log-bin", "--skip-slave-start",
		"--log-error=" + filepath.Join(dir, "error.log"),
		"--innodb-buffer-pool-size=" + strconv.FormatInt(s.c.UseMemory, 10)}
	if os.Geteuid() == 0 {
		owner := "mysql"
		if s.uid >= 0 {
			owner = strconv.Itoa(s.uid)
		}
		argv = append(argv, "--user="+owner)
	}
	c := command.New(context.WithoutCancel(ctx), command.Spec{Argv: argv, Label: "mariadbd"})
	if err := c.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		probe := command.New(ctx, command.Spec{Argv: []string{s.client, "--no-defaults", "--socket=" + filepath.Join(dir, "mysqld.sock"), "--batch", "-e", "SELECT 1"}})
		if probe.Run() == nil {
			return c, nil
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return nil, fmt.Errorf("the server started to replay the binlog ended (%v): %s", err, tail(string(log), 2000))
		case <-ctx.Done():
			c.Kill()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Kill()
			return nil, errors.New("the server started to replay the binlog did not answer within 2 minutes")
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}

// feed pipes mariadb-binlog's SQL, from the backup's position to the
// target, into the server.
func (s *PhysicalSink) feed(ctx context.Context, dir string, files []string, pos string) error {
	args := []string{s.binlog, "--no-defaults", "--start-position=" + pos}
	if !s.target.at.IsZero() {
		// Events have whole seconds: every one of the target's second is
		// replayed, none after (TZ=UTC below).
		args = append(args, "--stop-datetime="+s.target.at.UTC().Truncate(time.Second).Add(time.Second).Format("2006-01-02 15:04:05"))
	} else {
		args = append(args, "--stop-position="+s.target.gtid)
	}
	args = append(args, files...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	dump := command.New(ctx, command.Spec{Argv: args, Env: []string{"TZ=UTC"}})
	dump.Cmd().Stdout = pw
	// One session: the grant tables on first (the binlog may grant), then
	// every statement; a statement that fails stops the replay.
	load := command.New(ctx, command.Spec{Argv: []string{s.client, "--no-defaults", "--socket=" + filepath.Join(dir, "mysqld.sock"), "--batch", "--binary-mode", maxPacket}})
	load.Cmd().Stdin = io.MultiReader(strings.NewReader("FLUSH PRIVILEGES;\n"), pr)
	err = dump.Start()
	pw.Close() // mariadb-binlog holds the write end now
	if err != nil {
		return err
	}
	if err := load.Start(); err != nil {
		dump.Kill()
		_ = dump.Wait()
		return err
	}
	loadErr := load.Wait()
	if loadErr != nil {
		dump.Kill()
	}
	dumpErr := dump.Wait()
	if err := errors.Join(loadErr, dumpErr); err != nil {
		return fmt.Errorf("replaying the binlog to the target: %w", err)
	}
	return nil
}

// stopServer shuts the replay's server down cleanly and waits for it.
func stopServer(c *command.Cmd) error {
	if err := c.Cmd().Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("the server started to replay the binlog did not shut down cleanly: %w", err)
		}
		return nil
	case <-time.After(5 * time.Minute):
		c.Kill()
		return errors.New("the server started to replay the binlog did not shut down within 5 minutes")
	}
}
