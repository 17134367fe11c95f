package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

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
	ArchiveMode    string `pipe:"archive_mode"`
	// TablespaceMap sends a tablespace (by OID) to a directory of its
	// own; TablespaceMapAll receives the others, each as <oid>.
	TablespaceMap    map[string]string `pipe:"tablespace_map"`
	TablespaceMapAll string            `pipe:"tablespace_map_all"`
}

// The values of archive_mode: "off" writes archive_mode = 'off' with the
// recovery settings, so a restored server never archives into the
// source's archive; "preserve" leaves the source's setting.
const (
	archiveOff      = "off"
	archivePreserve = "preserve"
)

// tablespacesSuffix names the default folder of the tablespaces, next to
// the data directory: /var/lib/postgresql/15/main_tablespaces/<oid>.
const tablespacesSuffix = "_tablespaces"

// BaseSinkType is the "postgres_basebackup" sink.
type BaseSinkType struct{}

var _ sdk.SinkType = BaseSinkType{}

func (BaseSinkType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Restores a base backup (the postgres_basebackup source's) into an empty data directory, extracting its archives in parallel as they arrive (each tablespace into a directory of its own outside the data directory, linked from pg_tblspc/<oid> as PostgreSQL requires), and writes the recovery settings: restore_command, the recovery target, and archive_mode = 'off' unless told to keep the source's. Starting PostgreSQL on the directory then replays the archived WAL up to the target. global/pg_control is put in place last, so a restore that fails leaves a directory PostgreSQL refuses to start (and that pipe empties).",
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
			{Name: "tablespace_map_all", Type: sdk.String, Description: `The folder that receives each tablespace as <folder>/<oid> (pg_tblspc/<oid> links to it); default: the data directory's path followed by "_tablespaces" (/var/lib/postgresql/15/main_tablespaces/16385). Never the original locations: they may belong to the server backed up.`},
			{Name: "tablespace_map", Type: sdk.StringMap, Description: `A directory for some tablespaces, by OID: { "16385" = "/mnt/fast/ts" }; the others go to tablespace_map_all. pipe backups show lists a run's tablespaces with their original locations (tablespace_<oid>). Each directory, like the data directory, must be absent or empty, and is created with mode 0700.`},
			{Name: "archive_mode", Type: sdk.String, Default: archiveOff, Description: `"off" writes archive_mode = 'off' with the recovery settings, so the restored server never archives into the archive of the server backed up (a test restore that promotes would push a new timeline there, which later recoveries along "latest" follow). "preserve" keeps the source's archive_mode and archive_command: for a restore that replaces the server.`},
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
	if d := c.checkRecovery(); d != nil {
		return nil, d
	}
	switch c.ArchiveMode {
	case archiveOff, archivePreserve:
	default:
		return nil, sdk.AttrError("archive_mode", "invalid archive_mode", fmt.Sprintf(`%q: use "off" (the restored server does not archive) or "preserve" (it keeps the source's archive_mode and archive_command)`, c.ArchiveMode))
	}
	if d := c.placeTablespaces(); d != nil {
		return nil, d
	}
	return &BaseSink{c: c, made: map[string]bool{}, claimed: map[string]bool{}}, nil
}

// checkRecovery checks the recovery settings: at most one target, in the
// form PostgreSQL reads, an action only with a target, and the timeline.
func (c *baseSinkConfig) checkRecovery() sdk.Diagnostics {
	targets := 0
	for _, t := range []string{c.TargetTime, c.TargetLSN, c.TargetXID, c.TargetName, c.Target} {
		if t != "" {
			targets++
		}
	}
	if targets > 1 {
		return sdk.AttrError("", "several recovery targets", "give at most one of recovery_target_time, recovery_target_lsn, recovery_target_xid, recovery_target_name and recovery_target: PostgreSQL stops at one")
	}
	if c.TargetTime != "" {
		if _, err := sdk.ParsePointInTime(c.TargetTime); err != nil {
			return sdk.AttrError("recovery_target_time", "invalid recovery_target_time", err.Error())
		}
	}
	if c.TargetLSN != "" && !lsnRE.MatchString(c.TargetLSN) {
		return sdk.AttrError("recovery_target_lsn", "invalid recovery_target_lsn", fmt.Sprintf("%q is not a WAL position such as 0/3000060", c.TargetLSN))
	}
	if c.TargetXID != "" && !xidRE.MatchString(c.TargetXID) {
		return sdk.AttrError("recovery_target_xid", "invalid recovery_target_xid", fmt.Sprintf("%q is not a transaction id (a number)", c.TargetXID))
	}
	if c.Target != "" && c.Target != "immediate" {
		return sdk.AttrError("recovery_target", "invalid recovery_target", fmt.Sprintf(`%q: the only value is "immediate"`, c.Target))
	}
	switch c.Action {
	case "", "pause", "promote", "shutdown":
	default:
		return sdk.AttrError("recovery_target_action", "invalid recovery_target_action", fmt.Sprintf(`%q: use "pause", "promote" or "shutdown"`, c.Action))
	}
	if c.Action != "" && targets == 0 {
		return sdk.AttrError("recovery_target_action", "recovery_target_action without a target", "without a recovery target the server replays the whole archive and promotes: name a target or remove recovery_target_action")
	}
	if c.Timeline != "latest" && c.Timeline != "current" && !xidRE.MatchString(c.Timeline) {
		return sdk.AttrError("recovery_target_timeline", "invalid recovery_target_timeline", fmt.Sprintf(`%q: use "latest", "current" or a timeline number`, c.Timeline))
	}
	return nil
}

// placeTablespaces makes the tablespaces' directories absolute
// (tablespace_map_all defaults to the data directory's path followed by
// "_tablespaces") and refuses those that overlap the data directory or
// one another.
func (c *baseSinkConfig) placeTablespaces() sdk.Diagnostics {
	var err error
	if c.TablespaceMapAll == "" {
		c.TablespaceMapAll = filepath.Clean(c.DataDirectory) + tablespacesSuffix
	}
	if c.TablespaceMapAll, err = filepath.Abs(c.TablespaceMapAll); err != nil {
		return sdk.AttrError("tablespace_map_all", "invalid tablespace_map_all", err.Error())
	}
	if within(c.TablespaceMapAll, c.DataDirectory) {
		return sdk.AttrError("tablespace_map_all", "tablespace_map_all inside the data directory", fmt.Sprintf("%s is inside the data directory %s: PostgreSQL wants tablespaces outside it, linked from pg_tblspc; give a folder outside it", c.TablespaceMapAll, c.DataDirectory))
	}
	spaces := map[string]string{}
	for oid, dir := range c.TablespaceMap {
		if !oidRE.MatchString(oid) {
			return sdk.AttrError("tablespace_map", "invalid tablespace_map", fmt.Sprintf("%q is not a tablespace OID (a number such as 16385): pipe backups show lists a run's tablespaces as tablespace_<oid> = <original location>", oid))
		}
		if dir == "" {
			return sdk.AttrError("tablespace_map", "invalid tablespace_map", fmt.Sprintf("tablespace %s: give the directory it is restored into", oid))
		}
		if spaces[oid], err = filepath.Abs(dir); err != nil {
			return sdk.AttrError("tablespace_map", "invalid tablespace_map", err.Error())
		}
	}
	c.TablespaceMap = spaces
	if err := c.checkPlaces(spaces); err != nil {
		return sdk.AttrError("tablespace_map", "invalid tablespace_map", err.Error())
	}
	return nil
}

// oidRE matches an object id as PostgreSQL prints it.
var oidRE = regexp.MustCompile(`^[1-9][0-9]{0,9}$`)

// within reports whether path p is dir or lies inside it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// checkPlaces refuses tablespace directories (by OID) that would hold
// the data directory or lie inside it, or that share or nest in one
// another: each tablespace needs a directory of its own.
func (c baseSinkConfig) checkPlaces(spaces map[string]string) error {
	oids := slices.Sorted(maps.Keys(spaces))
	for i, oid := range oids {
		dir := spaces[oid]
		if within(dir, c.DataDirectory) || within(c.DataDirectory, dir) {
			return fmt.Errorf("tablespace %s would go to %s, which overlaps the data directory %s: PostgreSQL wants tablespaces outside it, linked from pg_tblspc; give a directory outside it", oid, dir, c.DataDirectory)
		}
		for _, other := range oids[i+1:] {
			if within(dir, spaces[other]) || within(spaces[other], dir) {
				return fmt.Errorf("tablespaces %s and %s would go to %s and %s: give each a directory of its own, apart from the other", oid, other, dir, spaces[other])
			}
		}
	}
	return nil
}

// BaseSink restores a base backup into a data directory, and its
// tablespaces into directories of their own.
type BaseSink struct {
	c baseSinkConfig

	mu sync.Mutex
	// spaces is where each tablespace of the run goes, by OID (Prepare).
	spaces map[string]string
	// made are the tablespace directories, and the folders above them,
	// that the restore created: taking an archive back removes them.
	made map[string]bool
	// claimed are the tablespaces whose directory the restore found
	// empty and writes into: taking one back empties it.
	claimed map[string]bool
	// chain, while the sink restores a chain of runs (Compose), is what
	// it composed so far.
	chain *composer
}

var (
	_ sdk.Preparer = (*BaseSink)(nil)
	_ sdk.Flusher  = (*BaseSink)(nil)
	_ sdk.Remover  = (*BaseSink)(nil)
	_ sdk.Composer = (*BaseSink)(nil)
)

// Compose starts the restore of run index of a chain of length runs,
// newest first (see sdk.Composer): the newest run's files are the
// result's, each incremental file the start of a file the older runs
// fill in, block by block, each block written once.
func (s *BaseSink) Compose(ctx context.Context, index, length int, runID string) error {
	switch {
	case index == 0:
		s.chain = &composer{length: length, pending: map[string]*rebuilt{}, rebuilt: map[string]string{}, sums: map[string]fileSum{}}
	case s.chain == nil || index != s.chain.index+1 || length != s.chain.length:
		return fmt.Errorf("restoring run %s, %d of a chain of %d, out of order", runID, index+1, length)
	case index == 1:
		// The newest run's manifest is in place: its files' checksums are
		// taken as the full fills them in.
		s.chain.algorithm = manifestAlgorithm(filepath.Join(s.c.DataDirectory, streamManifest))
	}
	s.chain.index, s.chain.runID = index, runID
	return nil
}

// older reports whether the sink restores a run of a chain older than
// its newest: one that only fills in blocks.
func (s *BaseSink) older() bool { return s.chain != nil && !s.chain.newest() }

// Prepare checks the run is a base backup and that the data directory
// and every tablespace's directory are absent or empty, before it writes
// anything; then it makes the data directory.
func (s *BaseSink) Prepare(ctx context.Context, objects []sdk.Object) error {
	base := false
	var oids []string
	for _, o := range objects {
		if _, err := area(o.Stream); err != nil {
			return err
		}
		base = base || o.Stream == streamBase
		if oid, ok := tablespaceOID(o.Stream); ok {
			oids = append(oids, oid)
		}
	}
	if !base {
		return errors.New("the run has no base.tar: restore a run of the postgres_basebackup source")
	}
	if s.older() {
		return nil // the newest run of the chain made the directories
	}
	spaces, err := s.c.places(oids)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(s.c.DataDirectory)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading the data directory: %w", sdk.ExplainIO(err))
	case len(entries) > 0:
		return fmt.Errorf("data directory %s is not empty (%s, …): a restore never writes over a cluster; give an empty or new directory", s.c.DataDirectory, entries[0].Name())
	}
	for _, oid := range slices.Sorted(maps.Keys(spaces)) {
		if err := absentOrEmpty(oid, spaces[oid]); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.spaces = spaces
	s.mu.Unlock()
	if err := os.MkdirAll(s.c.DataDirectory, 0o700); err != nil {
		return fmt.Errorf("making the data directory: %w", sdk.ExplainIO(err))
	}
	return os.Chmod(s.c.DataDirectory, 0o700)
}

// places says where each tablespace of the run goes: tablespace_map's
// directory, or <tablespace_map_all>/<oid>.
func (c baseSinkConfig) places(oids []string) (map[string]string, error) {
	spaces := map[string]string{}
	for _, oid := range oids {
		spaces[oid] = filepath.Join(c.TablespaceMapAll, oid)
	}
	for _, oid := range slices.Sorted(maps.Keys(c.TablespaceMap)) {
		if _, ok := spaces[oid]; !ok {
			holds := "none"
			if len(oids) > 0 {
				holds = strings.Join(slices.Sorted(slices.Values(oids)), ", ")
			}
			return nil, fmt.Errorf("tablespace_map names tablespace %s, which the run does not hold (its tablespaces: %s): pipe backups show lists them as tablespace_<oid> = <original location>; fix or remove the entry", oid, holds)
		}
		spaces[oid] = c.TablespaceMap[oid]
	}
	if err := c.checkPlaces(spaces); err != nil {
		return nil, err
	}
	return spaces, nil
}

// absentOrEmpty refuses a tablespace directory that holds anything.
func absentOrEmpty(oid, dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("reading the directory of tablespace %s: %w", oid, sdk.ExplainIO(err))
	case len(entries) > 0:
		return fmt.Errorf("the directory of tablespace %s, %s, is not empty (%s, …): a restore never writes over anything; give an empty or new directory (tablespace_map_all for all, or tablespace_map = { %q = \"…\" })", oid, dir, entries[0].Name(), oid)
	}
	return nil
}

