package postgres

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/ospipe"
)

// The streams of a base backup: the data directory, each tablespace (by
// its OID) and the server's backup manifest.
const (
	streamBase     = "base.tar"
	streamManifest = "backup_manifest"
	tablespaceExt  = ".tar"
)

// Facts a base backup records in the run's manifest: the WAL range pipe's
// catalog reads (named in the SDK, which it shares with the WAL archive),
// and the plugin's own.
const (
	factSystemID  = sdk.FactSystemID
	factTimeline  = sdk.FactTimeline
	factStartLSN  = sdk.FactStartLSN
	factStopLSN   = sdk.FactStopLSN
	factStopTLI   = sdk.FactStopTimeline
	factStopTime  = sdk.FactStopTime
	factSegSize   = sdk.FactWALSegmentSize
	factVersion   = "server_version"
	factLabel     = "backup_label"
	factTablespcs = "tablespaces"
	// factTablespace+<oid> is where a tablespace was on the server: a
	// restore's tablespace_map names its new place by OID.
	factTablespace = "tablespace_"
)

// printableFact reports whether v can be a fact of the manifest, which
// holds no control characters (a path could).
func printableFact(v string) bool {
	if v == "" || !utf8.ValidString(v) {
		return false
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// The servers pipe knows, by server_version_num: 13 (the first whose base
// backup sends a manifest) to 18. It speaks their BASE_BACKUP (from 15
// on, every archive in one COPY stream, tagged: copy; before, each in a
// COPY stream of its own: copyOld) and reads their catalogs table by
// table. A later version may change either: pipe refuses it rather than
// store what it cannot vouch for.
const (
	minServerVersion  = 130000
	maxServerVersion  = 189999
	taggedBaseVersion = 150000
)

// knownServerVersions names them in errors.
const knownServerVersions = "PostgreSQL 13 to 18"

type baseConfig struct {
	connConfig
	chainConfig
	Checkpoint string `pipe:"checkpoint"`
	Label      string `pipe:"label"`
	Checksums  string `pipe:"manifest_checksums"`
}

// BaseSourceType is the "postgres_basebackup" source.
type BaseSourceType struct{}

var _ sdk.SourceType = BaseSourceType{}

func (BaseSourceType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Takes a physical base backup of a PostgreSQL server (13 to 18) over the replication protocol, as pg_basebackup does, without access to its files: the data directory (base.tar), each tablespace (<oid>.tar) and the server's backup manifest, read as they arrive on one connection. The WAL the backup needs comes from the server's WAL archive (pipe wal push): the server must archive (archive_mode = on). The manifest records the start and stop positions, timeline and system identifier.",
		Attributes: append(append(connAttributes(),
			sdk.Attribute{Name: "checkpoint", Type: sdk.String, Default: "fast", Description: `"fast" (start at once with an immediate checkpoint) or "spread" (wait for a checkpoint spread as the server's checkpoint_completion_target says, sparing its I/O).`},
			sdk.Attribute{Name: "label", Type: sdk.String, Default: "pipe", Public: true, Description: "The backup label the server records (in backup_label and the .backup history file)."},
			sdk.Attribute{Name: "manifest_checksums", Type: sdk.String, Default: "CRC32C", Description: "The checksum of each file in the server's backup manifest (pg_verifybackup checks it): NONE, CRC32C, SHA224, SHA256, SHA384 or SHA512."},
		), chainAttributes()...),
	}
}

func (BaseSourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	var c baseConfig
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	cn, diags := newConn(c.connConfig)
	if diags.HasErrors() {
		return nil, diags
	}
	switch c.Checkpoint {
	case "fast", "spread":
	default:
		return nil, sdk.AttrError("checkpoint", "invalid checkpoint", fmt.Sprintf(`%q: use "fast" or "spread"`, c.Checkpoint))
	}
	switch strings.ToUpper(c.Checksums) {
	case "NONE", "CRC32C", "SHA224", "SHA256", "SHA384", "SHA512":
		c.Checksums = strings.ToUpper(c.Checksums)
	default:
		return nil, sdk.AttrError("manifest_checksums", "invalid manifest_checksums", fmt.Sprintf("%q: use NONE, CRC32C, SHA224, SHA256, SHA384 or SHA512", c.Checksums))
	}
	if d := c.chainConfig.Check(); d != nil {
		return nil, d
	}
	if c.Label == "" || len(c.Label) > 1000 || strings.ContainsAny(c.Label, "\n\r\x00") {
		return nil, sdk.AttrError("label", "invalid label", "give a label of one line, at most 1000 bytes")
	}
	return &BaseSource{c: c, conn: cn}, nil
}

// BaseSource reads a base backup: BASE_BACKUP starts in Streams, and one
// goroutine hands the archives of the single COPY stream to the readers
// of their streams in turn.
type BaseSource struct {
	c    baseConfig
	conn conn
	// dial, when set, replaces the network (tests talk to a fake server).
	dial pgconn.DialFunc

	pc      *pgconn.PgConn
	streams []sdk.StreamInfo
	pipes   map[string]*basePipe
	facts   map[string]string
	done    chan struct{} // closed when the copy ended
	end     map[string]string
	err     error // why the copy failed, once done is closed
	// damage is the server's data_corrupted error at the end of a backup
	// it sent whole; warned counts its warnings, warnings keeps the first
	// of them.
	damage   []string
	warned   int
	warnings []string
	once     sync.Once
	cancel   context.CancelFunc
	opened   sync.Mutex
	// follow is the run the host offered to build on (Follow); lister
	// keeps the files of the server's manifest for the next run.
	follow followed
	lister *lister
	// watch, when set, is the ordinary connection that watches the
	// archiver: the server was asked not to wait for the archive, and
	// the backup ends when awaitArchive has seen its last segment
	// archived.
	watch *pgconn.PgConn
}

// basePipe is one archive of the copy, through an OS pipe: across the
// plugin boundary pipe reads the pipe itself. The copy writes it in
// batches of up to a MiB; err is why the archive ended early, set before
// done is closed.
type basePipe struct {
	pipedStream
	w      *os.File
	bw     *bufio.Writer
	ended  sync.Once
	opened bool
	closed sync.Once
}

var _ sdk.FileReader = (*basePipe)(nil)

// end closes the writing side, with err when the archive did not end
// well; only the first call counts.
func (p *basePipe) end(err error) {
	p.ended.Do(func() {
		if err == nil {
			err = p.bw.Flush()
		}
		p.err = err
		p.w.Close()
		close(p.done)
	})
}

// Close returns how the archive ended; closed before its end, it makes
// the copy's writes to it fail (and so the backup).
func (p *basePipe) Close() error {
	p.closed.Do(func() { p.r.Close() })
	if !p.eof {
		return nil
	}
	<-p.done
	return p.err
}

var (
	_ sdk.Describer = (*BaseSource)(nil)
	_ sdk.Concluder = (*BaseSource)(nil)
)

// connectConfig is the base backup's connection settings: a physical
// replication connection, or with replication false an ordinary one.
func (c conn) connectConfig(dial pgconn.DialFunc, replication bool) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(c.info)
	if err != nil {
		return nil, fmt.Errorf("connection string: %s", scrub(err.Error(), c.password))
	}
	if dial != nil {
		cfg.DialFunc = dial
		cfg.LookupFunc = func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	}
	if c.password != "" {
		cfg.Password = c.password
	}
	if replication {
		cfg.RuntimeParams["replication"] = "true"
	}
	cfg.RuntimeParams["application_name"] = "pipe_basebackup"
	return cfg, nil
}

