package postgres

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/pipebackup/pipe/plugins/internal/command"
	"github.com/pipebackup/pipe/plugins/internal/dbselect"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Cluster mode (databases = [...]): every database of a server that the
// patterns name, each dumped by a pg_dump of its own into a stream named
// after it (<database>.dump), after the globals (roles, tablespaces). The
// databases stand alone: one that fails (dropped mid-run, not readable by
// the backup's role) does not stop the others (sdk.Independent).

// maintenanceDB is the database cluster mode connects to when none is
// given, and which a pattern never picks.
const maintenanceDB = "postgres"

// clusterDatabase is a database of the server, and what a run knows of it.
type clusterDatabase struct {
	name string
	size int64 // -1 when the role may not connect to it
}

// listDatabases reads the server's databases that can be connected to
// and are not templates, largest first (the long dumps start early).
func listDatabases(ctx context.Context, pc *pgx.Conn) ([]clusterDatabase, error) {
	rows, err := pc.Query(ctx, `
SELECT datname, CASE WHEN has_database_privilege(oid, 'CONNECT') THEN pg_database_size(oid) ELSE -1 END
FROM pg_database
WHERE datallowconn AND NOT datistemplate
ORDER BY 2 DESC, 1`)
	if err != nil {
		return nil, fmt.Errorf("listing the server's databases: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (clusterDatabase, error) {
		var d clusterDatabase
		err := r.Scan(&d.name, &d.size)
		return d, err
	})
}

// checkPatterns refuses a malformed pattern.
func checkPatterns(attr string, pats []string) sdk.Diagnostics {
	if err := dbselect.Check(pats); err != nil {
		return sdk.AttrError(attr, "invalid databases", err.Error())
	}
	return nil
}

// chooseDatabases picks the databases the patterns name, less those
// exclude names (see dbselect.Choose). A pattern never picks the
// maintenance database (it is empty on most servers).
func chooseDatabases(all []clusterDatabase, include, exclude []string, maintenance string) ([]clusterDatabase, error) {
	names := make([]string, len(all))
	for i, d := range all {
		names[i] = d.name
	}
	picked, err := dbselect.Choose(names, include, exclude, func(n string) bool { return n == maintenance })
	if err != nil {
		return nil, err
	}
	var out []clusterDatabase
	for _, d := range all {
		if slices.Contains(picked, d.name) {
			out = append(out, d)
		}
	}
	return out, nil
}

// clusterStreams lists the globals and the chosen databases' streams.
func (s *Source) clusterStreams(ctx context.Context, pc *pgx.Conn) ([]sdk.StreamInfo, error) {
	all, err := listDatabases(ctx, pc)
	if err != nil {
		return nil, err
	}
	dbs, err := chooseDatabases(all, s.c.Databases, s.c.ExcludeDatabases, maintenanceDB)
	if err != nil {
		return nil, err
	}
	// Without superuser, pg_dumpall cannot read pg_authid: the roles
	// are dumped without their passwords.
	var super bool
	if err := pc.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		return nil, fmt.Errorf("reading the role's privileges: %w", err)
	}
	s.globalsArgs = []string{"--globals-only"}
	if !super {
		s.globalsArgs = append(s.globalsArgs, "--no-role-passwords")
		s.facts["role_passwords"] = "omitted (the backup's role is not a superuser)"
	}
	ext := ".dump"
	if s.c.Format == "plain" {
		ext = ".sql"
	}
	streams := []sdk.StreamInfo{{Name: streamGlobals, Size: -1}}
	s.databases = map[string]string{}
	var total int64
	var whole []string // databases dumped whole instead of table by table, and why
	for _, d := range dbs {
		name := escapeName(d.name) + ext
		if name == streamGlobals {
			return nil, fmt.Errorf("database %q would be stored as %s, the globals' stream: exclude it (exclude_databases) and dump it with a pipeline of its own", d.name, name)
		}
		if d.size > 0 {
			total += d.size
		}
		if s.c.Jobs > 1 {
			st, err := s.parallelDatabase(ctx, d.name)
			if err == nil {
				streams = append(streams, st...)
				continue
			}
			whole = append(whole, fmt.Sprintf("%s (%s)", d.name, err))
		}
		s.databases[name] = d.name
		streams = append(streams, sdk.StreamInfo{Name: name, Size: -1})
	}
	if len(whole) > 0 {
		s.facts["dumped_whole"] = strings.Join(whole, "; ")
	}
	delete(s.facts, "database")
	s.facts["databases"] = strconv.Itoa(len(dbs))
	s.facts["size_bytes"] = strconv.FormatInt(total, 10)
	return streams, nil
}

