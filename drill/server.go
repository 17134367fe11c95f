// Package drill proves that a backup restores: it starts a scratch
// database server (a container of the image a drill block names, on a free
// local port), which a restore pipeline is pointed at, runs the drill's
// checks against it (queries and their expected results, pg_amcheck), and
// removes the server.
package drill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Runner runs a program to its end and returns what it printed on its
// standard output; an error holds its exit status and the end of what it
// printed on standard error.
type Runner func(ctx context.Context, argv []string) (string, error)

// Kind is a database server a drill can start.
type Kind struct {
	// Sink is the sink type that restores into it.
	Sink string
	// Port is the server's port inside the container.
	Port int
	// User is the superuser pipe restores and checks as.
	User string
	// Env makes the image's server start without a password.
	Env []string
	// Args are the server's settings: a scratch server is thrown away
	// after the drill, so it need not survive a crash, and does not flush
	// to disk (a restore drill proves the backup, not the disk).
	Args []string
	// Ready is a command run in the container that succeeds once the
	// server takes connections over TCP (the image's first start, which
	// initialises the data directory, listens on no TCP port).
	Ready []string
	// query is the command that prints a query's result, rows on lines
	// and columns separated by |.
	query func(database, q string) []string
}

// Kinds are the servers a drill can start, by the sink type that
// restores into them.
var Kinds = map[string]*Kind{
	"postgres": {
		Sink: "postgres", Port: 5432, User: "postgres",
		Env:   []string{"POSTGRES_HOST_AUTH_METHOD=trust", "POSTGRES_INITDB_ARGS=--no-sync"},
		Args:  []string{"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"},
		Ready: []string{"psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-AtXc", "SELECT 1"},
		query: func(db, q string) []string {
			return []string{"psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-AtX", "-F", "|", "-v", "ON_ERROR_STOP=1", "-c", q}
		},
	},
	"mysql": {
		Sink: "mysql", Port: 3306, User: "root",
		Env:   []string{"MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=1", "MYSQL_ALLOW_EMPTY_PASSWORD=1"},
		Args:  []string{"--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0", "--sync-binlog=0"},
		Ready: []string{"sh", "-c", `exec "$(command -v mariadb || command -v mysql)" -h127.0.0.1 -uroot -e 'SELECT 1'`},
		query: func(db, q string) []string {
			return []string{"sh", "-c", `exec "$(command -v mariadb || command -v mysql)" -h127.0.0.1 -uroot -N -B "$1" -e "$2" | tr '\t' '|'`, "sh", db, q}
		},
	},
}

// Server is a scratch database server in a container.
type Server struct {
	Kind  *Kind
	Image string
	// Name is the container's name; Port the local port it is reached on
	// (127.0.0.1 only; 0 for a restored base backup, reached over its
	// socket only).
	Name string
	Port int
	run  Runner // docker's commands
	raw  Runner // any program
	// user, socket and scratch: a server recovered from a base backup is
	// reached as its own superuser over its Unix socket, and its scratch
	// folder goes with it.
	user    string
	socket  bool
	scratch *Scratch
	docker  string
}

// newServer names a server of kind k from image, run with o.
func newServer(k *Kind, image string, o Options) *Server {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &Server{Kind: k, Image: image, Name: "pipe-drill-" + hex.EncodeToString(b), raw: o.Run, docker: o.Docker, user: k.User}
	s.run = func(ctx context.Context, argv []string) (string, error) {
		return o.Run(ctx, append([]string{o.Docker}, argv...))
	}
	return s
}

// Options say how to reach docker.
type Options struct {
	// Docker is the docker CLI (default "docker").
	Docker string
	// Run runs it.
	Run Runner
	// Wait is how long the server may take to accept connections
	// (default 2 minutes).
	Wait time.Duration
}