// tablespaceOID is the OID of a tablespace's archive, <oid>.tar.
func tablespaceOID(stream string) (string, bool) {
	oid, ok := strings.CutSuffix(stream, tablespaceExt)
	return oid, ok && stream != streamBase && oidRE.MatchString(oid)
}

// area is where a stream of a base backup goes in the data directory;
// a tablespace's archive goes outside it ("").
func area(stream string) (string, error) {
	switch stream {
	case streamBase:
		return ".", nil
	case streamManifest:
		return streamManifest, nil
	}
	if _, ok := tablespaceOID(stream); ok {
		return "", nil
	}
	return "", fmt.Errorf("stream %q is not part of a base backup (base.tar, <oid>.tar, backup_manifest): restore a run of the postgres_basebackup source", stream)
}

func (s *BaseSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	rel, err := area(obj.Stream)
	if err != nil {
		return nil, err
	}
	if s.older() {
		return s.createOlder(obj)
	}
	if oid, ok := tablespaceOID(obj.Stream); ok {
		dir, err := s.makeTablespace(oid)
		if err != nil {
			return nil, err
		}
		x, err := untar.NewWriterHook(dir, nil, s.hook(dir, "pg_tblspc/"+oid+"/"))
		if err != nil {
			return nil, errors.Join(err, s.undoTablespace(oid))
		}
		return &extractWriter{dir: dir, x: x, sync: s.chain == nil, undo: func() error { return s.undoTablespace(oid) }}, nil
	}
	if obj.Stream == streamManifest {
		f, err := os.OpenFile(filepath.Join(s.c.DataDirectory, rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, sdk.ExplainIO(err)
		}
		return &manifestWriter{f: f, s: s}, nil
	}
	dir := s.c.DataDirectory
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, sdk.ExplainIO(err)
	}
	rename := func(name string) string {
		if filepath.ToSlash(filepath.Clean(name)) == pgControl {
			return heldControl
		}
		return name
	}
	x, err := untar.NewWriterHook(dir, rename, s.hook(dir, ""))
	if err != nil {
		return nil, err
	}
	return &extractWriter{dir: dir, x: x, sync: s.chain == nil, undo: func() error { return s.empty() }}, nil
}

