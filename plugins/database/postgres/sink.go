package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/pipebackup/pipe/plugins/internal/command"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/ospipe"
)

// defaultSettings give index builds more memory than the server's default
// 64MB, so a large table's index sort stays in memory. Not
// synchronous_commit = off: a restore is a few large transactions, and on
// the bench machine it made pg_restore of a 1.4 GB database 24% slower
// (42.8 s against 34.4 s, PGOPTIONS on the reference pipeline).
var defaultSettings = map[string]string{"maintenance_work_mem": "256MB"}

type sinkConfig struct {
	connConfig
	Jobs          int64             `pipe:"jobs"`
	Create        bool              `pipe:"create"`
	Clean         bool              `pipe:"clean"`
	NoOwner       bool              `pipe:"no_owner"`
	Globals       bool              `pipe:"globals"`
	Settings      map[string]string `pipe:"settings"`
	PgRestore     string            `pipe:"pg_restore"`
	Psql          string            `pipe:"psql"`
	MaintenanceDB string            `pipe:"maintenance_database"`
	Databases     []string          `pipe:"databases"`
}

// SinkType is the "postgres" sink.
type SinkType struct{}

var _ sdk.SinkType = SinkType{}

func (SinkType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Restores into a PostgreSQL database: custom-format dumps (*.dump) with pg_restore, plain SQL (*.sql) with psql, and a parallel-mode backup schema first, then the tables' data on jobs connections at once, then indexes and constraints with pg_restore --jobs. A failed statement fails the run with the server's message.",
		Attributes: append(connAttributes(),
			sdk.Attribute{Name: "jobs", Type: sdk.Number, Default: int64(1), Description: "Tables loaded at once, and pg_restore's --jobs for indexes and constraints, when restoring a parallel-mode backup (with databases: per database of a cluster backup read table by table); the run then moves at least this many streams at once."},
			sdk.Attribute{Name: "create", Type: sdk.Bool, Default: false, Description: "Create the database first if it does not exist."},
			sdk.Attribute{Name: "clean", Type: sdk.Bool, Default: false, Description: "Drop the database and create it anew before restoring: everything in it is lost."},
			sdk.Attribute{Name: "no_owner", Type: sdk.Bool, Default: false, Description: "Do not restore ownership and privileges (pg_restore --no-owner --no-acl): for a server without the original roles."},
			sdk.Attribute{Name: "globals", Type: sdk.Bool, Default: false, Description: "Apply globals.sql (roles, tablespaces) when the backup has it, skipping statements that fail (roles that exist). Otherwise it is read and ignored."},
			sdk.Attribute{Name: "settings", Type: sdk.StringMap, Description: `Session settings for the restore (PGOPTIONS and the data connections). Default: { maintenance_work_mem = "256MB" }; giving settings replaces them.`},
			sdk.Attribute{Name: "pg_restore", Type: sdk.String, Default: "pg_restore", Description: "The pg_restore program."},
			sdk.Attribute{Name: "psql", Type: sdk.String, Default: "psql", Description: "The psql program."},
			sdk.Attribute{Name: "maintenance_database", Type: sdk.String, Default: "postgres", Description: "The database connected to for create and clean."},
			sdk.Attribute{Name: "databases", Type: sdk.StringList, Public: true, Description: `Cluster restore: the databases of a cluster backup (the postgres source's databases) to restore, by name or pattern (["*"]: all; ["shop"]), several at once (the pipeline's streams), globals.sql first (roles that exist are kept). Each is created by pg_restore --create through maintenance_database, with its owner, settings and privileges; a database that exists is refused unless clean = true drops it first. The others are not read at all (not downloaded, not decrypted).`},
		),
	}
}

