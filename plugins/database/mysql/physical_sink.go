package mysql

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/pipebackup/pipe/plugins/internal/command"
	"github.com/pipebackup/pipe/plugins/internal/untar"
	"github.com/pipebackup/pipe/plugins/sdk"
)

type physicalSinkConfig struct {
	DataDir   string `pipe:"data_directory"`
	Backup    string `pipe:"backup_command"`
	Stream    string `pipe:"stream_command"`
	Parallel  int64  `pipe:"parallel"`
	UseMemory int64  `pipe:"use_memory"`
	Owner     string `pipe:"owner"`
	Target    string `pipe:"target"`
	GTID      string `pipe:"target_gtid"`
	Fetch     string `pipe:"binlog_fetch"`
	Server    string `pipe:"server_command"`
	Binlog    string `pipe:"binlog_command"`
	Client    string `pipe:"client_command"`
}

// PhysicalSinkType is the "mariadb_backup" sink.
type PhysicalSinkType struct{}

var (
	_ sdk.SinkType        = PhysicalSinkType{}
	_ sdk.MemoryEstimator = PhysicalSinkType{}
)

func (PhysicalSinkType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Restores a physical backup of the mariadb_backup source into a new data directory: extracts backup.xbstream as it arrives (mbstream -x), prepares it (mariadb-backup --prepare: the copied redo log applied, so the tables are as they were at the backup's moment), applies a chain's incrementals in order (each extracted to a folder of its own beside the data directory first), removes mariadb-backup's own files and gives every file to the data directory's owner. A MariaDB server of the backup's version can then start on it (datadir). The data directory must be absent or empty: a restore never writes over a server.",
		Attributes: []sdk.Attribute{
			{Name: "data_directory", Type: sdk.String, Required: true, Description: "The data directory to restore into, absent or empty. Incrementals are extracted beside it, into .<name>.pipe-incremental-<n>, removed at the end."},
			backupCommandAttribute,
			{Name: "stream_command", Type: sdk.String, Description: "The program that extracts the stream. Default: mbstream (it comes with mariadb-backup)."},
			{Name: "parallel", Type: sdk.Number, Default: int64(4), Description: "The threads mbstream writes files with (--parallel)."},
			{Name: "use_memory", Type: sdk.Size, Default: int64(256 << 20), Description: `The memory mariadb-backup --prepare applies the redo log in (--use-memory, its buffer pool): more is faster for a busy server's backup. pipe plan counts it.`},
			{Name: "target", Type: sdk.String, Target: true, Description: `Recover to this moment ("2026-11-29 10:00:00+00", RFC 3339): pipe restores the newest run that ended before it, then replays the archived binlog (binlog_fetch) from the run's binlog position through every transaction of the target's second (binlog events have whole seconds), and stops. Fails, leaving the directory empty, when the archive does not reach the target.`},
			{Name: "target_gtid", Type: sdk.String, Description: `Recover up to and including this transaction, a GTID ("0-1-4711"), instead of a time (mariadb-binlog of MariaDB 10.8 or later). Name the run (the source's run or before) that the GTID follows.`},
			{Name: "binlog_fetch", Type: sdk.String, Description: `With target or target_gtid: the command that fetches one archived binlog file, run with sh: %f is the file's name, %p where to put it; exit status 1 says the archive holds no such file (the end of the binlog). E.g. "pipe binlog fetch /etc/pipe/maria.hcl %f %p".`},
			{Name: "server_command", Type: sdk.String, Description: "The server program the replay starts on the restored directory. Default: mariadbd, or mysqld, on PATH or in /usr/sbin."},
			{Name: "binlog_command", Type: sdk.String, Description: "The program that reads the binlog for the replay. Default: mariadb-binlog, or mysqlbinlog, whichever is on PATH."},
			{Name: "client_command", Type: sdk.String, Description: "The client program the replay feeds the server with. Default: mariadb, or mysql, whichever is on PATH."},
			{Name: "owner", Type: sdk.String, Description: `Who owns the restored files, as "user" or "user:group" (e.g. "mysql"). Default: the data directory's owner when it exists; else, when pipe runs as root, the mysql user if there is one. Only root can give files away.`},
		},
	}
}