// connectReplication opens a physical replication connection and names
// what to do when the server refuses one.
func (c conn) connectReplication(ctx context.Context, dial pgconn.DialFunc) (*pgconn.PgConn, error) {
	cfg, err := c.connectConfig(dial, true)
	if err != nil {
		return nil, err
	}
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explainReplication(cfg.User, scrub(err.Error(), c.password), err)
	}
	return pc, nil
}

// explainReplication adds what to do to a refused replication connection.
func explainReplication(user, msg string, err error) error {
	var pe *pgconn.PgError
	errors.As(err, &pe)
	switch {
	case strings.Contains(msg, "no pg_hba.conf entry for replication"):
		return fmt.Errorf("connecting for replication: %s: add a line for it to pg_hba.conf (host replication %s <client address> scram-sha-256) and reload the server", msg, user)
	case strings.Contains(msg, "must be superuser or replication role") || strings.Contains(msg, "permission denied to start WAL sender") || (pe != nil && pe.Code == "42501"):
		return fmt.Errorf("connecting for replication: %s: the user needs the REPLICATION attribute (ALTER ROLE %s REPLICATION) or to be a superuser", msg, quoteIdent(user))
	case strings.Contains(msg, "max_wal_senders"):
		return fmt.Errorf("connecting for replication: %s: raise max_wal_senders in postgresql.conf (one more than the standbys and backups that connect at once) and restart the server", msg)
	}
	return fmt.Errorf("connecting for replication: %s", msg)
}