// parallelDatabase lists a database's streams read table by table on a
// snapshot of its own (cluster mode with jobs > 1), named under
// <database>/: <database>/pre-data.dump (which creates the database),
// <database>/data/<schema>/<table>.copy, … The snapshot is exported now
// and held until the run ends, so every database is read as it was when
// the run started. The server and pg_dump were checked by Streams. A
// database that cannot be read so (the role may not connect, it has large
// objects) gets the error: it is dumped whole by pg_dump, and stands or
// fails as such.
func (s *Source) parallelDatabase(ctx context.Context, db string) ([]sdk.StreamInfo, error) {
	c := s.c
	c.Databases, c.ExcludeDatabases, c.Globals = nil, nil, false
	p := &Source{c: c, conn: s.conn.withDatabase(db), inCluster: true}
	pc, err := p.conn.connect(ctx, nil)
	if err != nil {
		return nil, err
	}
	if p.streams, _, err = p.parallelStreams(ctx, pc); err != nil {
		pc.Close(context.Background())
		return nil, err
	}
	if s.parallel == nil {
		s.parallel = map[string]*Source{}
	}
	s.parallel[escapeName(db)] = p
	out := make([]sdk.StreamInfo, len(p.streams))
	for i, x := range p.streams {
		out[i] = sdk.StreamInfo{Name: escapeName(db) + "/" + x.Name, Size: x.Size}
	}
	return out, nil
}

// Independent reports whether the streams stand alone: in cluster mode,
// each database's dump, or each database's streams together (those
// under <database>/, see sdk.Independent).
func (s *Source) Independent() bool { return s.databases != nil }

// clusterSink is the sink's cluster mode (databases = [...]): each
// database of a cluster backup that the patterns pick is created and
// restored by pg_restore --create (psql for plain dumps) through the
// maintenance database, after the globals.
type clusterSink struct {
	include []string
	// absent are the databases of the run that failed in the backup (see
	// PreparePartial): a name may pick one, and the run then fails.
	absent []string
	// globalsDone is closed when globals.sql was applied (or failed), if
	// the run has it; the databases wait for it (their owners are roles).
	globalsDone chan struct{}
	// parallel restores, by database, those of a backup read table by
	// table (<database>/pre-data.dump, …), each as a parallel-mode
	// restore of its own.
	parallel map[string]*Sink
}

// parallelStream splits a stream of a database read table by table
// (<database>/<stream>, see Source.parallelDatabase) into the database
// and the stream's name in that database.
func parallelStream(stream string) (db, name string, ok bool) {
	base, name, ok := strings.Cut(stream, "/")
	if !ok {
		return "", "", false
	}
	switch _, _, table := parseTableStream(name); {
	case table, name == streamPreData, name == streamSequences, name == streamPostData:
	default:
		return "", "", false
	}
	db, err := url.PathUnescape(base)
	return db, name, err == nil && db != ""
}

// databaseSink is the restore of one database of a cluster backup read
// table by table: a parallel-mode restore into it, jobs tables at once,
// whose schema stream creates it (see Sink.Create).
func (s *Sink) databaseSink(db string) *Sink {
	c := s.c
	c.Databases, c.Create, c.Clean, c.Globals = nil, false, false, false
	d := &Sink{c: c, conn: s.conn.withDatabase(db), parent: s, preDone: make(chan struct{})}
	close(d.preDone)
	d.loaders = newPool(int(c.Jobs), func(ctx context.Context) (*pgx.Conn, error) { return d.conn.connect(ctx, c.Settings) })
	return d
}

// streamDatabase is the database a cluster stream holds, or "".
func streamDatabase(stream string) string {
	for _, ext := range []string{".dump", ".sql"} {
		if base, ok := strings.CutSuffix(stream, ext); ok && stream != streamGlobals && !strings.Contains(base, "/") {
			if db, err := url.PathUnescape(base); err == nil {
				return db
			}
		}
	}
	return ""
}

// picks reports whether the sink restores database db.
// Declines names the streams the restore skips (see sdk.Chooser): in a
// cluster restore, the databases it does not pick; otherwise globals.sql
// unless globals is set.
func (s *Sink) Declines(objs []sdk.Object) []bool {
	out := make([]bool, len(objs))
	for i, o := range objs {
		switch {
		case s.cluster != nil:
			db := streamDatabase(o.Stream)
			if p, _, ok := parallelStream(o.Stream); ok {
				db = p
			}
			out[i] = db != "" && !s.cluster.picks(db)
		case o.Stream == streamGlobals:
			out[i] = !s.c.Globals
		}
	}
	return out
}

func (c *clusterSink) picks(db string) bool {
	for _, p := range c.include {
		if p == db || dbselect.Match(p, db) {
			return true
		}
	}
	return false
}