// Memory is what the prepare takes beside the pipeline: its buffer pool.
func (PhysicalSinkType) Memory(cfg sdk.Config, streams int) int64 {
	var c physicalSinkConfig
	if cfg.Decode(&c) != nil {
		return 0
	}
	return c.UseMemory
}

func (PhysicalSinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	var c physicalSinkConfig
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	var diags sdk.Diagnostics
	if c.DataDir == "" || !filepath.IsAbs(c.DataDir) {
		diags = append(diags, sdk.AttrError("data_directory", "data_directory is not an absolute path", `give the directory the server will start on, e.g. "/var/lib/mysql"`)...)
	}
	if c.Parallel < 1 || c.Parallel > 256 {
		diags = append(diags, sdk.AttrError("parallel", fmt.Sprintf("parallel = %d is out of range", c.Parallel), "give the number of threads, 1 to 256")...)
	}
	if c.UseMemory < 8<<20 {
		diags = append(diags, sdk.AttrError("use_memory", "invalid use_memory", `give a size of at least 8MiB, e.g. "1GiB"`)...)
	}
	uid, gid := -1, -1
	if c.Owner != "" {
		var err error
		if uid, gid, err = lookupOwner(c.Owner); err != nil {
			diags = append(diags, sdk.AttrError("owner", "invalid owner", err.Error())...)
		}
	}
	backup, d := program("backup_command", c.Backup, "mariadb-backup", "mariabackup")
	diags = append(diags, d...)
	stream, d := program("stream_command", c.Stream, "mbstream")
	diags = append(diags, d...)
	sink := &PhysicalSink{c: c, backup: backup, stream: stream, uid: uid, gid: gid, length: 1}
	switch {
	case c.Target != "" && c.GTID != "":
		diags = append(diags, sdk.AttrError("target_gtid", "target and target_gtid are both set", "recover to a time or to a transaction, not both")...)
	case c.Target != "":
		t, err := sdk.ParsePointInTime(c.Target)
		if err != nil {
			diags = append(diags, sdk.AttrError("target", "invalid target", err.Error())...)
		}
		sink.target = replayTarget{at: t}
	case c.GTID != "":
		dom, seq, err := parseGTID(c.GTID)
		if err != nil {
			diags = append(diags, sdk.AttrError("target_gtid", "invalid target_gtid", err.Error())...)
		}
		sink.target = replayTarget{gtid: c.GTID, domain: dom, seq: seq}
	}
	if sink.replays() {
		if c.Fetch == "" {
			diags = append(diags, sdk.AttrError("binlog_fetch", "no binlog_fetch", `a point-in-time restore replays the archived binlog: set binlog_fetch = "pipe binlog fetch /etc/pipe/maria.hcl %f %p"`)...)
		}
		sink.server, d = program("server_command", c.Server, "mariadbd", "mysqld", "/usr/sbin/mariadbd", "/usr/sbin/mysqld")
		diags = append(diags, d...)
		sink.binlog, d = program("binlog_command", c.Binlog, "mariadb-binlog", "mysqlbinlog")
		diags = append(diags, d...)
		sink.client, d = program("client_command", c.Client, "mariadb", "mysql")
		diags = append(diags, d...)
	}
	if diags.HasErrors() {
		return nil, diags
	}
	sink.c.DataDir = filepath.Clean(c.DataDir)
	return sink, nil
}

