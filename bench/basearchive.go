package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The base backup scenario's archiving: the server archives to all three
// tools' archives with one archive_command (archive.sh), the measured
// tool synchronously and the others queued; drain waits until they have
// caught up. And what the scenario reads back of its runs: the
// restore_command wrapper's log, the server's redo line, backup_label.

// shq quotes s for a POSIX shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func envPrefix(env []string) string {
	parts := []string{"env"}
	for _, e := range env {
		parts = append(parts, shq(e))
	}
	return strings.Join(parts, " ")
}

// writeScripts writes archive.sh (the archive_command), bg-push.sh (one
// queued push), push.sh (one tool's push) and timed.sh (the restore_command
// wrapper that logs wall and CPU).
func (bb *baseBench) writeScripts() error {
	w := bb.walBench
	d := w.dir
	pipeFile := filepath.Join(d, "pipe-archive.hcl")
	if err := os.WriteFile(pipeFile, []byte(w.pipeArchive(true, "always", 8)), 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(d, "inflight"), 0o777); err != nil {
		return err
	}
	_ = w.chown(filepath.Join(d, "inflight"))
	scripts := map[string]string{
		"push.sh": fmt.Sprintf(`#!/bin/bash
# push.sh TOOL PATH: one tool's archive_command for one file.
# A queued push (TOOL-bg) comes after the server has marked the file done:
# pgBackRest's async mode, which works from archive_status, cannot take it.
case "$1" in
pipe|pipe-bg) exec %s %s wal push %s "$2" ;;
pgbackrest) exec %s pgbackrest --stanza=%s archive-push "$2" ;;
pgbackrest-bg) exec %s pgbackrest --stanza=%s archive-push "$2" ;;
barman|barman-bg) exec %s barman-cloud-wal-archive -z --endpoint-url %s s3://barman/wal %s "$2" ;;
esac
exit 2
`, envPrefix(w.pipeEnv()), shq(w.b.cfg.pipe), shq(pipeFile), envPrefix(w.pgbackrestEnv(true)), walStanza, envPrefix(w.pgbackrestEnv(false)), walStanza,
			envPrefix(w.barmanEnv()), shq(w.endpoint), baseBarmanID),
		"bg-push.sh": fmt.Sprintf(`#!/bin/bash
# bg-push.sh TOOL PATH: a queued push, one at a time per tool (two for
# barman-cloud, the slowest: the queues drain sooner; untimed).
f=$(basename "$2")
rc=99
if [ "$1" = barman ]; then flock -n -E 99 %[1]s/lock-barman-2 %[1]s/push.sh barman-bg "$2"; rc=$?; fi
if [ $rc = 99 ]; then flock %[1]s/lock-$1 %[1]s/push.sh "$1-bg" "$2"; rc=$?; fi
[ $rc = 0 ] || echo "$1 $f" >> %[1]s/archive-failed
rm -f %[1]s/inflight/$1-$f
`, d),
		"archive.sh": fmt.Sprintf(`#!/bin/bash
# archive.sh PATH: the tool named in archive-first pushes now; the others
# are queued in the background.
f=$(basename "$1")
first=$(cat %[1]s/archive-first 2>/dev/null)
if [ -n "$first" ]; then %[1]s/push.sh "$first" "$1" || exit 1; fi
for t in %[2]s; do
  [ "$t" = "$first" ] && continue
  : > %[1]s/inflight/$t-$f
  nohup %[1]s/bg-push.sh "$t" "$1" >> %[1]s/archive-bg.log 2>&1 &
done
exit 0
`, d, strings.Join(bb.archivingTools(), " ")),
		"timed.sh": fmt.Sprintf(`#!/bin/bash
# timed.sh COMMAND…: restore_command, logging its wall and its children's CPU.
s=$EPOCHREALTIME
"$@"
rc=$?
e=$EPOCHREALTIME
times > %[1]s/rc-times.$$
{ echo "$s $e $rc $(tail -1 %[1]s/rc-times.$$)"; } >> %[1]s/rc.log
rm -f %[1]s/rc-times.$$
exit $rc
`, d),
	}
	for name, text := range scripts {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			return err
		}
	}
	return bb.setFirst("")
}