// show reads a server setting over the replication connection.
func show(ctx context.Context, pc *pgconn.PgConn, name string) (string, error) {
	res, err := pc.Exec(ctx, "SHOW "+name).ReadAll()
	if err != nil {
		return "", fmt.Errorf("SHOW %s: %w", name, err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return "", fmt.Errorf("SHOW %s: unexpected answer", name)
	}
	return string(res[0].Rows[0][0]), nil
}

// checkServer refuses a server whose settings cannot give a backup that
// restores, saying what to change.
func checkServer(ctx context.Context, pc *pgconn.PgConn) (map[string]string, error) {
	got := map[string]string{}
	for _, name := range []string{"server_version_num", "server_version", "wal_level", "archive_mode", "wal_segment_size", "data_checksums"} {
		v, err := show(ctx, pc, name)
		if err != nil {
			return nil, err
		}
		got[name] = v
	}
	switch n, _ := strconv.Atoi(got["server_version_num"]); {
	case n < minServerVersion:
		return nil, fmt.Errorf("the server runs PostgreSQL %s; pipe takes base backups of %s (older servers: pg_basebackup --format=tar --pgdata=- through the exec source)", got["server_version"], knownServerVersions)
	case n > maxServerVersion:
		return nil, fmt.Errorf("the server runs PostgreSQL %s; pipe takes base backups of %s, whose replication protocol it knows: a newer pipe may know this one (until then, pg_basebackup --format=tar --pgdata=- through the exec source)", got["server_version"], knownServerVersions)
	}
	if got["wal_level"] == "minimal" {
		return nil, errors.New("wal_level is minimal, which cannot give an online backup: set wal_level = replica in postgresql.conf and restart the server")
	}
	if n, _ := strconv.Atoi(got["server_version_num"]); n >= incrementalVersion {
		for _, name := range []string{"summarize_wal", "block_size", "segment_size"} {
			v, err := show(ctx, pc, name)
			if err != nil {
				return nil, err
			}
			got[name] = v
		}
	}
	// A hot standby (in_hot_standby, 14 and later) archives nothing
	// unless archive_mode = always: the WAL its backup needs comes from
	// the primary's archive, which it cannot see.
	standby, _ := show(ctx, pc, "in_hot_standby")
	got["in_hot_standby"] = standby
	if got["archive_mode"] == "off" && standby != "on" {
		return nil, errors.New("archive_mode is off: a base backup restores only with the WAL written while it ran, which pipe takes from the archive: set archive_mode = on and archive_command = 'pipe wal push /etc/pipe/pg.hcl %p' (restart the server), then back up (on a standby of PostgreSQL 13, whose standby pipe cannot tell, archive_mode = always)")
	}
	return got, nil
}

func (s *BaseSource) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	if s.streams != nil {
		return s.streams, nil
	}
	pc, err := s.conn.connectReplication(ctx, s.dial)
	if err != nil {
		return nil, err
	}
	defer func() {
		if s.pc == nil && pc != nil { // failed: the server ends a backup whose connection goes
			pc.Close(context.Background())
		}
	}()
	settings, err := checkServer(ctx, pc)
	if err != nil {
		return nil, err
	}
	if canWatchArchive(settings) {
		s.watch = s.conn.watchArchive(ctx, s.dial) // Close closes it
	}
	sys, err := pglogrepl.IdentifySystem(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	segSize, err := parseSize(settings["wal_segment_size"])
	if err != nil {
		return nil, fmt.Errorf("wal_segment_size %q: %w", settings["wal_segment_size"], err)
	}
	chain := s.c.decide(s.follow.parent, s.follow.why, settings, sys.SystemID, sys.Timeline, time.Now())
	start, err := s.begin(ctx, &pc, &chain)
	if err != nil {
		return nil, err
	}
	if s.c.Incremental && chain.Parent == nil {
		sdk.Log().Warn("taking a full base backup: "+chain.Why, "endpoint", "postgres_basebackup")
	}
	oids, streams, locations := baseStreams(start.Tablespaces)
	pipes, err := newBasePipes(streams)
	if err != nil {
		return nil, err
	}
	s.pc, s.streams, s.pipes = pc, streams, pipes
	s.facts = map[string]string{
		factSystemID: sys.SystemID,
		factTimeline: strconv.Itoa(int(start.TimelineID)),
		factStartLSN: start.LSN.String(),
		factSegSize:  strconv.FormatInt(segSize, 10),
		factVersion:  settings["server_version"],
		factLabel:    s.c.Label,
	}
	maps.Copy(s.facts, chain.Facts(s.c.Incremental))
	if s.c.Incremental && canIncrement(settings) {
		s.lister = newLister() // the next run builds on this one
	}
	if len(oids) > 0 {
		s.facts[factTablespcs] = strings.Join(oids, ",")
	}
	maps.Copy(s.facts, locations)
	s.done = make(chan struct{})
	cctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if n, _ := strconv.Atoi(settings["server_version_num"]); n < taggedBaseVersion {
		go s.copyOld(cctx)
	} else {
		go s.copy(cctx)
	}
	return s.streams, nil
}

// baseStreams names a base backup's streams: one per tablespace, then
// the data folder and the backup manifest. It also returns the
// tablespaces' OIDs and, as facts, their locations that can be printed.
func baseStreams(tablespaces []pglogrepl.BaseBackupTablespace) (oids []string, streams []sdk.StreamInfo, locations map[string]string) {
	locations = map[string]string{}
	for _, ts := range tablespaces {
		oid := strconv.Itoa(int(ts.OID))
		oids = append(oids, oid)
		streams = append(streams, sdk.StreamInfo{Name: oid + tablespaceExt, Size: -1})
		if printableFact(ts.Location) {
			locations[factTablespace+oid] = ts.Location
		}
	}
	streams = append(streams, sdk.StreamInfo{Name: streamBase, Size: -1}, sdk.StreamInfo{Name: streamManifest, Size: -1})
	return oids, streams, locations
}

// newBasePipes makes the OS pipe each stream is read from, by stream
// name; when one cannot be made, it closes those made.
func newBasePipes(streams []sdk.StreamInfo) (map[string]*basePipe, error) {
	pipes := map[string]*basePipe{}
	for _, st := range streams {
		r, w, err := ospipe.New()
		if err != nil {
			for _, p := range pipes {
				p.r.Close()
				p.w.Close()
			}
			return nil, err
		}
		ospipe.Grow(w)
		pipes[st.Name] = &basePipe{pipedStream: pipedStream{r: r, done: make(chan struct{})}, w: w, bw: bufio.NewWriterSize(w, 1<<20)}
	}
	return pipes, nil
}

// parseSize reads a size setting as SHOW prints it: "16MB", "1GB".
func parseSize(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			k, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return 0, err
			}
			return k * u.mult, nil
		}
	}
	return strconv.ParseInt(v, 10, 64)
}

