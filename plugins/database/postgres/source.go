package postgres

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pipebackup/pipe/plugins/internal/command"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/ospipe"
)

// Stream names. A single dump is named after its database; parallel mode
// yields the schema before and after the data, the sequences' values, and
// one stream per table under data/.
const (
	streamGlobals   = "globals.sql"
	streamPreData   = "pre-data.dump"
	streamSequences = "sequences.sql"
	streamPostData  = "post-data.dump"
	dataPrefix      = "data/"
	dataExt         = ".copy"
)

// tableStream names a table's data stream: data/<schema>/<table>.copy,
// both path-escaped so any identifier round-trips.
func tableStream(schema, table string) string {
	return dataPrefix + url.PathEscape(schema) + "/" + url.PathEscape(table) + dataExt
}

// parseTableStream is tableStream's inverse.
func parseTableStream(name string) (schema, table string, ok bool) {
	rest, ok := strings.CutPrefix(name, dataPrefix)
	if !ok {
		return "", "", false
	}
	rest, ok = strings.CutSuffix(rest, dataExt)
	if !ok {
		return "", "", false
	}
	s, t, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(t, "/") {
		return "", "", false
	}
	var err1, err2 error
	schema, err1 = url.PathUnescape(s)
	table, err2 = url.PathUnescape(t)
	return schema, table, err1 == nil && err2 == nil && schema != "" && table != ""
}

type sourceConfig struct {
	connConfig
	Format    string `pipe:"format"`
	Jobs      int64  `pipe:"jobs"`
	Globals   bool   `pipe:"globals"`
	PgDump    string `pipe:"pg_dump"`
	PgDumpAll string `pipe:"pg_dumpall"`
	// Cluster mode.
	Databases        []string `pipe:"databases"`
	ExcludeDatabases []string `pipe:"exclude_databases"`
}

// SourceType is the "postgres" source.
type SourceType struct{}

var _ sdk.SourceType = SourceType{}

func (SourceType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Dumps a PostgreSQL database with pg_dump: one stream in custom or plain format, or with jobs > 1 the schema before and after the data (custom format), the sequences and every table's data (COPY text) as streams of their own, read in parallel on one exported snapshot. pg_dump's own compression is off: pipe compresses.",
		Attributes: append(connAttributes(),
			sdk.Attribute{Name: "format", Type: sdk.String, Default: "custom", Description: `"custom" (pg_dump -Fc, restored by pg_restore) or "plain" (SQL, restored by psql).`},
			sdk.Attribute{Name: "jobs", Type: sdk.Number, Default: int64(1), Description: "Tables dumped at once. Above 1: parallel mode, one stream per table on one consistent snapshot (format custom only; servers of PostgreSQL 13 to 18, whose catalogs pipe knows); the run then moves at least this many streams at once. With databases, each database is read so, its streams under <database>/, on a snapshot of its own taken when the run starts (one connection per database open for the run, and up to jobs more while its tables are read)."},
			sdk.Attribute{Name: "globals", Type: sdk.Bool, Default: false, Description: "Also dump roles and tablespaces (pg_dumpall --globals-only) as the stream globals.sql."},
			sdk.Attribute{Name: "pg_dump", Type: sdk.String, Default: "pg_dump", Description: "The pg_dump program; its major version must be at least the server's."},
			sdk.Attribute{Name: "pg_dumpall", Type: sdk.String, Default: "pg_dumpall", Description: "The pg_dumpall program, for globals."},
			sdk.Attribute{Name: "databases", Type: sdk.StringList, Public: true, Description: `Cluster mode: the server's databases to dump, by name or pattern (["*"]: all; ["app_*", "billing"]), each into a stream of its own (<database>.dump), after the globals (globals.sql, always). Patterns skip templates and the postgres database (name it to include it). Databases stand alone: one that fails does not stop the others, which are stored; the run then fails and its manifest names the failed ones. The connection goes to database, or postgres.`},
			sdk.Attribute{Name: "exclude_databases", Type: sdk.StringList, Public: true, Description: `Cluster mode: databases to leave out, by name or pattern (["test_*"]).`},
		),
	}
}

