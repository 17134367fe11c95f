// Command bench measures pipe against the tools it replaces, on the same
// data in one run, and writes a markdown report (`make bench`):
//
//   - fs → fs with no stages vs cp (and cp followed by sync -d, since pipe's
//     fs sink fsyncs what it writes);
//   - zstd level 3 with 2 workers vs zstd -3 -T2;
//   - decompressing pipe's .zst vs zstd -d on the same file;
//   - peak RSS of a balanced backup pipeline (exec source → zstd → age →
//     sha256 → exec sink) for a small and a large input, against the memory
//     budget `pipe plan --json` prints;
//   - and, against servers in containers, object storage (mc, rclone), the
//     catalog, PostgreSQL and MariaDB (pg_dump, mariadb-dump shell
//     pipelines), WAL archiving and base backups (pgBackRest,
//     barman-cloud).
//
// After an untimed warm-up round, runs are interleaved (pipe, reference,
// pipe, reference, …) so a noisy neighbour slows both; each scenario
// reports the median wall time of the process as seen by a user (start to
// exit). Every output is checked (sizes on every run, full contents once)
// so a broken pipeline cannot report a fast number.
//
// Where things are: scenario.go lists the scenarios (one file each:
// copy.go, s3.go, postgres.go, …) and says how to add one; race.go is what
// every scenario runs (contenders, interleaved runs, medians); report.go
// renders the report, stats.go its numbers; containers.go starts the
// servers; command.go and pipeline.go time commands and `pipe run`.
//
// The data set is a synthetic PostgreSQL plain-format dump made by a
// deterministic generator (gen.go), cached under bench/results/data/. The
// same generator is the memory benchmark's exec source: the bench binary
// run as `bench gen -bytes N`.
//
// Usage:
//
//	go run ./bench -pipe ./bin/pipe -out bench/results/latest.md [-quick]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// config is what the flags set.
type config struct {
	pipe     string // absolute path of the pipe binary
	out      string
	report   string // -report: bench/reports/DATE-NAME.md, not there yet; "" for none
	dataDir  string
	workDir  string
	quick    bool
	reps     int
	dataSize int64
	memSizes [2]int64
	skipMem  bool
	// skipBarman leaves barman-cloud out of the WAL and base backup
	// races: its WAL burst alone takes 15 minutes, and a run repeated
	// for the noise of the machine need not repeat it.
	skipBarman bool
	only       string // comma-separated scenarios to run; "" for all
	mc         string // MinIO's client, for the object-store scenario
	rclone     string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "gen" {
		if err := genMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	// An interrupt kills the command being measured and lets run remove
	// its temporary folders.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		stop()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	pipe := fs.String("pipe", "./bin/pipe", "the pipe binary to measure")
	out := fs.String("out", "bench/results/latest.md", "write the markdown report here (and to stdout)")
	dataDir := fs.String("data", "bench/results/data", "cache folder for the generated data set")
	workDir := fs.String("work", "bench/results", "folder for outputs (a temporary subfolder, removed at the end); keep it on the disk you mean to measure")
	quick := fs.Bool("quick", false, "small sizes and 2 repetitions, for trying things out")
	reps := fs.Int("reps", 0, "repetitions per tool (default 5, or 2 with -quick)")
	skipMem := fs.Bool("skip-memory", false, "skip the memory benchmark")
	skipBarman := fs.Bool("skip-barman", false, "leave barman-cloud out of the wal and basebackup scenarios (its WAL burst takes 15 minutes)")
	only := fs.String("only", "", "run only these scenarios: "+strings.Join(scenarioNames(), ", ")+" (comma-separated)")
	mcBin := fs.String("mc", "bench/results/tools/mc", "MinIO's client, for the s3 scenario (`make bench` builds it)")
	rcloneBin := fs.String("rclone", "bench/results/tools/rclone", "rclone, for the s3 scenario (`make bench` builds it)")
	report := fs.String("report", "", "also write the report to "+reportsDir+"/DATE-NAME.md (DATE: today, UTC), a record of the run; it must not exist yet")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if err := checkOnly(*only); err != nil {
		return config{}, err
	}
	c := config{out: *out, dataDir: *dataDir, workDir: *workDir, quick: *quick, reps: *reps, skipMem: *skipMem, skipBarman: *skipBarman, only: *only, mc: *mcBin, rclone: *rcloneBin}
	var err error
	if *report != "" {
		if c.report, err = reportPath(reportsDir, *report, time.Now()); err != nil {
			return c, err
		}
	}
	if c.pipe, err = filepath.Abs(*pipe); err != nil {
		return c, err
	}
	if fi, err := os.Stat(c.pipe); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return c, fmt.Errorf("%s is not an executable file; run `make build` first", *pipe)
	}
	if c.quick {
		c.dataSize = 100_000_000
		c.memSizes = [2]int64{256 << 20, 1 << 30}
		if c.reps == 0 {
			c.reps = 2
		}
	} else {
		c.dataSize = 600_000_000
		c.memSizes = [2]int64{1 << 30, 8 << 30}
		if c.reps == 0 {
			c.reps = 5
		}
	}
	if c.reps < 1 {
		return c, fmt.Errorf("-reps must be at least 1")
	}
	return c, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, cfg config) error {
	env := describeEnv(ctx, cfg)
	data, err := ensureData(cfg.dataDir, cfg.dataSize, logf)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.workDir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(cfg.workDir, "work-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	hcl, err := os.MkdirTemp("", "pipe-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(hcl)

	b := &bench{cfg: cfg, data: data, size: cfg.dataSize, work: work, hcl: hcl}
	if err := warm(data); err != nil {
		return err
	}
	rep := &report{env: env, cfg: cfg, command: reproduce()}
	for _, s := range scenarios {
		if !cfg.runs(s.name) {
			continue
		}
		if err := s.run(b, ctx, rep); err != nil {
			return err
		}
	}
	rep.env.loadEnd = loadAvg()
	text := rep.markdown()
	if err := write(text, cfg.out); err != nil {
		return err
	}
	return record(text, cfg.report)
}

// write prints the report and writes it to out ("" nowhere else).
func write(text, out string) error {
	fmt.Print(text)
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		return err
	}
	logf("wrote %s", out)
	return nil
}

// reportsDir holds the reports kept in the repository, one a run worth
// keeping; bench/reports/HISTORY.md tells their story.
const reportsDir = "bench/reports"

// reportPath is where -report NAME writes: dir/DATE-NAME.md, DATE the UTC
// day of now. NAME is a file name's part (letters, digits, '.', '_', '-');
// the file must not exist yet, and dir must: a run of hours finds out
// before it starts.
func reportPath(dir, name string, now time.Time) (string, error) {
	if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("-report %q: a name of letters, digits, '.', '_' and '-', as in %s/2026-11-22-copy-l2.md", name, dir)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("-report: no folder %s here; run the bench from the repository's root", dir)
	}
	p := filepath.Join(dir, now.UTC().Format("2006-01-02")+"-"+name+".md")
	if _, err := os.Stat(p); err == nil {
		return "", fmt.Errorf("-report: %s exists; choose another name", p)
	}
	return p, nil
}

// record writes the report to path ("" nowhere), never over a file: the
// reports under bench/reports are records.
func record(text, path string) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("-report: %w", err)
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	logf("wrote %s: say in it what the run was for, and add it to %s/HISTORY.md", path, reportsDir)
	return nil
}

// reproduce is the command line that produced this report.
func reproduce() string {
	parts := []string{"go", "run", "./bench"}
	for _, a := range os.Args[1:] {
		if a == "" || strings.ContainsAny(a, " \t'\"$\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}