// lookupOwner reads "user" or "user:group".
func lookupOwner(s string) (uid, gid int, err error) {
	name, group, hasGroup := strings.Cut(s, ":")
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("no user %q on this machine", name)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	if hasGroup {
		g, err := user.LookupGroup(group)
		if err != nil {
			return 0, 0, fmt.Errorf("no group %q on this machine", group)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	return uid, gid, nil
}

// PhysicalSink extracts and prepares a physical backup, or a chain of
// them (see sdk.Composer): the runs come newest first, the full last.
type PhysicalSink struct {
	c                      physicalSinkConfig
	backup, stream         string
	server, binlog, client string // the replay's programs
	uid, gid               int    // the owner to give the files, or -1
	target                 replayTarget

	mu            sync.Mutex
	index, length int // the run being restored in its chain, 0 the newest; 1 run alone
}

var (
	_ sdk.Preparer = (*PhysicalSink)(nil)
	_ sdk.Flusher  = (*PhysicalSink)(nil)
	_ sdk.Remover  = (*PhysicalSink)(nil)
	_ sdk.Composer = (*PhysicalSink)(nil)
)

// Compose starts the restore of run index of a chain of length runs.
func (s *PhysicalSink) Compose(ctx context.Context, index, length int, runID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index != 0 && (index != s.index+1 || length != s.length) {
		return fmt.Errorf("restoring run %s, %d of a chain of %d, out of order", runID, index+1, length)
	}
	s.index, s.length = index, length
	return nil
}

// replays reports whether the restore goes on to a point in time.
func (s *PhysicalSink) replays() bool { return !s.target.at.IsZero() || s.target.gtid != "" }

// full reports whether the run being restored is the chain's full (or
// a run alone).
func (s *PhysicalSink) full() bool { return s.index == s.length-1 }

// dir is where the run being restored is extracted: the data directory
// for the full, a folder beside it for an incremental.
func (s *PhysicalSink) dir() string {
	if s.full() {
		return s.c.DataDir
	}
	return s.staged(s.index)
}

// staged is the folder incremental index of the chain is extracted to.
func (s *PhysicalSink) staged(index int) string {
	return filepath.Join(filepath.Dir(s.c.DataDir), fmt.Sprintf(".%s.pipe-incremental-%d", filepath.Base(s.c.DataDir), index))
}

// Prepare checks the run is a physical backup and, for the first run
// restored, that the data directory is absent or empty; then it makes
// the run's folder.
func (s *PhysicalSink) Prepare(ctx context.Context, objects []sdk.Object) error {
	if len(objects) != 1 || objects[0].Stream != streamPhysical {
		return fmt.Errorf("the run has no %s alone: restore a run of the mariadb_backup source", streamPhysical)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.index == 0 {
		if err := absentOrEmpty(s.c.DataDir); err != nil {
			return err
		}
		for i := 0; i < s.length-1; i++ {
			if err := os.RemoveAll(s.staged(i)); err != nil { // a crashed restore's
				return sdk.ExplainIO(err)
			}
		}
		if s.uid < 0 {
			s.uid, s.gid = defaultOwner(s.c.DataDir)
		}
	}
	// The folders above it as any a server's user may pass; the data
	// directory its owner's alone (as mariadb-install-db makes it).
	if err := os.MkdirAll(filepath.Dir(s.dir()), 0o755); err != nil {
		return fmt.Errorf("making %s: %w", filepath.Dir(s.dir()), sdk.ExplainIO(err))
	}
	if err := os.Mkdir(s.dir(), 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("making %s: %w", s.dir(), sdk.ExplainIO(err))
	}
	return nil
}

// absentOrEmpty refuses a data directory that holds anything.
func absentOrEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("reading the data directory: %w", sdk.ExplainIO(err))
	case len(entries) > 0:
		return fmt.Errorf("data directory %s is not empty (%s, …): a restore never writes over a server; give an empty or new directory", dir, entries[0].Name())
	}
	return nil
}

// defaultOwner is who gets the files when owner is not set: the data
// directory's owner, else the mysql user when pipe runs as root, else
// nobody (-1: the files stay pipe's).
func defaultOwner(dir string) (uid, gid int) {
	if fi, err := os.Stat(dir); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			return int(st.Uid), int(st.Gid)
		}
	}
	if os.Geteuid() == 0 {
		if uid, gid, err := lookupOwner("mysql"); err == nil {
			return uid, gid
		}
	}
	return -1, -1
}

// Create extracts the stream as it arrives.
func (s *PhysicalSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	if obj.Stream != streamPhysical {
		return nil, fmt.Errorf("stream %q is not a physical backup's %s", obj.Stream, streamPhysical)
	}
	s.mu.Lock()
	dir := s.dir()
	s.mu.Unlock()
	w, err := command.Write(ctx, command.Spec{Argv: []string{s.stream, "-x", "-C", dir, "--parallel=" + strconv.FormatInt(s.c.Parallel, 10)}})
	if err != nil {
		return nil, err
	}
	return &extractObject{Writer: w, dir: dir}, nil
}