// tarEnd is the end of a tar archive: two zero blocks. Servers before 15
// leave them out (pg_basebackup adds them); pipe adds them too, so that
// every stored archive is a whole tar file.
var tarEnd [1024]byte

// copyOld reads the archives of a server before 15 (13, 14): each comes
// in a COPY stream of its own, untagged and without the tar's end, in the
// order the server announced them (the tablespaces, then the data
// directory), then the manifest in one more. What follows, the end
// position, is as from 15 on.
func (s *BaseSource) copyOld(ctx context.Context) {
	var cur *basePipe
	next := 0 // the stream the next COPY carries: s.streams[next]
	fail := s.fail
	for {
		msg, err := s.pc.ReceiveMessage(ctx)
		if err != nil {
			fail(fmt.Errorf("reading the base backup: %w", serverGone(err)))
			return
		}
		switch m := msg.(type) {
		case *pgproto3.CopyOutResponse:
			if cur != nil {
				fail(errors.New("the server began an archive before it ended the last"))
				return
			}
			cur = s.pipes[s.streams[next].Name]
			next++
		case *pgproto3.CopyData:
			if cur == nil {
				fail(errors.New("the server sent data outside an archive"))
				return
			}
			if err := s.write(cur, m.Data); err != nil {
				fail(fmt.Errorf("base backup stream stopped: %w", err))
				return
			}
		case *pgproto3.CopyDone:
			if cur == nil {
				fail(errors.New("the server ended an archive it had not begun"))
				return
			}
			if s.streams[next-1].Name != streamManifest {
				if _, err := cur.bw.Write(tarEnd[:]); err != nil {
					fail(fmt.Errorf("base backup stream stopped: %w", err))
					return
				}
			}
			cur.end(nil)
			cur = nil
			if next < len(s.streams) {
				continue
			}
			if err := s.finish(ctx); err != nil {
				fail(err)
				return
			}
			close(s.done)
			return
		case *pgproto3.NoticeResponse:
			s.onNotice(m)
		case *pgproto3.ErrorResponse:
			fail(s.onError(m))
			return
		case *pgproto3.RowDescription:
			fail(fmt.Errorf("the server ended the backup after %d of the %d archives it announced", next, len(s.streams)))
			return
		default:
			fail(fmt.Errorf("unexpected %T in the base backup stream", msg))
			return
		}
	}
}

