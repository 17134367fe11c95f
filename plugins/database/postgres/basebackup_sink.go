package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/pipebackup/pipe/plugins/internal/untar"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// pgControl is the file without which PostgreSQL does not start: a
// restore writes it under heldControl and renames it into place last, so a
// data directory restored in part can never be started.
const (
	pgControl   = "global/pg_control"
	heldControl = "global/pg_control.pipe-partial"
)

type baseSinkConfig struct {
	DataDirectory  string `pipe:"data_directory"`
	RestoreCommand string `pipe:"restore_command"`
	TargetTime     string `pipe:"recovery_target_time"`
	TargetLSN      string `pipe:"recovery_target_lsn"`
	TargetXID      string `pipe:"recovery_target_xid"`
	TargetName     string `pipe:"recovery_target_name"`
	Target         string `pipe:"recovery_target"`
	Action         string `pipe:"recovery_target_action"`
	Timeline       string `pipe:"recovery_target_timeline"`
	Inclusive      bool   `pipe:"recovery_target_inclusive"`
}

// BaseSinkType is the "postgres_basebackup" sink.
type BaseSinkType struct{}

var _ sdk.SinkType = BaseSinkType{}

func (BaseSinkType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Restores a base backup (the postgres_basebackup source's) into an empty data directory, extracting its archives in parallel as they arrive (tablespaces inside the data directory, under pg_tblspc/<oid>), and writes the recovery settings: restore_command and the recovery target. Starting PostgreSQL on the directory then replays the archived WAL up to the target. global/pg_control is put in place last, so a restore that fails leaves a directory PostgreSQL refuses to start (and that pipe empties).",
		Attributes: []sdk.Attribute{
			{Name: "data_directory", Type: sdk.String, Required: true, Description: "The data directory to restore into: absent or empty (a restore never writes over a cluster). Created with mode 0700."},
			{Name: "restore_command", Type: sdk.String, Required: true, Description: `What PostgreSQL runs to fetch archived WAL, written to postgresql.auto.conf: "pipe wal fetch /etc/pipe/pg.hcl %f %p" with the file whose archive block the server pushed to.`},
			{Name: "recovery_target_time", Type: sdk.String, Target: true, Description: `Recover to this moment ("2026-11-26 10:00:00+00"; the time zone is required) instead of the end of the archive. Unless the source names a run, the newest backup that finished before it is restored; a run named (run, before, --run, --before) that finished after it is refused.`},
			{Name: "recovery_target_lsn", Type: sdk.String, Target: true, Description: `Recover to this WAL position ("0/3000060"). Unless the source names a run, the newest backup that ended (stop_lsn) at or before it is restored; a run named that ended after it is refused.`},
			{Name: "recovery_target_xid", Type: sdk.String, Description: "Recover to the commit of this transaction id."},
			{Name: "recovery_target_name", Type: sdk.String, Description: "Recover to this restore point (pg_create_restore_point)."},
			{Name: "recovery_target", Type: sdk.String, Description: `"immediate": stop as soon as the backup is consistent.`},
			{Name: "recovery_target_action", Type: sdk.String, Description: `What the server does at the target: "pause" (PostgreSQL's default: wait, read-only, for pg_wal_replay_resume()), "promote" (open for writes on a new timeline) or "shutdown". Without a target, recovery replays the whole archive and promotes.`},
			{Name: "recovery_target_timeline", Type: sdk.String, Default: "latest", Description: `The timeline to follow: "latest" (through promotions, as their .history files in the archive say), "current", or a number.`},
			{Name: "recovery_target_inclusive", Type: sdk.Bool, Default: true, Description: "Stop just after the target (true) or just before it (false); for time, xid and lsn targets."},
		},
	}
}