// Start starts a container of image for the sink type sink on a free
// local port, and waits until it takes connections. The container is
// removed when it stops (--rm); Close stops it.
func Start(ctx context.Context, sink, image string, o Options) (*Server, error) {
	k := Kinds[sink]
	if k == nil {
		return nil, fmt.Errorf("a drill restores into a postgres or mysql sink, not %s", sink)
	}
	if o.Docker == "" {
		o.Docker = "docker"
	}
	if o.Wait == 0 {
		o.Wait = 2 * time.Minute
	}
	s := newServer(k, image, o)
	argv := []string{"run", "--detach", "--rm", "--name", s.Name, "--label", "pipe.drill=1", "--publish", "127.0.0.1::" + strconv.Itoa(k.Port)}
	for _, e := range k.Env {
		argv = append(argv, "--env", e)
	}
	if _, err := s.run(ctx, append(append(argv, image), k.Args...)); err != nil {
		return nil, fmt.Errorf("starting a scratch server (docker run %s): %w", image, err)
	}
	if err := s.start(ctx, o.Wait); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// start finds the container's port and waits for the server.
func (s *Server) start(ctx context.Context, wait time.Duration) error {
	out, err := s.run(ctx, []string{"port", s.Name, strconv.Itoa(s.Kind.Port) + "/tcp"})
	if err != nil {
		return fmt.Errorf("the scratch server's port: %w", err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	_, port, err := net.SplitHostPort(line)
	if err != nil {
		return fmt.Errorf("the scratch server's port: docker port said %q", line)
	}
	if s.Port, err = strconv.Atoi(port); err != nil {
		return fmt.Errorf("the scratch server's port: docker port said %q", line)
	}
	deadline := time.Now().Add(wait)
	for {
		_, err := s.run(ctx, append([]string{"exec", s.Name}, s.Kind.Ready...))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the scratch server (%s) did not take connections within %s: %w", s.Image, wait, errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Query runs q in database and returns its rows, one a line, columns
// separated by |.
func (s *Server) Query(ctx context.Context, database, q string) (string, error) {
	argv := append([]string{"exec", s.Name}, s.Kind.query(database, q)...)
	if s.socket {
		argv = []string{"exec", "--user", "postgres", s.Name, "psql", "-U", s.user, "-d", database, "-AtX", "-F", "|", "-v", "ON_ERROR_STOP=1", "-c", q}
	}
	out, err := s.run(ctx, argv)
	return strings.TrimRight(out, "\n"), err
}

// Amcheck runs pg_amcheck on every database of a PostgreSQL server,
// installing the amcheck extension where it is missing; it returns what
// pg_amcheck printed.
func (s *Server) Amcheck(ctx context.Context) (string, error) {
	if s.Kind.Sink != "postgres" {
		return "", errors.New("amcheck is PostgreSQL's")
	}
	if s.socket {
		return s.run(ctx, []string{"exec", "--user", "postgres", s.Name, "pg_amcheck", "-U", s.user, "--all", "--install-missing", "--heapallindexed"})
	}
	return s.run(ctx, []string{"exec", s.Name, "pg_amcheck", "-h", "127.0.0.1", "-U", s.Kind.User, "--all", "--install-missing", "--heapallindexed"})
}

// Connect points a restore sink's settings (a pipefile endpoint's values)
// at the server: its address and superuser, without the password, dsn or
// socket they had.
func (s *Server) Connect(values map[string]any) {
	for _, a := range []string{"dsn", "password", "socket", "sslmode"} {
		delete(values, a)
	}
	values["host"] = "127.0.0.1"
	values["port"] = int64(s.Port)
	values["user"] = s.Kind.User
	if s.Kind.Sink == "postgres" {
		values["sslmode"] = "disable"
	}
	if _, cluster := values["databases"]; cluster {
		return // each database is created by its own stream
	}
	switch s.Kind.Sink {
	case "postgres":
		values["create"] = true // the scratch server is empty
		// and has none of the production server's roles (a database's dump
		// holds no roles; a cluster's globals.sql does)
		values["no_owner"] = true
	case "mysql":
		values["create_database"] = true
	}
}

// Close stops the container, which docker then removes; it runs without
// the caller's context, which may have ended (an interrupted drill).
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.run(ctx, []string{"rm", "--force", "--volumes", s.Name})
	if s.scratch != nil {
		err = errors.Join(err, s.scratch.remove(ctx, s))
	}
	return err
}