// hook is the extraction hook of an archive going to dir, whose files the
// backup's manifest names with prefix: a chain's (see composer.hook), or
// none.
func (s *BaseSink) hook(dir, prefix string) untar.Hook {
	if s.chain == nil {
		return nil
	}
	return s.chain.hook(dir, prefix)
}

// createOlder takes an archive of a chain's run older than the newest:
// it only fills in the blocks the files rebuilt still lack. Its manifest,
// and a tablespace the newest run does not hold (dropped since), go
// nowhere.
func (s *BaseSink) createOlder(obj sdk.Object) (sdk.ObjectWriter, error) {
	dir := s.c.DataDirectory
	prefix := ""
	if oid, ok := tablespaceOID(obj.Stream); ok {
		s.mu.Lock()
		dir, ok = s.spaces[oid]
		s.mu.Unlock()
		if !ok {
			return discard{}, nil
		}
		prefix = "pg_tblspc/" + oid + "/"
	} else if obj.Stream == streamManifest {
		return discard{}, nil
	}
	x, err := untar.NewWriterHook(dir, nil, s.hook(dir, prefix))
	if err != nil {
		return nil, err
	}
	// Taking it back is the whole chain's: the host empties what the
	// newest run put in place.
	return &extractWriter{dir: dir, x: x, undo: func() error { return nil }}, nil
}