func (SourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	var c sourceConfig
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	cn, diags := newConn(c.connConfig)
	if diags.HasErrors() {
		return nil, diags
	}
	switch c.Format {
	case "custom", "plain":
	default:
		return nil, sdk.AttrError("format", "unknown format", fmt.Sprintf(`%q: use "custom" (pg_restore) or "plain" (psql)`, c.Format))
	}
	if c.Jobs < 1 || c.Jobs > 1024 {
		return nil, sdk.AttrError("jobs", "invalid jobs", fmt.Sprintf("jobs = %d: give 1 (one pg_dump stream) up to 1024 tables at once", c.Jobs))
	}
	if d := checkPatterns("databases", c.Databases); d != nil {
		return nil, d
	}
	if d := checkPatterns("exclude_databases", c.ExcludeDatabases); d != nil {
		return nil, d
	}
	if len(c.ExcludeDatabases) > 0 && len(c.Databases) == 0 {
		return nil, sdk.AttrError("exclude_databases", "exclude_databases without databases", `exclude_databases leaves databases out of a cluster backup: add databases = ["*"]`)
	}
	if len(c.Databases) > 0 {
		c.Globals = true
		if cn.database == "" {
			cn = cn.withDatabase(maintenanceDB)
		}
	}
	if c.Jobs > 1 && c.Format != "custom" {
		return nil, sdk.AttrError("jobs", "parallel mode needs the custom format", `with jobs > 1 the schema is dumped in custom format (pg_restore builds its indexes in parallel): remove format = "plain" or set jobs = 1`)
	}
	var d sdk.Diagnostics
	if c.PgDump, d = lookTool("pg_dump", c.PgDump); d != nil {
		return nil, d
	}
	if c.Globals {
		if c.PgDumpAll, d = lookTool("pg_dumpall", c.PgDumpAll); d != nil {
			return nil, d
		}
	}
	return &Source{c: c, conn: cn}, nil
}

// Source dumps one database, or in cluster mode several (cluster.go).
type Source struct {
	c    sourceConfig
	conn conn

	// Cluster mode: each stream's database, and pg_dumpall's arguments.
	databases   map[string]string
	globalsArgs []string
	// Cluster mode with jobs > 1: each database read table by table, by
	// a Source of its own, under the database's escaped name.
	parallel map[string]*Source
	// inCluster is set on those: the schema's dump creates the database,
	// and nothing is dumped ahead (every database's would run at once).
	inCluster bool

	facts   map[string]string
	streams []sdk.StreamInfo

	// Parallel mode: the transaction that exported the snapshot stays open
	// (and holds its tables' locks) until Close; workers are connections
	// on that snapshot, one per table being read.
	snapshot  string
	exporter  *pgx.Conn
	postData  *prefetched
	sequences []byte
	workers   *connPool
	// tablesLeft counts the table streams not started yet.
	tablesLeft atomic.Int64
}

var (
	_ sdk.Source    = (*Source)(nil)
	_ sdk.Describer = (*Source)(nil)
	_ io.Closer     = (*Source)(nil)
)

// tablesVersion refuses to read tables itself (jobs above 1) from a server
// whose catalogs pipe does not know: one that stored a table of a new kind
// would lose its rows without a word, while pg_dump, which knows its
// server, reads everything with jobs = 1.
func tablesVersion(num int, version string, jobs int64) error {
	if num < minServerVersion || num > maxServerVersion {
		return fmt.Errorf("the server runs PostgreSQL %s; pipe reads a database table by table (jobs = %d) from %s, whose catalogs it knows: set jobs = 1 (pg_dump reads every table)", version, jobs, knownServerVersions)
	}
	return nil
}