// copy reads the COPY stream: each archive's bytes go to its stream's
// pipe, in the order the server sends them (the tablespaces, the data
// directory, the manifest); then the end position.
func (s *BaseSource) copy(ctx context.Context) {
	var cur *basePipe
	fail := s.fail
	next := func(name string) error {
		if cur != nil {
			cur.end(nil)
		}
		p, ok := s.pipes[name]
		if !ok {
			return fmt.Errorf("the server sent an archive %q it did not announce", name)
		}
		cur = p
		return nil
	}
	for {
		msg, err := s.pc.ReceiveMessage(ctx)
		if err != nil {
			fail(fmt.Errorf("reading the base backup: %w", serverGone(err)))
			return
		}
		switch m := msg.(type) {
		case *pgproto3.CopyOutResponse:
		case *pgproto3.NoticeResponse:
			s.onNotice(m)
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case 'n': // a new archive: its name, then the tablespace's path
				name, _, _ := strings.Cut(string(m.Data[1:]), "\x00")
				if err := next(strings.TrimPrefix(name, "./")); err != nil {
					fail(err)
					return
				}
			case 'm':
				if err := next(streamManifest); err != nil {
					fail(err)
					return
				}
			case 'd':
				if cur == nil {
					fail(errors.New("the server sent data before naming its archive"))
					return
				}
				if err := s.write(cur, m.Data[1:]); err != nil {
					fail(fmt.Errorf("base backup stream stopped: %w", err))
					return
				}
			case 'p': // progress
			default:
				fail(fmt.Errorf("unexpected message %q in the base backup stream", m.Data[0]))
				return
			}
		case *pgproto3.CopyDone:
			if cur != nil {
				cur.end(nil)
			}
			if err := s.finish(ctx); err != nil {
				fail(err)
				return
			}
			for _, p := range s.pipes {
				p.end(errors.New("the server sent no data for this archive"))
			}
			if s.watch != nil {
				if err := s.awaitArchive(ctx); err != nil {
					s.err = err
				}
			}
			close(s.done)
			return
		case *pgproto3.ErrorResponse:
			fail(s.onError(m))
			return
		default:
			fail(fmt.Errorf("unexpected %T in the base backup stream", msg))
			return
		}
	}
}

// write hands data of the archive p to its reader; the server's
// manifest also goes to the lister (see Listing).
func (s *BaseSource) write(p *basePipe, data []byte) error {
	if p == s.pipes[streamManifest] && s.lister != nil {
		s.lister.Write(data) //nolint:errcheck // it keeps its own error
	}
	_, err := p.bw.Write(data)
	return err
}