func (SinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	var c sinkConfig
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	cn, diags := newConn(c.connConfig)
	if diags.HasErrors() {
		return nil, diags
	}
	if c.Jobs < 1 || c.Jobs > 1024 {
		return nil, sdk.AttrError("jobs", "invalid jobs", fmt.Sprintf("jobs = %d: give 1 up to 1024 tables at once", c.Jobs))
	}
	if d := checkPatterns("databases", c.Databases); d != nil {
		return nil, d
	}
	if len(c.Databases) > 0 {
		if c.Create {
			return nil, sdk.AttrError("create", "create with databases", "a cluster restore always creates each database (pg_restore --create): remove create")
		}
		if c.Globals {
			return nil, sdk.AttrError("globals", "globals with databases", "a cluster restore always applies globals.sql first: remove globals")
		}
		if cn.database != "" && cn.database != c.MaintenanceDB {
			return nil, sdk.AttrError("database", "database with databases", fmt.Sprintf("a cluster restore creates each database through maintenance_database (%q); database = %q would be ignored: remove it", c.MaintenanceDB, cn.database))
		}
		cn = cn.withDatabase(c.MaintenanceDB)
	}
	if (c.Create || c.Clean) && cn.database == "" {
		return nil, sdk.AttrError("database", "no database to create", "create and clean need the database's name: set database (or dbname in dsn)")
	}
	if c.Settings == nil {
		c.Settings = defaultSettings
	}
	for _, t := range []struct {
		attr string
		path *string
	}{{"pg_restore", &c.PgRestore}, {"psql", &c.Psql}} {
		var d sdk.Diagnostics
		if *t.path, d = lookTool(t.attr, *t.path); d != nil {
			return nil, d
		}
	}
	sk := &Sink{c: c, conn: cn, preDone: make(chan struct{})}
	if len(c.Databases) > 0 {
		sk.cluster = &clusterSink{include: c.Databases}
	}
	close(sk.preDone) // no schema stream to wait for, unless Prepare finds one
	sk.loaders = newPool(int(c.Jobs), func(ctx context.Context) (*pgx.Conn, error) { return cn.connect(ctx, c.Settings) })
	return sk, nil
}

// Sink restores streams into one database, or in cluster mode several
// (cluster.go).
type Sink struct {
	c       sinkConfig
	conn    conn
	cluster *clusterSink
	// parent is the cluster restore a database read table by table
	// belongs to: its schema stream creates the database through the
	// parent's connection (see Sink.databaseSink).
	parent *Sink

	// Parallel mode, from Prepare: data waits for the schema, indexes and
	// constraints wait for the data.
	hasPre  bool
	preDone chan struct{} // closed when pre-data ended
	preErr  error
	data    sync.WaitGroup
	mu      sync.Mutex
	dataErr error
	loaders *connPool
}

var (
	_ sdk.Sink            = (*Sink)(nil)
	_ sdk.Preparer        = (*Sink)(nil)
	_ sdk.PartialPreparer = (*Sink)(nil)
	_ io.Closer           = (*Sink)(nil)
)

// Prepare creates or cleans the database and learns whether the run has a
// schema stream the data must wait for and how many table streams the
// indexes wait for.
func (s *Sink) Prepare(ctx context.Context, objs []sdk.Object) error {
	if s.cluster != nil {
		return s.clusterPrepare(ctx, objs)
	}
	for _, o := range objs {
		if db, _, ok := parallelStream(o.Stream); ok {
			return fmt.Errorf("stream %q is database %q of a cluster backup read table by table: restore it with databases = [%q] (or [\"*\"] for all of them)", o.Stream, db, db)
		}
	}
	if s.c.Create || s.c.Clean {
		if err := s.createDatabase(ctx); err != nil {
			return err
		}
	}
	for _, o := range objs {
		if o.Stream == streamPreData {
			s.hasPre = true
		}
		if _, _, ok := parseTableStream(o.Stream); ok || o.Stream == streamSequences {
			s.data.Add(1)
		}
	}
	if s.hasPre {
		s.preDone = make(chan struct{})
	}
	return nil
}