// Streams connects, checks pg_dump against the server, and lists what a
// run reads. In parallel mode it exports the snapshot every stream reads.
func (s *Source) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	if s.streams != nil {
		return s.streams, nil
	}
	pc, err := s.conn.connect(ctx, nil)
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			pc.Close(context.Background())
		}
	}()
	var serverNum int
	var serverVersion, db string
	var size int64
	if err := pc.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version'), current_database(), pg_database_size(current_database())`).Scan(&serverNum, &serverVersion, &db, &size); err != nil {
		return nil, fmt.Errorf("reading the server's version: %w", err)
	}
	major, dumpVersion, err := toolMajor(ctx, s.c.PgDump)
	if err != nil {
		return nil, err
	}
	if major < serverNum/10000 {
		return nil, fmt.Errorf("%s is version %d but the server runs PostgreSQL %s: pg_dump cannot dump a newer server; install pg_dump %d or newer and set pg_dump = \"/usr/lib/postgresql/%d/bin/pg_dump\" (or its path)", s.c.PgDump, major, serverVersion, serverNum/10000, serverNum/10000)
	}
	if s.c.Jobs > 1 {
		if err := tablesVersion(serverNum, serverVersion, s.c.Jobs); err != nil {
			return nil, err
		}
	}
	s.facts = map[string]string{
		"server_version": serverVersion,
		"database":       db,
		"size_bytes":     strconv.FormatInt(size, 10),
		"pg_dump":        dumpVersion,
		"format":         s.c.Format,
	}
	if len(s.c.Databases) > 0 {
		if s.streams, err = s.clusterStreams(ctx, pc); err != nil {
			return nil, err
		}
		return s.streams, nil
	}
	var streams []sdk.StreamInfo
	if s.c.Globals {
		streams = append(streams, sdk.StreamInfo{Name: streamGlobals, Size: -1})
	}
	if s.c.Jobs == 1 {
		ext := ".dump"
		if s.c.Format == "plain" {
			ext = ".sql"
		}
		s.streams = append(streams, sdk.StreamInfo{Name: escapeName(db) + ext, Size: -1})
		return s.streams, nil
	}
	parallel, tables, err := s.parallelStreams(ctx, pc)
	if err != nil {
		return nil, err
	}
	keep = true
	s.facts["format"] = "parallel"
	s.facts["tables"] = strconv.Itoa(tables)
	s.streams = append(streams, parallel...)
	return s.streams, nil
}

// parallelStreams exports the snapshot on pc, which it keeps on success
// (the exporter), and lists parallel mode's streams and the number of
// tables among them.
func (s *Source) parallelStreams(ctx context.Context, pc *pgx.Conn) ([]sdk.StreamInfo, int, error) {
	tables, err := s.exportSnapshot(ctx, pc)
	if err != nil {
		return nil, 0, err
	}
	s.exporter = pc
	streams := []sdk.StreamInfo{{Name: streamPreData, Size: -1}, {Name: streamSequences, Size: int64(len(s.sequences))}}
	for _, t := range tables {
		streams = append(streams, sdk.StreamInfo{Name: tableStream(t.schema, t.name), Size: -1})
	}
	streams = append(streams, sdk.StreamInfo{Name: streamPostData, Size: -1})
	// The schema after the data is read last but dumped now, beside the
	// tables: pg_dump spends most of a schema dump reading the catalog.
	if !s.inCluster {
		s.postData = s.prefetch(ctx, streamPostData)
	}
	s.workers = newPool(int(s.c.Jobs), s.worker)
	s.tablesLeft.Store(int64(len(tables)))
	return streams, len(tables), nil
}

// escapeName keeps a database name usable as an object name.
func escapeName(db string) string { return url.PathEscape(db) }

type table struct{ schema, name string }