// begin starts BASE_BACKUP on *pc: incremental on chain's parent when it
// has one, uploading the parent's manifest first. When the incremental
// cannot start (the server refuses the manifest, or its WAL summaries no
// longer reach back to the parent: pglogrepl reports BASE_BACKUP's error
// as text, so any failure counts), it takes a full on a new connection,
// and chain says why; a server that cannot be reached fails the run there.
func (s *BaseSource) begin(ctx context.Context, pc **pgconn.PgConn, chain *chainPlan) (pglogrepl.BaseBackupResult, error) {
	opts := pglogrepl.BaseBackupOptions{
		Label:             s.c.Label,
		Fast:              s.c.Checkpoint == "fast",
		TablespaceMap:     true,
		Manifest:          true,
		ManifestChecksums: s.c.Checksums,
		NoWait:            s.watch != nil, // awaitArchive waits
	}
	if p := chain.Parent; p != nil {
		m, err := uploadManifest(p)
		if err != nil {
			*chain = chainPlan{Why: fmt.Sprintf("run %s cannot be built on: %v", p.RunID, err)}
		} else {
			start, err := s.incremental(ctx, *pc, m, opts)
			if err == nil {
				return start, nil
			}
			*chain = chainPlan{Why: fmt.Sprintf("the server cannot build on run %s: %s", p.RunID, scrub(serverWords(err), s.conn.password))}
			(*pc).Close(context.Background())
			next, cerr := s.conn.connectReplication(ctx, s.dial)
			if cerr != nil {
				*pc = nil
				return pglogrepl.BaseBackupResult{}, cerr
			}
			*pc = next
		}
	}
	start, err := pglogrepl.StartBaseBackup(ctx, *pc, opts)
	if err != nil {
		return start, fmt.Errorf("starting the base backup: %w", err)
	}
	return start, nil
}

// serverMessage is the server's message in the error pglogrepl makes of
// an ErrorResponse to BASE_BACKUP.
var serverMessage = regexp.MustCompile(`message="((?:[^"\\]|\\.)*)"`)

// serverWords is the server's own message in err, or err.
func serverWords(err error) string {
	if m := serverMessage.FindStringSubmatch(err.Error()); m != nil {
		if s, uerr := strconv.Unquote(`"` + m[1] + `"`); uerr == nil {
			return s
		}
	}
	return err.Error()
}

// incremental uploads the parent's manifest m and starts an incremental
// BASE_BACKUP.
func (s *BaseSource) incremental(ctx context.Context, pc *pgconn.PgConn, m []byte, opts pglogrepl.BaseBackupOptions) (pglogrepl.BaseBackupResult, error) {
	if err := pglogrepl.UploadManifest(ctx, pc, bytes.NewReader(m)); err != nil {
		return pglogrepl.BaseBackupResult{}, err
	}
	opts.Incremental = true
	return pglogrepl.StartBaseBackup(ctx, pc, opts)
}

// fail ends the copy with err: every stream's reader gets it, and so
// does Conclude.
func (s *BaseSource) fail(err error) {
	s.err = err
	for _, p := range s.pipes {
		p.end(err)
	}
	close(s.done)
}

// finish reads what the server sends after the archives: the end
// position (a row of recptr and tli), then, when it found pages whose
// checksum failed, its warnings and the error it raises only once it sent
// everything (data_corrupted, XX001). That error keeps the backup: every
// byte and the end position are there, and Conclude names the damage.
func (s *BaseSource) finish(ctx context.Context) error {
	var end map[string]string
	for {
		msg, err := s.pc.ReceiveMessage(ctx)
		if err != nil {
			return fmt.Errorf("ending the base backup: %w", serverGone(err))
		}
		switch m := msg.(type) {
		case *pgproto3.RowDescription, *pgproto3.CommandComplete:
		case *pgproto3.DataRow:
			if len(m.Values) != 2 {
				return fmt.Errorf("ending the base backup: the server sent %d values for the end position, not 2", len(m.Values))
			}
			lsn, err := pglogrepl.ParseLSN(string(m.Values[0]))
			tli, err2 := strconv.Atoi(string(m.Values[1]))
			if err != nil || err2 != nil || tli <= 0 {
				return fmt.Errorf("ending the base backup: the server sent the end position %q on timeline %q", m.Values[0], m.Values[1])
			}
			end = map[string]string{
				factStopLSN:  lsn.String(),
				factStopTLI:  strconv.Itoa(tli),
				factStopTime: time.Now().UTC().Format(time.RFC3339Nano),
			}
		case *pgproto3.NoticeResponse:
			s.onNotice(m)
		case *pgproto3.ErrorResponse:
			if m.Code != dataCorrupted || end == nil {
				return s.onError(m)
			}
			s.damage = append(s.damage, m.Message)
		case *pgproto3.ReadyForQuery:
			if end == nil {
				return errors.New("ending the base backup: the server sent no end position")
			}
			s.end = end
			return nil
		default:
			return fmt.Errorf("ending the base backup: unexpected %T", msg)
		}
	}
}