// makeTablespace makes the directory tablespace oid is extracted into
// (mode 0700), and the folders above it that are missing, noting what it
// made.
func (s *BaseSink) makeTablespace(oid string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir, ok := s.spaces[oid]
	if !ok { // a host that did not prepare
		if s.spaces == nil {
			s.spaces = map[string]string{}
		}
		dir = filepath.Join(s.c.TablespaceMapAll, oid)
		if err := errors.Join(s.c.checkPlaces(map[string]string{oid: dir}), absentOrEmpty(oid, dir)); err != nil {
			return "", err
		}
		s.spaces[oid] = dir
	}
	var missing []string
	undo := func(err error) (string, error) {
		for _, p := range missing { // deepest first; only while empty
			if s.made[p] && os.Remove(p) == nil {
				delete(s.made, p)
			}
		}
		return "", err
	}
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil || filepath.Dir(p) == p {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("making the directory of tablespace %s: %w", oid, sdk.ExplainIO(err))
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o700); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue
			}
			return undo(fmt.Errorf("making the directory of tablespace %s: %w", oid, sdk.ExplainIO(err)))
		}
		s.made[missing[i]] = true
	}
	// Prepare found it absent or empty; it must still be.
	if err := absentOrEmpty(oid, dir); err != nil {
		return undo(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return undo(fmt.Errorf("making the directory of tablespace %s: %w", oid, sdk.ExplainIO(err)))
	}
	s.claimed[oid] = true
	return dir, nil
}