// exportSnapshot starts the transaction every parallel stream reads from,
// locks the tables it will read against schema changes (as pg_dump does),
// lists them largest first, and reads the sequences' values.
func (s *Source) exportSnapshot(ctx context.Context, pc *pgx.Conn) ([]table, error) {
	if _, err := pc.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"); err != nil {
		return nil, fmt.Errorf("starting the snapshot transaction: %w", err)
	}
	if err := pc.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&s.snapshot); err != nil {
		return nil, fmt.Errorf("exporting a snapshot: %w", err)
	}
	var hasLargeObjects bool
	if err := pc.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_largeobject_metadata)").Scan(&hasLargeObjects); err != nil {
		return nil, fmt.Errorf("looking for large objects: %w", err)
	}
	if hasLargeObjects {
		return nil, fmt.Errorf("the database has large objects (pg_largeobject), which parallel mode does not copy: set jobs = 1 (custom format dumps them)")
	}
	// Extensions may own tables whose rows pg_dump keeps (their
	// configuration, e.g. PostGIS's spatial_ref_sys): parallel mode copies
	// only tables no extension owns, so it refuses rather than lose them.
	var configured string
	if err := pc.QueryRow(ctx, "SELECT coalesce(string_agg(extname, ', ' ORDER BY extname), '') FROM pg_extension WHERE coalesce(cardinality(extconfig), 0) > 0").Scan(&configured); err != nil {
		return nil, fmt.Errorf("looking for extension configuration tables: %w", err)
	}
	if configured != "" {
		return nil, fmt.Errorf("extensions with configuration tables (%s) keep rows that parallel mode does not copy: set jobs = 1 (custom format dumps them)", configured)
	}
	// Ordinary tables and partitions outside the system schemas that no
	// extension owns; largest first so the long ones start early.
	rows, err := pc.Query(ctx, `
SELECT n.nspname, c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r'
  AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\_%'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
ORDER BY pg_relation_size(c.oid) DESC, n.nspname, c.relname`)
	if err != nil {
		return nil, fmt.Errorf("listing tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		err := r.Scan(&t.schema, &t.name)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing tables: %w", err)
	}
	if len(tables) > 0 {
		names := make([]string, len(tables))
		for i, t := range tables {
			names[i] = pgx.Identifier{t.schema, t.name}.Sanitize()
		}
		if _, err := pc.Exec(ctx, "LOCK TABLE "+strings.Join(names, ", ")+" IN ACCESS SHARE MODE"); err != nil {
			return nil, fmt.Errorf("locking the tables against schema changes: %w", err)
		}
	}
	if s.sequences, err = readSequences(ctx, pc); err != nil {
		return nil, err
	}
	return tables, nil
}