// dataCorrupted is SQLSTATE data_corrupted, the error a base backup ends
// with when a page's checksum failed.
const dataCorrupted = "XX001"

// maxWarnings bounds the server's warnings a backup keeps for its damage
// fact (the server itself reports at most 5 pages a file).
const maxWarnings = 32

// onNotice takes a notice the server sends during the backup: a warning
// (a page whose checksum failed, say) is logged, and kept for the damage
// fact should the backup end with data_corrupted.
func (s *BaseSource) onNotice(m *pgproto3.NoticeResponse) {
	if m.Severity != "WARNING" {
		return
	}
	sdk.Log().Warn("the server warns during the base backup: "+m.Message, "endpoint", "postgres_basebackup")
	s.warned++
	if len(s.warnings) < maxWarnings {
		s.warnings = append(s.warnings, m.Message)
	}
}

// onError is the failure an error the server sends during the backup
// makes.
func (s *BaseSource) onError(m *pgproto3.ErrorResponse) error {
	err := fmt.Errorf("the server stopped the base backup: %w", pgconn.ErrorResponseToPgError(m))
	switch {
	case strings.Contains(m.Message, "promoted during online backup"):
		return fmt.Errorf("%w: the standby backed up became a primary while the backup ran, so what it sent is not a consistent backup and nothing was stored; take the backup again, from the new primary or another standby", err)
	case m.Hint != "":
		return fmt.Errorf("%w; the server says: %s", err, m.Hint)
	}
	return err
}

func (s *BaseSource) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	s.opened.Lock()
	defer s.opened.Unlock()
	p, ok := s.pipes[name]
	if !ok {
		return nil, fmt.Errorf("base backup stream %q: %w", name, sdk.ErrNotFound)
	}
	if p.opened {
		return nil, fmt.Errorf("base backup stream %q is read once: the server sends it once", name)
	}
	p.opened = true
	p.in = ospipe.NewReader(ctx, p.r)
	return p, nil
}

// closePipes closes every stream's reading side: the copy's writes to
// them fail.
func (s *BaseSource) closePipes() {
	for _, p := range s.pipes {
		p.closed.Do(func() { p.r.Close() })
	}
}

func (s *BaseSource) Describe(context.Context) (map[string]string, error) { return s.facts, nil }

// Conclude waits for the end of the copy and returns where the backup
// ended: recovery from it is consistent once replay passes stop_lsn.
func (s *BaseSource) Conclude(ctx context.Context) (map[string]string, error) {
	if s.done == nil {
		return nil, errors.New("the base backup was not started")
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s.err != nil {
		return nil, s.err
	}
	if len(s.damage) == 0 {
		return s.end, nil
	}
	// The server's own words: which files and blocks failed their
	// checksum, and its verdict.
	what := append(s.damage[:len(s.damage):len(s.damage)], s.warnings...)
	if more := s.warned - len(s.warnings); more > 0 {
		what = append(what, fmt.Sprintf("and %d more warnings", more))
	}
	facts := maps.Clone(s.end)
	facts[sdk.FactDamage] = strings.Join(what, "; ")
	return facts, nil
}

// Close ends the copy (the server aborts a backup whose connection goes)
// and the connection.
func (s *BaseSource) Close() error {
	s.once.Do(func() {
		if s.cancel != nil {
			// The copy may wait on a stream no one reads any more, or
			// never opened: its writes fail now.
			s.closePipes()
			s.cancel()
			<-s.done
		}
		if s.pc != nil {
			s.pc.Close(context.Background())
		}
		if s.watch != nil {
			s.watch.Close(context.Background())
		}
	})
	return nil
}
