package mysql

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pipebackup/pipe/plugins/internal/command"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// streamPhysical is the one stream of a physical backup: what
// mariadb-backup --backup --stream=xbstream writes, which mbstream -x
// extracts.
const streamPhysical = "backup.xbstream"

// Facts a physical backup records in the run's manifest, beside the
// chain's (sdk.FactParent, …) and sdk.FactStopTime: the server it copied
// and where the copy stands in InnoDB's redo log and in the binlog.
const (
	factVersion    = "server_version"
	factServerID   = "server_id"
	factHostname   = "hostname"
	factDataDir    = "data_directory"
	factLogBin     = "log_bin"
	factFromLSN    = "innodb_from_lsn"
	factToLSN      = "innodb_to_lsn"
	factLastLSN    = "innodb_last_lsn"
	factBinlogFile = "binlog_file"
	factBinlogPos  = "binlog_position"
	factGTID       = "gtid_position"
)

type physicalConfig struct {
	conn
	sdk.ChainPolicy
	Backup   string   `pipe:"backup_command"`
	DataDir  string   `pipe:"data_directory"`
	Parallel int64    `pipe:"parallel"`
	Args     []string `pipe:"backup_args"`
}

// serverAttributes are connAttributes without database: a physical
// backup copies the whole server.
func serverAttributes() []sdk.Attribute {
	return slices.DeleteFunc(connAttributes(""), func(a sdk.Attribute) bool { return a.Name == "database" })
}

// backupCommandAttribute is the program of both ends.
var backupCommandAttribute = sdk.Attribute{Name: "backup_command", Type: sdk.String, Description: "The backup program. Default: mariadb-backup, or mariabackup, whichever is on PATH. It must be of the server's version (Debian, Ubuntu: apt-get install mariadb-backup)."}

// PhysicalSourceType is the "mariadb_backup" source.
type PhysicalSourceType struct{}

var _ sdk.SourceType = PhysicalSourceType{}

func (PhysicalSourceType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Takes a physical backup of a running MariaDB server with mariadb-backup --backup --stream=xbstream: every table's files as the server stores them, copied while the server runs (InnoDB's redo log copied alongside, other engines under a short lock), as one stream, backup.xbstream. It runs where the server's data directory can be read: on the server's machine, as root or the server's user. The run's manifest records the server (version, server_id, host name, data directory), the InnoDB log positions the copy spans, and the binlog file, position and GTID at the backup's moment.",
		Attributes: append(append(serverAttributes(),
			backupCommandAttribute,
			sdk.Attribute{Name: "client_command", Type: sdk.String, Description: "The client program that asks the server who it is before the backup (to build an incremental only on a backup of this server). Default: mariadb, or mysql, whichever is on PATH."},
			sdk.Attribute{Name: "data_directory", Type: sdk.String, Description: "The server's data directory, when the server's option files (which mariadb-backup reads) do not say it: passed as --datadir."},
			sdk.Attribute{Name: "parallel", Type: sdk.Number, Default: int64(4), Description: "How many files mariadb-backup copies at once (--parallel)."},
			sdk.Attribute{Name: "backup_args", Type: sdk.StringList, Description: `More arguments for mariadb-backup, after pipe's own: e.g. ["--databases-exclude=scratch"]. Never a password.`},
		), sdk.ChainAttributes("Take incremental backups: mariadb-backup copies only the InnoDB pages changed since the pipeline's newest run in its store (from the log position its manifest records), which the run names as its parent; tables of other engines (Aria, MyISAM) are copied whole. pipe takes a full on its own, and says why, when there is no parent it can build on (none, or one whose chain lacks a run), the parent is of another server or the server's log is behind it (restored or replaced since), or the policy (full_every, full_after) asks for one. A restore applies the chain in order.")...),
	}
}