func (s *Sink) createDatabase(ctx context.Context) error {
	pc, err := s.conn.withDatabase(s.c.MaintenanceDB).connect(ctx, nil)
	if err != nil {
		return err
	}
	defer pc.Close(context.Background())
	id := quoteIdent(s.conn.database)
	if s.c.Clean {
		if err := dropDatabase(ctx, pc, s.conn.database); err != nil {
			return err
		}
	}
	var exists bool
	if err := pc.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", s.conn.database).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := pc.Exec(ctx, "CREATE DATABASE "+id); err != nil {
			return fmt.Errorf("creating database %s: %w", id, err)
		}
	}
	return nil
}

// dropDatabase drops db if it exists, ending its sessions (PostgreSQL 13
// and later).
func dropDatabase(ctx context.Context, pc *pgx.Conn, db string) error {
	var num int
	if err := pc.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		return err
	}
	drop := "DROP DATABASE IF EXISTS " + quoteIdent(db)
	if num >= 130000 {
		drop += " WITH (FORCE)"
	}
	if _, err := pc.Exec(ctx, drop); err != nil {
		return fmt.Errorf("clean: dropping database %s: %w", quoteIdent(db), err)
	}
	return nil
}

func (s *Sink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	if s.cluster != nil {
		return s.clusterCreate(ctx, obj)
	}
	restore := s.conn.tool(s.c.PgRestore, s.restoreArgs()...)
	switch name := obj.Stream; {
	case name == streamGlobals:
		if !s.c.Globals {
			return discard{}, nil
		}
		return command.Write(ctx, s.conn.spec(s.conn.tool(s.c.Psql, "-X", "-q", "-v", "ON_ERROR_STOP=0"), s.c.Settings))
	case name == streamPreData:
		spec := s.conn.spec(restore, s.c.Settings)
		if s.parent != nil {
			// The schema creates the database: pg_restore --create
			// through the maintenance database, once the globals are in.
			if err := s.parent.clusterReady(ctx, s.conn.database); err != nil {
				s.endPre(err)
				return nil, err
			}
			spec = s.parent.conn.spec(s.parent.conn.tool(s.c.PgRestore, s.restoreArgs("--create")...), s.c.Settings)
		}
		w, err := command.Write(ctx, spec)
		if err != nil {
			s.endPre(err)
			return nil, err
		}
		return &preWriter{Writer: w, s: s}, nil
	case name == streamPostData:
		return s.postData(restore)
	case name == streamSequences:
		return s.sequences(ctx)
	case strings.HasSuffix(name, dataExt):
		schema, tbl, ok := parseTableStream(name)
		if !ok {
			return nil, fmt.Errorf("stream %q: not a table's data (data/<schema>/<table>.copy)", name)
		}
		return s.copyIn(ctx, schema, tbl)
	case strings.HasSuffix(name, ".dump"):
		return command.Write(ctx, s.conn.spec(restore, s.c.Settings))
	case strings.HasSuffix(name, ".sql"):
		return command.Write(ctx, s.conn.spec(s.conn.tool(s.c.Psql, "-X", "-q", "-v", "ON_ERROR_STOP=1"), s.c.Settings))
	default:
		return nil, fmt.Errorf("stream %q: not a PostgreSQL dump (pipe restores *.dump with pg_restore, *.sql with psql and data/<schema>/<table>.copy with COPY)", name)
	}
}

// restoreArgs are pg_restore's options for this sink, then more.
func (s *Sink) restoreArgs(more ...string) []string {
	args := []string{"--exit-on-error"}
	if s.c.NoOwner {
		args = append(args, "--no-owner", "--no-acl")
	}
	return append(args, more...)
}

// discard is an object nobody keeps.
type discard struct{}

func (discard) Write(b []byte) (int, error)      { return len(b), nil }
func (discard) Commit(ctx context.Context) error { return nil }
func (discard) Abort(ctx context.Context) error  { return nil }

// endPre records how the schema stream ended and lets the data go (or
// fail).
func (s *Sink) endPre(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.preDone:
		return
	default:
	}
	if err != nil {
		s.preErr = err
	}
	close(s.preDone)
}