// undoTablespace takes back what the restore of tablespace oid made: its
// link in pg_tblspc, its files, and the directories it created (a
// directory that was there, empty, is left empty).
func (s *BaseSink) undoTablespace(oid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := s.spaces[oid]
	if !s.claimed[oid] {
		return nil
	}
	delete(s.claimed, oid)
	var errs []error
	link := filepath.Join(s.c.DataDirectory, "pg_tblspc", oid)
	if fi, err := os.Lstat(link); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		errs = append(errs, os.Remove(link))
	}
	if s.made[dir] {
		errs = append(errs, os.RemoveAll(dir))
		delete(s.made, dir)
	} else {
		errs = append(errs, untar.EmptyDir(dir))
	}
	// The folders made above it, unless another tablespace is in them.
	for p := filepath.Dir(dir); s.made[p]; p = filepath.Dir(p) {
		if os.Remove(p) != nil {
			break
		}
		delete(s.made, p)
	}
	return errors.Join(errs...)
}

// extractWriter extracts one archive of the backup as it arrives.
type extractWriter struct {
	dir string
	x   *untar.Writer
	// sync makes Commit sync what it extracted (a chain's restore syncs
	// everything once, at its end).
	sync bool
	undo func() error
}

func (w *extractWriter) Write(p []byte) (int, error) {
	n, err := w.x.Write(p)
	if err != nil {
		return n, fmt.Errorf("extracting into %s: %w", w.dir, sdk.ExplainIO(err))
	}
	return n, nil
}

func (w *extractWriter) Commit(ctx context.Context) error {
	if err := w.x.Close(); err != nil {
		return fmt.Errorf("extracting into %s: %w", w.dir, sdk.ExplainIO(err))
	}
	if !w.sync {
		return nil
	}
	return errors.Join(untar.SyncTree(w.dir), untar.SyncDir(filepath.Dir(w.dir)))
}

// Abort removes what the archive put in place: a failed run leaves the
// data directory empty again, and no tablespace directory it made.
func (w *extractWriter) Abort(ctx context.Context) error {
	w.x.Abort()
	return w.undo()
}

// empty removes everything in the data directory (the links in
// pg_tblspc, not what they point to: the tablespaces' archives take
// their own back).
func (s *BaseSink) empty() error { return untar.EmptyDir(s.c.DataDirectory) }