func (PhysicalSourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	var c physicalConfig
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	diags := c.resolve()
	if c.Database != "" {
		diags = append(diags, sdk.AttrError("dsn", "the dsn names a database", `a physical backup copies the whole server: leave the database out of the dsn ("mysql://user:password@host:3306")`)...)
	}
	diags = append(diags, c.ChainPolicy.Check()...)
	if c.Parallel < 1 || c.Parallel > 256 {
		diags = append(diags, sdk.AttrError("parallel", fmt.Sprintf("parallel = %d is out of range", c.Parallel), "give the number of files to copy at once, 1 to 256")...)
	}
	diags = append(diags, checkArgs("backup_args", c.Args)...)
	for _, a := range c.Args {
		if a == "--prepare" || strings.HasPrefix(a, "--stream") || strings.HasPrefix(a, "--incremental") || strings.HasPrefix(a, "--target-dir") || strings.HasPrefix(a, "--extra-lsndir") {
			diags = append(diags, sdk.AttrError("backup_args", fmt.Sprintf("%s in backup_args", a), "pipe sets the stream, its target and the incremental's position itself")...)
		}
	}
	backup, d := program("backup_command", c.Backup, "mariadb-backup", "mariabackup")
	diags = append(diags, d...)
	client, d := program("client_command", c.Client, "mariadb", "mysql")
	diags = append(diags, d...)
	if diags.HasErrors() {
		return nil, diags
	}
	return &PhysicalSource{c: c, backup: backup, client: client}, nil
}

// checkArgs refuses what must not be in a program's extra arguments: a
// password, and option files (pipe's must come first).
func checkArgs(attr string, args []string) sdk.Diagnostics {
	var diags sdk.Diagnostics
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--password") || strings.HasPrefix(a, "-p"):
			diags = append(diags, sdk.AttrError(attr, "a password in "+attr, "a command line is visible to every user of the machine: set password instead")...)
		case strings.HasPrefix(a, "--defaults") || a == "--no-defaults" || a == "--print-defaults":
			diags = append(diags, sdk.AttrError(attr, fmt.Sprintf("%s in %s", a, attr), "option files must be the first argument, where pipe passes its own: put settings in client_options")...)
		}
	}
	return diags
}

// PhysicalSource runs mariadb-backup once per run.
type PhysicalSource struct {
	c              physicalConfig
	backup, client string

	parent *sdk.Parent // what Follow offered
	why    string

	facts map[string]string // from Streams
	plan  sdk.ChainPlan

	mu     sync.Mutex
	tmp    string // the temporary folder of the run: the target and the log positions
	reader *physicalReader
}

var (
	_ sdk.Source    = (*PhysicalSource)(nil)
	_ sdk.Describer = (*PhysicalSource)(nil)
	_ sdk.Concluder = (*PhysicalSource)(nil)
	_ sdk.Chainer   = (*PhysicalSource)(nil)
)

// Follow takes the run the host offers to build on (see sdk.Chainer);
// Streams decides.
func (s *PhysicalSource) Follow(ctx context.Context, parent *sdk.Parent, why string) error {
	s.parent, s.why = parent, why
	return nil
}

// Listing is nothing: a later run needs only the parent's facts.
func (s *PhysicalSource) Listing() []byte { return nil }

// Streams asks the server who it is and decides whether the run is a
// full or an incremental.
func (s *PhysicalSource) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	if s.facts == nil {
		server, lsn, err := s.server(ctx)
		if err != nil {
			return nil, err
		}
		s.plan = s.c.decide(s.parent, s.why, server, lsn, time.Now())
		if s.c.Incremental && s.plan.Parent == nil {
			sdk.Log().Warn("taking a full physical backup: "+s.plan.Why, "endpoint", "mariadb_backup")
		}
		s.facts = server
		maps.Copy(s.facts, s.plan.Facts(s.c.Incremental))
	}
	return []sdk.StreamInfo{{Name: streamPhysical, Size: -1}}, nil
}