// waitPre waits for the schema before a table's data goes in.
func (s *Sink) waitPre(ctx context.Context) error {
	select {
	case <-s.preDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.preErr != nil {
		return fmt.Errorf("the schema (%s) was not restored: %w", streamPreData, s.preErr)
	}
	return nil
}

type preWriter struct {
	*command.Writer
	s *Sink
}

func (w *preWriter) Commit(ctx context.Context) error {
	err := w.Writer.Commit(ctx)
	w.s.endPre(err)
	return err
}

func (w *preWriter) Abort(ctx context.Context) error {
	err := w.Writer.Abort(ctx)
	w.s.endPre(errors.New("aborted"))
	return err
}

// endData records a table's (or the sequences') end.
func (s *Sink) endData(err error) {
	if err != nil {
		s.mu.Lock()
		if s.dataErr == nil {
			s.dataErr = err
		}
		s.mu.Unlock()
	}
	s.data.Done()
}

// copyIn loads one table's rows with COPY FROM STDIN on a loader
// connection; the table's rows are visible only if all arrived (COPY is one
// statement).
func (s *Sink) copyIn(ctx context.Context, schema, tbl string) (sdk.ObjectWriter, error) {
	id := pgx.Identifier{schema, tbl}.Sanitize()
	if err := s.waitPre(ctx); err != nil {
		s.endData(err)
		return nil, err
	}
	pc, err := s.loaders.get(ctx)
	if err != nil {
		s.endData(err)
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		s.loaders.put(pc)
		s.endData(err)
		return nil, err
	}
	ospipe.Grow(pw) // pipe writes a MiB per wakeup, pgx reads 64 KiB at a time
	w := &copyWriter{w: pw, done: make(chan struct{}), s: s, table: id}
	in := &abortable{r: pr, aborted: &w.aborted}
	go func() {
		w.err = serverGone(s.load(ctx, pc, id, in))
		pr.Close()
		s.loaders.put(pc)
		close(w.done) // not deferred: a panic must end the process, not the table's load
	}()
	return w, nil
}

// load runs the COPY. When this run created the table (its schema stream
// came first), the table is truncated and loaded in one transaction with
// FREEZE: its rows are written frozen, so the index builds and the first
// reads after the restore do not rewrite every page to set hint bits.
func (s *Sink) load(ctx context.Context, pc *pgx.Conn, id string, in io.Reader) error {
	if !s.hasPre {
		_, err := pc.PgConn().CopyFrom(ctx, in, "COPY "+id+" FROM STDIN")
		return err
	}
	if _, err := pc.Exec(ctx, "BEGIN"); err != nil {
		return err
	}
	_, err := pc.Exec(ctx, "TRUNCATE ONLY "+id)
	if err == nil {
		_, err = pc.PgConn().CopyFrom(ctx, in, "COPY "+id+" FROM STDIN (FREEZE)")
	}
	if err == nil {
		_, err = pc.Exec(ctx, "COMMIT")
		return err
	}
	if !pc.IsClosed() {
		_, _ = pc.Exec(context.WithoutCancel(ctx), "ROLLBACK") // err says what failed
	}
	return err
}

// copyWriter feeds a COPY through an OS pipe: across the plugin boundary
// pipe writes the pipe itself.
type copyWriter struct {
	w       *os.File
	done    chan struct{}
	err     error // COPY's, after done
	aborted atomic.Bool
	s       *Sink
	table   string
	once    sync.Once
}

var _ sdk.FileWriter = (*copyWriter)(nil)

func (w *copyWriter) File() *os.File { return w.w }

func (w *copyWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	if err != nil {
		<-w.done
		if w.err != nil {
			return n, fmt.Errorf("loading %s: %w", w.table, w.err)
		}
	}
	return n, err
}

func (w *copyWriter) Commit(ctx context.Context) error {
	w.w.Close()
	<-w.done
	err := w.err
	if err != nil {
		err = fmt.Errorf("loading %s: %w", w.table, err)
	}
	w.once.Do(func() { w.s.endData(err) })
	return err
}

// Abort fails the COPY (the end of its input reads as an error, so pgx
// sends CopyFail): the server discards every row of it.
func (w *copyWriter) Abort(ctx context.Context) error {
	w.aborted.Store(true)
	w.w.Close()
	<-w.done
	w.once.Do(func() { w.s.endData(fmt.Errorf("loading %s: aborted", w.table)) })
	return nil
}

// abortable reads a pipe whose end is an error once aborted is set.
type abortable struct {
	r       *os.File
	aborted *atomic.Bool
}

func (a *abortable) Read(b []byte) (int, error) {
	n, err := a.r.Read(b)
	if err == io.EOF && a.aborted.Load() {
		return n, errors.New("aborted by pipe")
	}
	return n, err
}

// sequences sets the sequences' values once the schema is there.
func (s *Sink) sequences(ctx context.Context) (sdk.ObjectWriter, error) {
	if err := s.waitPre(ctx); err != nil {
		s.endData(err)
		return nil, err
	}
	return &sequenceWriter{s: s}, nil
}

// maxSequences bounds the setval statements held in memory (about a
// million sequences).
const maxSequences = 128 << 20

type sequenceWriter struct {
	s    *Sink
	b    bytes.Buffer
	once sync.Once
}

func (w *sequenceWriter) Write(b []byte) (int, error) {
	if w.b.Len()+len(b) > maxSequences {
		return 0, fmt.Errorf("%s is larger than %d MiB: not a sequences stream", streamSequences, maxSequences>>20)
	}
	return w.b.Write(b)
}

func (w *sequenceWriter) Commit(ctx context.Context) error {
	err := w.apply(ctx)
	w.once.Do(func() { w.s.endData(err) })
	return err
}

func (w *sequenceWriter) apply(ctx context.Context) error {
	pc, err := w.s.loaders.get(ctx)
	if err != nil {
		return err
	}
	defer w.s.loaders.put(pc)
	if _, err := pc.PgConn().Exec(ctx, w.b.String()).ReadAll(); err != nil {
		return fmt.Errorf("setting sequences: %w", err)
	}
	return nil
}

func (w *sequenceWriter) Abort(ctx context.Context) error {
	w.once.Do(func() { w.s.endData(errors.New("sequences: aborted")) })
	return nil
}

// postData keeps the indexes and constraints in a temporary file (pg_restore
// --jobs needs a file it can seek) and restores them once every table is
// loaded.
func (s *Sink) postData(restore []string) (sdk.ObjectWriter, error) {
	f, err := os.CreateTemp("", "pipe-post-data-*.dump")
	if err != nil {
		return nil, fmt.Errorf("post-data needs a temporary file: %w", err)
	}
	return &postWriter{f: f, s: s, restore: restore}, nil
}

type postWriter struct {
	f       *os.File
	s       *Sink
	restore []string
}

func (w *postWriter) Write(b []byte) (int, error) { return w.f.Write(b) }

func (w *postWriter) Commit(ctx context.Context) error {
	defer os.Remove(w.f.Name())
	if err := w.f.Close(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { w.s.data.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.s.mu.Lock()
	derr := w.s.dataErr
	w.s.mu.Unlock()
	if derr != nil {
		return fmt.Errorf("indexes and constraints not built: %w", derr)
	}
	args := append(w.restore, fmt.Sprintf("--jobs=%d", w.s.c.Jobs), w.f.Name())
	return command.New(ctx, w.s.conn.spec(args, w.s.c.Settings)).Run()
}

func (w *postWriter) Abort(ctx context.Context) error {
	w.f.Close()
	os.Remove(w.f.Name())
	return nil
}

// Close closes the loader connections.
func (s *Sink) Close() error {
	if s.cluster != nil {
		for _, d := range s.cluster.parallel {
			d.Close()
		}
	}
	s.loaders.close()
	return nil
}