// readSequences writes a setval per sequence (what pg_dump's data section
// holds besides tables).
func readSequences(ctx context.Context, pc *pgx.Conn) ([]byte, error) {
	rows, err := pc.Query(ctx, `
SELECT n.nspname, c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'S'
  AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\_%'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')
ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("listing sequences: %w", err)
	}
	seqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		err := r.Scan(&t.schema, &t.name)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing sequences: %w", err)
	}
	var b bytes.Buffer
	for _, q := range seqs {
		id := pgx.Identifier{q.schema, q.name}.Sanitize()
		var last int64
		var called bool
		if err := pc.QueryRow(ctx, "SELECT last_value, is_called FROM "+id).Scan(&last, &called); err != nil {
			return nil, fmt.Errorf("reading sequence %s: %w", id, err)
		}
		fmt.Fprintf(&b, "SELECT pg_catalog.setval(%s, %d, %t);\n", quoteLiteral(id), last, called)
	}
	return b.Bytes(), nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Describe returns the server's version, the database, its size and the
// format, known after Streams.
func (s *Source) Describe(context.Context) (map[string]string, error) { return s.facts, nil }

func (s *Source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if s.streams == nil {
		if _, err := s.Streams(ctx); err != nil {
			return nil, err
		}
	}
	known := false
	for _, st := range s.streams {
		known = known || st.Name == name
	}
	if !known {
		return nil, fmt.Errorf("stream %q: %w", name, sdk.ErrNotFound)
	}
	if db, rest, ok := strings.Cut(name, "/"); ok && s.parallel[db] != nil {
		return s.parallel[db].Open(ctx, rest)
	}
	db, cluster := s.databases[name]
	switch {
	case name == streamGlobals && s.globalsArgs != nil:
		return command.Read(ctx, s.conn.spec(s.conn.tool(s.c.PgDumpAll, s.globalsArgs...), nil))
	case name == streamGlobals:
		return command.Read(ctx, s.conn.spec(s.conn.tool(s.c.PgDumpAll, "--globals-only"), nil))
	case cluster && s.c.Format == "plain":
		c := s.conn.withDatabase(db)
		return command.Read(ctx, c.spec(c.tool(s.c.PgDump, "--format=plain", "--create"), nil))
	case cluster:
		c := s.conn.withDatabase(db)
		return command.Read(ctx, c.spec(c.tool(s.c.PgDump, "--format=custom", "--compress=0", "--create"), nil))
	case s.c.Jobs == 1 && s.c.Format == "plain":
		return command.Read(ctx, s.conn.spec(s.conn.tool(s.c.PgDump, "--format=plain"), nil))
	case s.c.Jobs == 1:
		return command.Read(ctx, s.conn.spec(s.conn.tool(s.c.PgDump, "--format=custom", "--compress=0"), nil))
	case name == streamPostData && s.postData != nil:
		return s.postData.open()
	case name == streamPreData, name == streamPostData:
		return command.Read(ctx, s.conn.spec(s.sectionDump(name), nil))
	case name == streamSequences:
		return io.NopCloser(bytes.NewReader(s.sequences)), nil
	}
	schema, tbl, ok := parseTableStream(name)
	if !ok {
		return nil, fmt.Errorf("stream %q: %w", name, sdk.ErrNotFound)
	}
	return s.copyOut(ctx, schema, tbl)
}

// sectionDump is the pg_dump command of a schema stream, on the snapshot.
func (s *Source) sectionDump(name string) []string {
	args := []string{"--format=custom", "--compress=0", "--section=" + strings.TrimSuffix(name, ".dump"), "--snapshot=" + s.snapshot}
	if s.inCluster && name == streamPreData {
		args = append(args, "--create") // the restore creates the database from it
	}
	return s.conn.tool(s.c.PgDump, args...)
}

// prefetched is a schema stream dumped ahead into a temporary file.
type prefetched struct {
	f    *os.File
	stop context.CancelFunc
	done chan struct{}
	err  error
}

// prefetch starts dumping a schema stream into a temporary file. Its
// context is the source's: the dump must outlive the Streams call.
func (s *Source) prefetch(ctx context.Context, name string) *prefetched {
	ctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	p := &prefetched{stop: stop, done: make(chan struct{})}
	f, err := os.CreateTemp("", "pipe-"+name+"-*")
	if err != nil {
		p.err = fmt.Errorf("%s needs a temporary file: %w", name, err)
		close(p.done)
		return p
	}
	os.Remove(f.Name()) // gone when closed
	p.f = f
	c := command.New(ctx, s.conn.spec(s.sectionDump(name), nil))
	c.Cmd().Stdout = f
	go func() {
		p.err = c.Run()
		close(p.done)
	}()
	return p
}

// open waits for the dump and reads its file from the start.
func (p *prefetched) open() (io.ReadCloser, error) {
	<-p.done
	if p.err != nil {
		return nil, p.err
	}
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return p.f, nil
}

// close stops the dump if it still runs and drops its file.
func (p *prefetched) close() {
	p.stop()
	<-p.done
	if p.f != nil {
		p.f.Close()
	}
}

// copyOut streams one table's rows as COPY text, on a worker connection
// that reads the exported snapshot. Once the last table is started, the
// workers are let go as each finishes: in cluster mode a database read
// table by table keeps only its snapshot's connection after that.
func (s *Source) copyOut(ctx context.Context, schema, tbl string) (io.ReadCloser, error) {
	last := s.tablesLeft.Add(-1) <= 0
	pc, err := s.workers.get(ctx)
	if last {
		s.workers.retire()
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	pr, pw, err := ospipe.New()
	if err != nil {
		cancel()
		s.workers.put(pc)
		return nil, err
	}
	r := &copyReader{pipedStream: pipedStream{r: pr, in: ospipe.NewReader(ctx, pr), done: make(chan struct{})}, cancel: cancel}
	id := pgx.Identifier{schema, tbl}.Sanitize()
	go func() {
		// pgx writes a row at a time: batch them into pipe-sized writes.
		bw := bufio.NewWriterSize(pw, 1<<20)
		_, err := pc.PgConn().CopyTo(ctx, bw, "COPY "+id+" TO STDOUT")
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			r.err = fmt.Errorf("copying %s out: %w", id, serverGone(err))
		}
		pw.Close()
		s.workers.put(pc)
		close(r.done) // not deferred: a panic must end the process, not the table's stream
	}()
	return r, nil
}

// worker connects a connection to the exported snapshot.
func (s *Source) worker(ctx context.Context) (*pgx.Conn, error) {
	pc, err := s.conn.connectWith(ctx, nil, func(cfg *pgx.ConnConfig) {
		cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
			return pgproto3.NewFrontend(&batchedSocket{r: r, buf: make([]byte, batchedSocketBuffer)}, w)
		}
	})
	if err != nil {
		return nil, err
	}
	if _, err = pc.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"); err == nil {
		_, err = pc.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(s.snapshot))
	}
	if err != nil {
		pc.Close(context.Background())
		return nil, fmt.Errorf("joining the dump's snapshot: %w", err)
	}
	return pc, nil
}

// pipedStream is a stream a goroutine writes into an OS pipe: across the
// plugin boundary pipe reads the pipe itself (see sdk.FileReader). err is
// how the writer ended, set before done is closed; a reader that reached
// the pipe's end gets it.
type pipedStream struct {
	r    *os.File
	in   *ospipe.Reader // r, in batches
	done chan struct{}
	err  error
	eof  bool
}

func (p *pipedStream) File() *os.File { return p.r }
func (p *pipedStream) Done(eof bool)  { p.eof = eof }

func (p *pipedStream) Read(b []byte) (int, error) {
	n, err := p.in.Read(b)
	if err == io.EOF {
		p.eof = true
		<-p.done
		if p.err != nil {
			return n, p.err
		}
	}
	return n, err
}

// copyReader is a table's rows as they come from COPY.
type copyReader struct {
	pipedStream
	cancel context.CancelFunc
	once   sync.Once
}

var _ sdk.FileReader = (*copyReader)(nil)

// Close returns how the COPY ended. Closed before the end, it stops the
// COPY first. Either way the connection is back in the pool after it.
func (r *copyReader) Close() error {
	r.once.Do(func() {
		r.r.Close()
		if !r.eof {
			r.cancel()
		}
		<-r.done
		r.cancel()
	})
	return r.err
}

// Close ends the snapshot transaction and every connection.
func (s *Source) Close() error {
	for _, p := range s.parallel {
		p.Close()
	}
	if s.postData != nil {
		s.postData.close()
		s.postData = nil
	}
	if s.workers != nil {
		s.workers.close()
	}
	if s.exporter != nil {
		s.exporter.Close(context.Background())
		s.exporter = nil
	}
	return nil
}

// batchedSocketBuffer is what a worker connection reads from its socket at
// most at once.
const batchedSocketBuffer = 256 << 10

// batchedSocket reads a worker connection's socket for pgx through a
// buffer, in batches: after a read that found less than ospipe.Batch, it
// waits ospipe.Pause before reading again, so that a COPY's rows, which
// the server sends faster than nothing but slower than this reads them,
// gather in the socket instead of waking this process for each segment
// (as ospipe's Reader does for a program's pipe). A worker only joins the
// snapshot and runs COPY: the pause costs its few round trips 2 ms each.
type batchedSocket struct {
	r      io.Reader
	buf    []byte
	rp, wp int
	short  bool
	err    error // the socket's, to return once buf is drained
}

func (b *batchedSocket) Read(p []byte) (int, error) {
	if b.rp == b.wp {
		if err := b.err; err != nil {
			b.err = nil // once: a deadline's timeout passes
			return 0, err
		}
		if b.short {
			time.Sleep(ospipe.Pause)
		}
		n, err := b.r.Read(b.buf)
		b.rp, b.wp, b.short = 0, n, n < ospipe.Batch
		if n == 0 {
			return 0, err
		}
		b.err = err // after the n bytes
	}
	n := copy(p, b.buf[b.rp:b.wp])
	b.rp += n
	return n, nil
}