// server asks the server for the facts that say which server it is, and
// its InnoDB log position now (-1 when it does not say).
func (s *PhysicalSource) server(ctx context.Context) (map[string]string, int64, error) {
	rows, err := s.c.query(ctx, s.client, "SELECT VERSION(), @@server_id, @@hostname, @@datadir, @@log_bin;\nSHOW GLOBAL STATUS LIKE 'Innodb_lsn_current';\n")
	if err != nil {
		return nil, 0, fmt.Errorf("asking the server who it is: %w", err)
	}
	if len(rows) == 0 || len(rows[0]) != 5 {
		return nil, 0, fmt.Errorf("asking the server who it is: %s printed no answer", filepath.Base(s.client))
	}
	r := rows[0]
	facts := map[string]string{factVersion: r[0], factServerID: r[1], factHostname: r[2], factDataDir: r[3], factLogBin: "off"}
	if r[4] == "1" {
		facts[factLogBin] = "on"
	}
	lsn := int64(-1)
	if len(rows) > 1 && len(rows[1]) == 2 {
		if n, err := strconv.ParseInt(rows[1][1], 10, 64); err == nil {
			lsn = n
		}
	}
	return facts, lsn, nil
}

// decide says whether the run can build on parent (offered with why
// when nil) on this server, whose log stands at lsn, as the policy
// allows.
func (c physicalConfig) decide(parent *sdk.Parent, why string, server map[string]string, lsn int64, now time.Time) sdk.ChainPlan {
	if !c.Incremental {
		return sdk.ChainPlan{}
	}
	if parent == nil {
		return sdk.Full("there is no run to build on: %s", why)
	}
	f := parent.Facts
	to, err := strconv.ParseInt(f[factToLSN], 10, 64)
	if err != nil {
		return sdk.Full("the newest run, %s, records no InnoDB log position (not a backup of the mariadb_backup source?)", parent.RunID)
	}
	for _, k := range []string{factHostname, factServerID, factDataDir} {
		if f[k] != server[k] {
			return sdk.Full("the newest run, %s, is of another server (%s %q, this server's %q)", parent.RunID, k, f[k], server[k])
		}
	}
	if lsn >= 0 && lsn < to {
		return sdk.Full("the server's InnoDB log is at %d, behind the newest run's %d (%s): the server was restored or replaced since", lsn, to, parent.RunID)
	}
	if why := c.FullDue(parent, now); why != "" {
		return sdk.ChainPlan{Why: why}
	}
	return sdk.ChainPlan{Parent: parent}
}

// Describe returns the server's facts and the run's place in its chain.
func (s *PhysicalSource) Describe(ctx context.Context) (map[string]string, error) {
	if s.facts == nil {
		if _, err := s.Streams(ctx); err != nil {
			return nil, err
		}
	}
	return s.facts, nil
}

// args is mariadb-backup's command line.
func (s *PhysicalSource) args(file, tmp string) []string {
	argv := []string{s.backup, "--defaults-extra-file=" + file, "--backup", "--stream=xbstream",
		"--target-dir=" + filepath.Join(tmp, "target"), "--extra-lsndir=" + filepath.Join(tmp, "lsn"),
		"--parallel=" + strconv.FormatInt(s.c.Parallel, 10)}
	if s.c.DataDir != "" {
		argv = append(argv, "--datadir="+s.c.DataDir)
	}
	if p := s.plan.Parent; p != nil {
		argv = append(argv, "--incremental-lsn="+p.Facts[factToLSN])
	}
	return append(argv, s.c.Args...)
}

func (s *PhysicalSource) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if name != streamPhysical {
		return nil, fmt.Errorf("stream %q: %w (this source yields %q)", name, sdk.ErrNotFound, streamPhysical)
	}
	if s.facts == nil {
		if _, err := s.Streams(ctx); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reader != nil {
		return nil, fmt.Errorf("stream %q is read once per run", name)
	}
	tmp, err := os.MkdirTemp("", "pipe-mariadb-backup-*")
	if err != nil {
		return nil, fmt.Errorf("making a temporary folder for mariadb-backup: %w", sdk.ExplainIO(err))
	}
	s.tmp = tmp
	file, remove, err := s.c.optionFile()
	if err != nil {
		return nil, err
	}
	r, err := command.Read(ctx, command.Spec{Argv: s.args(file, tmp), Secrets: s.c.secrets(), Cleanup: remove, Explain: explainBackup})
	if err != nil {
		return nil, err
	}
	s.reader = &physicalReader{Reader: r}
	return s.reader, nil
}