// Remove takes back an archive of a run that failed after it was
// committed (another archive, or the flush, failed): the restore leaves
// nothing behind.
func (s *BaseSink) Remove(ctx context.Context, key string) error {
	if s.chain != nil {
		s.chain.closeAll() // a chain's restore failed: it is over
	}
	switch key {
	case streamBase:
		return s.empty()
	case streamManifest:
		if err := os.Remove(filepath.Join(s.c.DataDirectory, streamManifest)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if oid, ok := tablespaceOID(key); ok {
		return s.undoTablespace(oid)
	}
	return nil
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

// Flush, after the last archive, links the tablespaces, writes the
// recovery settings and puts pg_control in place: only now can
// PostgreSQL start on the directory.
func (s *BaseSink) Flush(ctx context.Context) error {
	if s.chain != nil {
		if err := s.chain.endRun(); err != nil {
			s.chain.closeAll()
			return err
		}
		if !s.chain.last() {
			return nil
		}
		if err := s.finishChain(); err != nil {
			return err
		}
	}
	dd := s.c.DataDirectory
	if s.chain == nil {
		// An incremental run restored alone: PostgreSQL would refuse it.
		if b, err := os.ReadFile(filepath.Join(dd, "backup_label")); err == nil && strings.Contains(string(b), incrementalLabelLines[0]) {
			return errors.New("the run is an incremental backup restored without the runs it builds on: restore it through pipe's catalog (a source with the pipeline's prefix), which composes its chain")
		}
	}
	if _, err := os.Stat(filepath.Join(dd, heldControl)); err != nil {
		return fmt.Errorf("the restored base.tar has no %s: %w", pgControl, err)
	}
	if err := s.linkTablespaces(); err != nil {
		return err
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
	// A backup taken from a standby holds its standby.signal, which would
	// make the restored server a standby of that standby's primary for
	// ever (standby mode wins over recovery.signal): it recovers, to the
	// target or the end of the archive, as any backup does.
	if err := os.Remove(filepath.Join(dd, "standby.signal")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return sdk.ExplainIO(err)
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

// linkTablespaces makes pg_tblspc/<oid> a symbolic link to the directory
// each tablespace was restored into: PostgreSQL accepts nothing else
// there (a directory makes it PANIC at the end of recovery). The
// backup's tablespace_map, which would have the server link them to their
// old places (perhaps the live server's), goes; an empty one (no
// tablespaces) stays, as the backup's manifest names it. Every
// tablespace it names must have been restored.
func (s *BaseSink) linkTablespaces() error {
	dd := s.c.DataDirectory
	mapFile := filepath.Join(dd, "tablespace_map")
	b, err := os.ReadFile(mapFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading the backup's tablespace_map: %w", sdk.ExplainIO(err))
	}
	s.mu.Lock()
	spaces := maps.Clone(s.spaces)
	s.mu.Unlock()
	for _, oid := range tablespaceMapOIDs(b) {
		if _, ok := spaces[oid]; !ok {
			return fmt.Errorf("the backup's tablespace_map names tablespace %s, but the run holds no %s%s: the restored cluster would lack it; restore a complete run of the postgres_basebackup source", oid, oid, tablespaceExt)
		}
	}
	if len(b) > 0 {
		if err := os.Remove(mapFile); err != nil {
			return fmt.Errorf("removing the backup's tablespace_map: %w", sdk.ExplainIO(err))
		}
	}
	if len(spaces) == 0 {
		return nil
	}
	tblspc := filepath.Join(dd, "pg_tblspc")
	if err := os.MkdirAll(tblspc, 0o700); err != nil {
		return fmt.Errorf("making pg_tblspc: %w", sdk.ExplainIO(err))
	}
	for _, oid := range slices.Sorted(maps.Keys(spaces)) {
		if err := os.Symlink(spaces[oid], filepath.Join(tblspc, oid)); err != nil {
			return fmt.Errorf("linking tablespace %s from pg_tblspc to %s: %w", oid, spaces[oid], sdk.ExplainIO(err))
		}
	}
	return untar.SyncDir(tblspc)
}

// tablespaceMapOIDs reads the OIDs of a tablespace_map file: lines of
// "<oid> <path>", where PostgreSQL escapes a backslash, a carriage return
// or a line feed in the path with a backslash.
func tablespaceMapOIDs(b []byte) []string {
	var oids []string
	for len(b) > 0 {
		oid, _, _ := strings.Cut(string(b[:min(len(b), 11)]), " ")
		if oidRE.MatchString(oid) {
			oids = append(oids, oid)
		}
		i := 0
		for i < len(b) && b[i] != '\n' {
			if b[i] == '\\' {
				i++
			}
			i++
		}
		b = b[min(i+1, len(b)):]
	}
	return oids
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
	if c.ArchiveMode == archiveOff {
		// The source's archive_command would push into its own archive.
		b.WriteString("# The restored server does not archive (pipe's archive_mode = \"preserve\" keeps the source's setting).\n")
		set("archive_mode", "off")
	}
	return b.String()
}