// clusterPrepare checks the run against the patterns (a name must be one
// of the run's databases, and something must be picked) and prepares the
// restore of each picked database read table by table.
func (s *Sink) clusterPrepare(ctx context.Context, objs []sdk.Object) error {
	c := s.cluster
	var dbs []string
	tables := map[string][]sdk.Object{} // the streams of databases read table by table
	for _, o := range objs {
		if o.Stream == streamGlobals {
			c.globalsDone = make(chan struct{})
		} else if db, name, ok := parallelStream(o.Stream); ok {
			if _, seen := tables[db]; !seen {
				dbs = append(dbs, db)
			}
			o.Stream = name
			tables[db] = append(tables[db], o)
		} else if db := streamDatabase(o.Stream); db != "" {
			dbs = append(dbs, db)
		}
	}
	c.parallel = map[string]*Sink{}
	for db, objs := range tables {
		if c.picks(db) {
			c.parallel[db] = s.databaseSink(db)
			if err := c.parallel[db].Prepare(ctx, objs); err != nil {
				return err
			}
		}
	}
	failed := ""
	if len(c.absent) > 0 {
		failed = "; failed in the backup: " + strings.Join(c.absent, ", ")
	}
	for _, p := range c.include {
		if !dbselect.IsPattern(p) && !slices.Contains(dbs, p) && !slices.Contains(c.absent, p) {
			return fmt.Errorf("databases: %q is not in the run (it holds: %s%s)", p, strings.Join(dbs, ", "), failed)
		}
	}
	for _, db := range append(slices.Clip(dbs), c.absent...) {
		if c.picks(db) {
			return nil // one that failed in the backup: the host names it and fails the run
		}
	}
	return fmt.Errorf("databases: %s picks none of the run's databases (%s%s)", strconv.Quote(strings.Join(c.include, `", "`)), strings.Join(dbs, ", "), failed)
}

// PreparePartial prepares the restore of a partial run (see
// sdk.PartialPreparer): a name may pick a database that failed in the
// backup, and the answer says, of each failed stream, whether the
// restore asked for its database. globals.sql, and every stream of a
// restore into one database, counts as asked for.
func (s *Sink) PreparePartial(ctx context.Context, objs []sdk.Object, failed []string) ([]bool, error) {
	wanted := make([]bool, len(failed))
	for i, f := range failed {
		wanted[i] = true
		if s.cluster == nil {
			continue
		}
		db := streamDatabase(f)
		if p, _, ok := parallelStream(f); ok {
			db = p
		}
		if db == "" {
			continue
		}
		wanted[i] = s.cluster.picks(db)
		if !slices.Contains(s.cluster.absent, db) {
			s.cluster.absent = append(s.cluster.absent, db)
		}
	}
	return wanted, s.Prepare(ctx, objs)
}

// clusterCreate starts one stream of a cluster restore.
func (s *Sink) clusterCreate(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	c := s.cluster
	name := obj.Stream
	if db, inDB, ok := parallelStream(name); ok {
		if d := c.parallel[db]; d != nil {
			obj.Stream = inDB
			return d.Create(ctx, obj)
		}
		return discard{}, nil
	}
	if name == streamGlobals {
		w, err := command.Write(ctx, s.conn.spec(s.conn.tool(s.c.Psql, "-X", "-q", "-v", "ON_ERROR_STOP=0"), s.c.Settings))
		if err != nil {
			close(c.globalsDone)
			return nil, err
		}
		return &doneWriter{Writer: w, done: c.globalsDone}, nil
	}
	db := streamDatabase(name)
	if db == "" {
		return nil, fmt.Errorf("stream %q: not a database of a cluster backup (<database>.dump or .sql, and globals.sql)", name)
	}
	if !c.picks(db) {
		return discard{}, nil
	}
	if err := s.clusterReady(ctx, db); err != nil {
		return nil, err
	}
	if strings.HasSuffix(name, ".sql") {
		return command.Write(ctx, s.conn.spec(s.conn.tool(s.c.Psql, "-X", "-q", "-v", "ON_ERROR_STOP=1"), s.c.Settings))
	}
	return command.Write(ctx, s.conn.spec(s.conn.tool(s.c.PgRestore, s.restoreArgs("--create")...), s.c.Settings))
}

// clusterReady readies the server for database db's restore: it waits
// for the globals (the database's owner is a role), and with clean drops
// db first.
func (s *Sink) clusterReady(ctx context.Context, db string) error {
	if done := s.cluster.globalsDone; done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !s.c.Clean {
		return nil
	}
	pc, err := s.conn.connect(ctx, nil)
	if err != nil {
		return err
	}
	defer pc.Close(context.Background())
	return dropDatabase(ctx, pc, db)
}

// doneWriter closes done when its object ends, committed or not.
type doneWriter struct {
	*command.Writer
	done chan struct{}
	once sync.Once
}

func (w *doneWriter) Commit(ctx context.Context) error {
	defer w.once.Do(func() { close(w.done) })
	return w.Writer.Commit(ctx)
}

func (w *doneWriter) Abort(ctx context.Context) error {
	defer w.once.Do(func() { close(w.done) })
	return w.Writer.Abort(ctx)
}