// physicalReader is mariadb-backup's output; it remembers whether it
// ended well.
type physicalReader struct {
	*command.Reader
	once sync.Once
	err  error
	done bool
}

func (r *physicalReader) Close() error {
	r.once.Do(func() {
		r.err = r.Reader.Close()
		r.done = true
	})
	return r.err
}

// explainBackup says what to do about mariadb-backup's errors whose
// message does not.
func explainBackup(msg string) string {
	switch {
	case strings.Contains(msg, "Permission denied") || strings.Contains(msg, "Can't open"):
		return "mariadb-backup reads the server's files: run pipe on the server's machine as root or as the server's user (mysql)"
	case strings.Contains(msg, "Access denied"):
		return "the user needs RELOAD, PROCESS, LOCK TABLES and BINLOG MONITOR (or REPLICATION CLIENT) to take a backup: GRANT them, or connect as a user who has them"
	case strings.Contains(msg, "datadir") || strings.Contains(msg, "No such file or directory"):
		return "mariadb-backup did not find the server's data directory: set data_directory, or run pipe where the server's option files are"
	}
	return explain(msg)
}

// Conclude reads where the backup stands in the server's logs from the
// files mariadb-backup left beside the stream.
func (s *PhysicalSource) Conclude(ctx context.Context) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reader == nil || !s.reader.done {
		return nil, errors.New("the backup did not end")
	}
	if s.reader.err != nil {
		return nil, s.reader.err
	}
	lsn := filepath.Join(s.tmp, "lsn")
	points, err := readInfo(lsn, "checkpoints")
	if err != nil {
		return nil, err
	}
	info, err := readInfo(lsn, "info")
	if err != nil {
		return nil, err
	}
	want := "full-backuped"
	if s.plan.Parent != nil {
		want = "incremental"
	}
	if points["backup_type"] != want {
		return nil, fmt.Errorf("mariadb-backup wrote a backup of type %q, not %q", points["backup_type"], want)
	}
	facts := map[string]string{sdk.FactStopTime: time.Now().UTC().Format(time.RFC3339Nano)}
	for k, v := range map[string]string{factFromLSN: points["from_lsn"], factToLSN: points["to_lsn"], factLastLSN: points["last_lsn"]} {
		if _, err := strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fmt.Errorf("mariadb-backup's checkpoints give %s as %q, not a number", strings.TrimPrefix(k, "innodb_"), v)
		}
		facts[k] = v
	}
	if pos := info["binlog_pos"]; pos != "" {
		m := binlogPos.FindStringSubmatch(pos)
		if m == nil {
			return nil, fmt.Errorf("mariadb-backup's binlog position %q is not as expected", pos)
		}
		facts[factBinlogFile], facts[factBinlogPos] = m[1], m[2]
		if m[3] != "" {
			facts[factGTID] = m[3]
		}
	}
	return facts, nil
}

// binlogPos reads mariadb-backup's binlog_pos.
var binlogPos = regexp.MustCompile(`^filename '([^'\n]+)', position '([0-9]+)'(?:, GTID of the last change '([0-9,-]*)')?$`)

// readInfo reads one of the "key = value" files mariadb-backup writes
// beside a backup: checkpoints or info, named xtrabackup_<name> before
// MariaDB 11.x, mariadb_backup_<name> after.
func readInfo(dir, name string) (map[string]string, error) {
	var f *os.File
	var err error
	for _, prefix := range []string{"mariadb_backup_", "xtrabackup_"} {
		if f, err = os.Open(filepath.Join(dir, prefix+name)); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading mariadb-backup's %s: %w", name, err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mariadb-backup's %s: %w", name, err)
	}
	return out, nil
}

// Close removes the run's temporary folder.
func (s *PhysicalSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reader != nil {
		s.reader.Close()
	}
	if s.tmp != "" {
		return os.RemoveAll(s.tmp)
	}
	return nil
}
