package drill

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// BaseBackupSink is the sink type that restores a base backup, which a
// drill restores into a scratch folder and recovers in a container.
const BaseBackupSink = "postgres_basebackup"

// Scratch is the folder of a drill of a base backup: the restored data
// directory (Data), the WAL recovery replays (WAL) and the tablespaces
// beside the data directory, all under one folder that the scratch
// container mounts at the same path, so the tablespaces' links hold.
type Scratch struct {
	Dir, Data, WAL string
}

// NewScratch makes a scratch folder under dir ("": the system's).
func NewScratch(dir string) (*Scratch, error) {
	d, err := os.MkdirTemp(dir, "pipe-drill-")
	if err != nil {
		return nil, fmt.Errorf("a scratch folder for the restore: %w", err)
	}
	s := &Scratch{Dir: d, Data: filepath.Join(d, "data"), WAL: filepath.Join(d, "wal")}
	if err := os.Mkdir(s.WAL, 0o755); err != nil {
		os.RemoveAll(d)
		return nil, err
	}
	return s, nil
}

// Connect points a postgres_basebackup sink's settings at the scratch
// folder: the data directory, a restore_command that copies from the WAL
// folder, and no recovery target: the drill recovers to the end of the
// archive.
func (s *Scratch) Connect(values map[string]any) {
	values["data_directory"] = s.Data
	values["restore_command"] = fmt.Sprintf("cp %s/%%f %%p", s.WAL)
	for _, k := range []string{"recovery_target", "recovery_target_time", "recovery_target_lsn", "recovery_target_xid", "recovery_target_name", "recovery_target_action"} {
		delete(values, k)
	}
	values["recovery_target_timeline"] = "latest" // along every promotion the archive holds
	delete(values, "tablespace_map")
	delete(values, "tablespace_map_all") // beside the data directory, in the folder
}

var startFileRE = regexp.MustCompile(`(?m)^START WAL LOCATION: \S+ \(file ([0-9A-F]{24})\)$`)

// StartSegment is the first WAL segment the restored backup needs, from
// its backup_label.
func (s *Scratch) StartSegment() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.Data, "backup_label"))
	if err != nil {
		return "", fmt.Errorf("the restored backup's label: %w", err)
	}
	m := startFileRE.FindSubmatch(b)
	if m == nil {
		return "", errors.New("the restored backup_label names no start segment")
	}
	return string(m[1]), nil
}

// StartRecovered starts a container of image on the restored data
// directory (the server recovers from the WAL folder, then promotes at
// the end of it) and waits until it no longer recovers. user is the
// cluster's superuser, whom the checks connect as over the server's Unix
// socket.
func StartRecovered(ctx context.Context, sc *Scratch, image, user string, o Options) (*Server, error) {
	if o.Docker == "" {
		o.Docker = "docker"
	}
	if o.Wait == 0 {
		o.Wait = 2 * time.Minute
	}
	s := newServer(Kinds["postgres"], image, o)
	s.user, s.socket, s.scratch = user, true, sc
	if err := ensureConfig(sc.Data); err != nil {
		sc.Discard()
		return nil, err
	}
	// The files are ours, restored here; the server runs as the image's
	// postgres, which must own them, tablespaces included (the image's
	// entrypoint follows no link).
	if _, err := s.run(ctx, []string{"run", "--rm", "--entrypoint", "chown", "--volume", sc.Dir + ":" + sc.Dir, image, "-R", "postgres:postgres", sc.Dir}); err != nil {
		s.Close()
		return nil, fmt.Errorf("giving the restored files to the image's postgres user: %w", err)
	}
	argv := []string{"run", "--detach", "--name", s.Name, "--label", "pipe.drill=1", "--volume", sc.Dir + ":" + sc.Dir, "--env", "PGDATA=" + sc.Data, image, "postgres",
		"-c", "listen_addresses=", "-c", "unix_socket_directories=/var/run/postgresql", "-c", "port=5432"}
	if _, err := s.run(ctx, append(argv, s.Kind.Args...)); err != nil {
		s.Close()
		return nil, fmt.Errorf("starting the restored server (docker run %s): %w", image, err)
	}
	if err := s.recovered(ctx, o.Wait); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// ensureConfig gives a data directory without postgresql.conf or
// pg_hba.conf (a Debian cluster keeps them in /etc) the least that lets
// the server start and the checks connect over its socket.
func ensureConfig(data string) error {
	for name, text := range map[string]string{"postgresql.conf": "", "pg_hba.conf": "local all all trust\n"} {
		p := filepath.Join(data, name)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// recovered waits until the server has replayed the WAL and promoted.
func (s *Server) recovered(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		out, err := s.Query(ctx, "postgres", "SELECT pg_is_in_recovery()")
		if err == nil && out == "f" {
			return nil
		}
		if state, _ := s.run(ctx, []string{"inspect", "--format", "{{.State.Running}}", s.Name}); strings.TrimSpace(state) == "false" {
			return fmt.Errorf("the restored server stopped during recovery: %s", s.logTail(ctx))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the restored server had not finished recovery within %s: %s", wait, s.logTail(ctx))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Discard removes the scratch folder while its files are still pipe's
// (before StartRecovered).
func (sc *Scratch) Discard() { _ = os.RemoveAll(sc.Dir) }

// remove deletes the scratch folder: its files are the image's postgres
// user's, so a container of the image (root in it) removes them first.
func (sc *Scratch) remove(ctx context.Context, s *Server) error {
	_, err := s.run(ctx, []string{"run", "--rm", "--entrypoint", "rm", "--volume", sc.Dir + ":" + sc.Dir, s.Image, "-rf", sc.Data, sc.WAL, sc.Data + "_tablespaces"})
	return errors.Join(err, os.RemoveAll(sc.Dir))
}

// logTail is the end of the server's log, on one line.
func (s *Server) logTail(ctx context.Context) string {
	// The server logs on its stderr, which docker logs repeats on its own.
	out, err := s.raw(context.WithoutCancel(ctx), []string{"sh", "-c", `exec "$0" logs --tail 15 "$1" 2>&1`, s.docker, s.Name})
	if err != nil {
		return "(its log cannot be read: " + err.Error() + ")"
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		lines = append(lines, strings.TrimSpace(sc.Text()))
	}
	return strings.Join(lines, " ⏎ ")
}