// archivingTools are the tools whose archives archive.sh fills: all of
// them, or those whose races run (-skip-barman: barman-cloud's archive
// pushes take longer than the rest of the scenario).
func (bb *baseBench) archivingTools() []string {
	if bb.b.cfg.skipBarman {
		return []string{"pipe", "pgbackrest"}
	}
	return baseTools
}

// setFirst names the tool that pushes synchronously ("" none).
func (bb *baseBench) setFirst(tool string) error {
	p := filepath.Join(bb.dir, "archive-first")
	if err := os.WriteFile(p, []byte(tool), 0o644); err != nil {
		return err
	}
	return nil
}

// drain waits until the server has archived every ready file and every
// queued push has finished; a failed push is an error.
func (bb *baseBench) drain(ctx context.Context) error {
	deadline := time.Now().Add(20 * time.Minute)
	status := filepath.Join(bb.pgdata, "pg_wal", "archive_status")
	for {
		if b, err := os.ReadFile(filepath.Join(bb.dir, "archive-failed")); err == nil && len(b) > 0 {
			log, _ := os.ReadFile(filepath.Join(bb.dir, "archive-bg.log"))
			return fmt.Errorf("queued archive pushes failed: %s\n%s", b, tail(string(log), 20))
		}
		ready := 0
		ents, _ := os.ReadDir(status)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".ready") {
				ready++
			}
		}
		inflight, _ := os.ReadDir(filepath.Join(bb.dir, "inflight"))
		if ready == 0 && len(inflight) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the archives did not drain in 20 minutes: %d ready, %d queued pushes", ready, len(inflight))
		}
		if failed, _ := bb.psql(ctx, "SELECT failed_count FROM pg_stat_archiver"); failed != "" && failed != "0" {
			last, _ := bb.psql(ctx, "SELECT last_failed_wal FROM pg_stat_archiver")
			return fmt.Errorf("archive_command failed %s times (last %s)", failed, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// withLog adds the end of the server's log to err.
func (bb *baseBench) withLog(err error) error {
	if err == nil {
		return nil
	}
	var b strings.Builder
	for _, f := range []string{"pg.log", "restored.log", "archive-bg.log"} {
		if log, e := os.ReadFile(filepath.Join(bb.dir, f)); e == nil && len(log) > 0 {
			fmt.Fprintf(&b, "\n--- %s (end)\n%s", f, tail(string(log), 15))
		}
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// backupStartLSN reads START WAL LOCATION from the restored backup_label.
func backupStartLSN(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "backup_label"))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "START WAL LOCATION: "); ok {
			return strings.Fields(rest)[0]
		}
	}
	return ""
}

// restoreCommandLog sums timed.sh's log: calls, wall, children's CPU.
func restoreCommandLog(path string) (calls int, wall, cpu time.Duration) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		s, _ := strconv.ParseFloat(fs[0], 64)
		e, _ := strconv.ParseFloat(fs[1], 64)
		calls++
		wall += time.Duration((e - s) * float64(time.Second))
		cpu += bashTime(fs[3]) + bashTime(fs[4])
	}
	return calls, wall, cpu
}

// redoUsage reads the server's "redo done at … system usage: CPU: user:
// U s, system: S s, elapsed: E s" line.
func redoUsage(path string) (cpu, elapsed time.Duration) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		i := strings.Index(l, "redo done at")
		if i < 0 {
			continue
		}
		var u, sy, e float64
		if j := strings.Index(l, "CPU: user: "); j >= 0 {
			if _, err := fmt.Sscanf(l[j:], "CPU: user: %f s, system: %f s, elapsed: %f s", &u, &sy, &e); err == nil {
				return time.Duration((u + sy) * float64(time.Second)), time.Duration(e * float64(time.Second))
			}
		}
	}
	return 0, 0
}

// bashTime parses bash's times format, 1m2.345s.
func bashTime(s string) time.Duration {
	m, rest, ok := strings.Cut(s, "m")
	if !ok {
		return 0
	}
	mins, _ := strconv.ParseFloat(m, 64)
	secs, _ := strconv.ParseFloat(strings.TrimSuffix(rest, "s"), 64)
	return time.Duration((mins*60 + secs) * float64(time.Second))
}