// extractObject is mbstream's input; aborted, it leaves its folder
// empty.
type extractObject struct {
	*command.Writer
	dir string
}

func (w *extractObject) Abort(ctx context.Context) error {
	return errors.Join(w.Writer.Abort(ctx), untar.EmptyDir(w.dir))
}

// Remove takes back what the restore wrote when a run failed after its
// object was committed: the data directory is empty again, and no
// incremental's folder is left.
func (s *PhysicalSink) Remove(ctx context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.undo()
}

func (s *PhysicalSink) undo() error {
	errs := []error{untar.EmptyDir(s.c.DataDir)}
	for i := 0; i < s.length-1; i++ {
		errs = append(errs, os.RemoveAll(s.staged(i)))
	}
	return errors.Join(errs...)
}

// Flush, after the chain's full (or a run alone), prepares the data
// directory and applies each incremental, oldest first.
func (s *PhysicalSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full() {
		return nil
	}
	err := s.prepare(ctx)
	if err != nil {
		return errors.Join(err, s.undo())
	}
	return nil
}

func (s *PhysicalSink) prepare(ctx context.Context) error {
	points, err := readInfo(s.c.DataDir, "checkpoints")
	if err != nil {
		return fmt.Errorf("the restored backup: %w", err)
	}
	if points["backup_type"] != "full-backuped" {
		return fmt.Errorf("the run is an incremental backup (%s) restored without the runs it builds on: restore it through pipe's catalog (a source with the pipeline's prefix), which applies its chain", points["backup_type"])
	}
	// Each incremental must start where the one before it ended: a
	// chain with a gap would prepare into a broken server.
	to := points["to_lsn"]
	for i := s.length - 2; i >= 0; i-- {
		inc, err := readInfo(s.staged(i), "checkpoints")
		if err != nil {
			return fmt.Errorf("incremental %d of the chain: %w", s.length-1-i, err)
		}
		if inc["backup_type"] != "incremental" || inc["from_lsn"] != to {
			return fmt.Errorf("incremental %d of the chain starts at log position %s, and the run before it ends at %s: the chain is broken; restore an older run", s.length-1-i, inc["from_lsn"], to)
		}
		to = inc["to_lsn"]
	}
	run := func(more ...string) error {
		argv := append([]string{s.backup, "--prepare", "--target-dir=" + s.c.DataDir, "--use-memory=" + strconv.FormatInt(s.c.UseMemory, 10)}, more...)
		return command.New(ctx, command.Spec{Argv: argv}).Run()
	}
	if err := run(); err != nil {
		return fmt.Errorf("preparing the restored backup: %w", err)
	}
	for i := s.length - 2; i >= 0; i-- {
		if err := run("--incremental-dir=" + s.staged(i)); err != nil {
			return fmt.Errorf("applying incremental %d of the chain: %w", s.length-1-i, err)
		}
		if err := os.RemoveAll(s.staged(i)); err != nil {
			return sdk.ExplainIO(err)
		}
	}
	// The files are the owner's before a replay's server (which runs as
	// the owner, and writes its own files so) opens them.
	if s.uid >= 0 {
		if err := chownTree(s.c.DataDir, s.uid, s.gid); err != nil {
			return err
		}
	}
	if s.replays() {
		if err := s.replay(ctx); err != nil {
			return err
		}
	}
	if err := removeBackupFiles(s.c.DataDir); err != nil {
		return err
	}
	return errors.Join(untar.SyncTree(s.c.DataDir), untar.SyncDir(filepath.Dir(s.c.DataDir)))
}

// removeBackupFiles removes what mariadb-backup keeps beside the tables
// and a server has no use for, as its --copy-back leaves them behind.
func removeBackupFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return sdk.ExplainIO(err)
	}
	for _, e := range entries {
		n := e.Name()
		if n == "backup-my.cnf" || strings.HasPrefix(n, "xtrabackup_") || strings.HasPrefix(n, "mariadb_backup_") {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return sdk.ExplainIO(err)
			}
		}
	}
	return nil
}

// chownTree gives dir and everything in it to uid and gid.
func chownTree(dir string, uid, gid int) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("giving the restored files to uid %d, gid %d: %w (only root can; set owner, or run as root)", uid, gid, sdk.ExplainIO(err))
	}
	return nil
}