var (
	lsnRE = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`)
	xidRE = regexp.MustCompile(`^[0-9]{1,20}$`)
)

func (BaseSinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	var c baseSinkConfig
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	dir, err := filepath.Abs(c.DataDirectory)
	if err != nil {
		return nil, sdk.AttrError("data_directory", "invalid data_directory", err.Error())
	}
	c.DataDirectory = dir
	if !strings.Contains(c.RestoreCommand, "%f") || !strings.Contains(c.RestoreCommand, "%p") {
		return nil, sdk.AttrError("restore_command", "invalid restore_command", `it must name the file PostgreSQL asks for (%f) and where it goes (%p): "pipe wal fetch /etc/pipe/pg.hcl %f %p"`)
	}
	targets := 0
	for _, t := range []string{c.TargetTime, c.TargetLSN, c.TargetXID, c.TargetName, c.Target} {
		if t != "" {
			targets++
		}
	}
	if targets > 1 {
		return nil, sdk.AttrError("", "several recovery targets", "give at most one of recovery_target_time, recovery_target_lsn, recovery_target_xid, recovery_target_name and recovery_target: PostgreSQL stops at one")
	}
	if c.TargetTime != "" {
		if _, err := sdk.ParsePointInTime(c.TargetTime); err != nil {
			return nil, sdk.AttrError("recovery_target_time", "invalid recovery_target_time", err.Error())
		}
	}
	if c.TargetLSN != "" && !lsnRE.MatchString(c.TargetLSN) {
		return nil, sdk.AttrError("recovery_target_lsn", "invalid recovery_target_lsn", fmt.Sprintf("%q is not a WAL position such as 0/3000060", c.TargetLSN))
	}
	if c.TargetXID != "" && !xidRE.MatchString(c.TargetXID) {
		return nil, sdk.AttrError("recovery_target_xid", "invalid recovery_target_xid", fmt.Sprintf("%q is not a transaction id (a number)", c.TargetXID))
	}
	if c.Target != "" && c.Target != "immediate" {
		return nil, sdk.AttrError("recovery_target", "invalid recovery_target", fmt.Sprintf(`%q: the only value is "immediate"`, c.Target))
	}
	switch c.Action {
	case "", "pause", "promote", "shutdown":
	default:
		return nil, sdk.AttrError("recovery_target_action", "invalid recovery_target_action", fmt.Sprintf(`%q: use "pause", "promote" or "shutdown"`, c.Action))
	}
	if c.Action != "" && targets == 0 {
		return nil, sdk.AttrError("recovery_target_action", "recovery_target_action without a target", "without a recovery target the server replays the whole archive and promotes: name a target or remove recovery_target_action")
	}
	if c.Timeline != "latest" && c.Timeline != "current" && !xidRE.MatchString(c.Timeline) {
		return nil, sdk.AttrError("recovery_target_timeline", "invalid recovery_target_timeline", fmt.Sprintf(`%q: use "latest", "current" or a timeline number`, c.Timeline))
	}
	return &BaseSink{c: c}, nil
}

// BaseSink restores a base backup into a data directory.
type BaseSink struct {
	c baseSinkConfig
}

var (
	_ sdk.Preparer = (*BaseSink)(nil)
	_ sdk.Flusher  = (*BaseSink)(nil)
)

// Prepare checks the run is a base backup and the data directory is
// absent or empty, and makes it.
func (s *BaseSink) Prepare(ctx context.Context, objects []sdk.Object) error {
	base := false
	for _, o := range objects {
		if _, err := area(o.Stream); err != nil {
			return err
		}
		base = base || o.Stream == streamBase
	}
	if !base {
		return errors.New("the run has no base.tar: restore a run of the postgres_basebackup source")
	}
	entries, err := os.ReadDir(s.c.DataDirectory)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(s.c.DataDirectory, 0o700); err != nil {
			return fmt.Errorf("making the data directory: %w", sdk.ExplainIO(err))
		}
	case err != nil:
		return fmt.Errorf("reading the data directory: %w", sdk.ExplainIO(err))
	case len(entries) > 0:
		return fmt.Errorf("data directory %s is not empty (%s, …): a restore never writes over a cluster; give an empty or new directory", s.c.DataDirectory, entries[0].Name())
	}
	return os.Chmod(s.c.DataDirectory, 0o700)
}

// area is where a stream of a base backup goes in the data directory.
func area(stream string) (string, error) {
	switch {
	case stream == streamBase:
		return ".", nil
	case stream == streamManifest:
		return streamManifest, nil
	case strings.HasSuffix(stream, tablespaceExt) && xidRE.MatchString(strings.TrimSuffix(stream, tablespaceExt)):
		return filepath.Join("pg_tblspc", strings.TrimSuffix(stream, tablespaceExt)), nil
	}
	return "", fmt.Errorf("stream %q is not part of a base backup (base.tar, <oid>.tar, backup_manifest): restore a run of the postgres_basebackup source", stream)
}

func (s *BaseSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	rel, err := area(obj.Stream)
	if err != nil {
		return nil, err
	}
	if obj.Stream == streamManifest {
		f, err := os.OpenFile(filepath.Join(s.c.DataDirectory, rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, sdk.ExplainIO(err)
		}
		return &manifestWriter{f: f, s: s}, nil
	}
	dir := filepath.Join(s.c.DataDirectory, rel)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, sdk.ExplainIO(err)
	}
	var rename func(string) string
	if obj.Stream == streamBase {
		rename = func(name string) string {
			if filepath.ToSlash(filepath.Clean(name)) == pgControl {
				return heldControl
			}
			return name
		}
	}
	x, err := untar.NewWriter(dir, rename)
	if err != nil {
		return nil, err
	}
	return &extractWriter{s: s, rel: rel, x: x}, nil
}

// extractWriter extracts one archive of the backup as it arrives.
type extractWriter struct {
	s   *BaseSink
	rel string
	x   *untar.Writer
}

func (w *extractWriter) Write(p []byte) (int, error) {
	n, err := w.x.Write(p)
	if err != nil {
		return n, fmt.Errorf("extracting into %s: %w", filepath.Join(w.s.c.DataDirectory, w.rel), sdk.ExplainIO(err))
	}
	return n, nil
}

func (w *extractWriter) Commit(ctx context.Context) error {
	if err := w.x.Close(); err != nil {
		return fmt.Errorf("extracting into %s: %w", filepath.Join(w.s.c.DataDirectory, w.rel), sdk.ExplainIO(err))
	}
	return untar.SyncTree(filepath.Join(w.s.c.DataDirectory, w.rel))
}

// Abort removes what the archive put in the data directory: a failed run
// leaves it empty again.
func (w *extractWriter) Abort(ctx context.Context) error {
	w.x.Abort()
	return w.s.empty(w.rel)
}

// empty removes an area of the data directory; the data directory's own
// area keeps the tablespaces (their archives abort on their own).
func (s *BaseSink) empty(rel string) error {
	dir := filepath.Join(s.c.DataDirectory, rel)
	if rel != "." {
		return os.RemoveAll(dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Name() == "pg_tblspc" {
			continue
		}
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

type manifestWriter struct {
	f *os.File
	s *BaseSink
}

func (w *manifestWriter) Write(p []byte) (int, error) { return w.f.Write(p) }

func (w *manifestWriter) Commit(ctx context.Context) error {
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (w *manifestWriter) Abort(ctx context.Context) error {
	w.f.Close()
	return os.Remove(w.f.Name())
}

// Flush, after the last archive, writes the recovery settings and puts
// pg_control in place: only now can PostgreSQL start on the directory.
func (s *BaseSink) Flush(ctx context.Context) error {
	dd := s.c.DataDirectory
	if _, err := os.Stat(filepath.Join(dd, heldControl)); err != nil {
		return fmt.Errorf("the restored base.tar has no %s: %w", pgControl, err)
	}
	// Tablespaces were restored inside the data directory; their map
	// would have the server put links to their old places over them. An
	// empty map (no tablespaces) stays: the backup's manifest names it.
	if fi, err := os.Stat(filepath.Join(dd, "tablespace_map")); err == nil && fi.Size() > 0 {
		if err := os.Remove(filepath.Join(dd, "tablespace_map")); err != nil {
			return err
		}
	}
	conf, err := os.OpenFile(filepath.Join(dd, "postgresql.auto.conf"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return sdk.ExplainIO(err)
	}
	_, err = conf.WriteString(s.recoverySettings())
	if err == nil {
		err = conf.Sync()
	}
	if cerr := conf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the recovery settings: %w", sdk.ExplainIO(err))
	}
	signal, err := os.OpenFile(filepath.Join(dd, "recovery.signal"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return sdk.ExplainIO(err)
	}
	if err := errors.Join(signal.Sync(), signal.Close()); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dd, heldControl), filepath.Join(dd, pgControl)); err != nil {
		return err
	}
	return errors.Join(untar.SyncDir(filepath.Join(dd, "global")), untar.SyncDir(dd))
}

// recoverySettings are the lines appended to postgresql.auto.conf.
func (s *BaseSink) recoverySettings() string {
	c := s.c
	var b strings.Builder
	b.WriteString("\n# Recovery settings written by pipe's restore of a base backup.\n")
	set := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(v, "'", "''"))
		}
	}
	set("restore_command", c.RestoreCommand)
	set("recovery_target_time", c.TargetTime)
	set("recovery_target_lsn", c.TargetLSN)
	set("recovery_target_xid", c.TargetXID)
	set("recovery_target_name", c.TargetName)
	set("recovery_target", c.Target)
	set("recovery_target_action", c.Action)
	set("recovery_target_timeline", c.Timeline)
	if !c.Inclusive {
		set("recovery_target_inclusive", "off")
	}
	return b.String()
}
