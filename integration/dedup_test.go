package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pipebackup/pipe/manifest"
)

// dedupStore is one store type as the dedup tests use it: the blocks of
// a backup to dd/${run.id}/ and of a restore from dd/, and what the runs
// need in their environment.
type dedupStore struct {
	vars, sink, source string
	env                []string
	// packs lists the pack objects in the store.
	packs func(t *testing.T) []string
}

// dedupFile is a backup of data/ through a dedup stage into st, and a
// restore of the run --run names into out/.
func dedupFile(st dedupStore) string {
	return st.vars + `
variable "keep" { default = 10 }
variable "grace" { default = "1h" }
pipeline "backup" {
  source "fs" { path = "data" }
  dedup {
    key        = file("keys/dedup.key")
    chunk_size = "128KiB"
    pack_size  = "1MiB"
    grace      = var.grace
  }
  compress {}
  encrypt { recipients = [file("keys/backup.pub")] }
` + st.sink + `
}
pipeline "restore" {
` + st.source + `
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "fs" { path = "out/" }
}
pipeline "copy" {
` + st.source + `
  sink "fs" { path = "copied/${run.id}/" }
}
pipeline "restore-copy" {
  source "fs" { path = "copied/" }
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "fs" { path = "out/" }
}
`
}

// dedupRig is a folder with keys, data and a dedup pipeline file.
type dedupRig struct {
	dir string
	env []string
	st  dedupStore
}

func newDedupRig(t *testing.T, st dedupStore) *dedupRig {
	t.Helper()
	r := &dedupRig{dir: t.TempDir(), env: st.env, st: st}
	writeFile(t, filepath.Join(r.dir, "p.hcl"), []byte(dedupFile(st)))
	mustPipe(t, r.dir, nil, "keygen")
	mustPipe(t, r.dir, nil, "keygen", "--dedup")
	return r
}

// dedupText writes n bytes of dump-like lines, seeded.
func dedupText(t *testing.T, path string, n int, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	for b.Len() < n {
		fmt.Fprintf(&b, "%d\t%d\t%s\n", r.IntN(1e7), r.IntN(1e4), strings.Repeat("x", r.IntN(60)))
	}
	writeFile(t, path, []byte(b.String()[:n]))
}

// change overwrites a few bytes of path at off.
func change(t *testing.T, path string, off int64, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(text), off); err != nil {
		t.Fatal(err)
	}
}

// snapshot copies data/ to name, as the run about to be taken holds it.
func (r *dedupRig) snapshot(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(r.dir, name)
	if out, err := exec.Command("cp", "-r", filepath.Join(r.dir, "data"), dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	return dst
}

type dedupRun struct {
	RunID  string `json:"run_id"`
	Stored int64  `json:"stored_bytes"`
}

// runs lists the backup pipeline's runs, newest first.
func (r *dedupRig) runs(t *testing.T, env ...string) []dedupRun {
	t.Helper()
	out := mustPipe(t, r.dir, append(r.env, env...), "backups", "p.hcl", "--pipeline", "backup", "--json").Stdout
	var l struct {
		Stores []struct {
			Runs []dedupRun `json:"runs"`
		} `json:"stores"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Stores) != 1 {
		t.Fatalf("pipe backups --json: %v\n%s", err, out)
	}
	return l.Stores[0].Runs
}

// restore restores run id into out/ and compares it with want.
func (r *dedupRig) restore(t *testing.T, id, want string) {
	t.Helper()
	os.RemoveAll(filepath.Join(r.dir, "out"))
	mustPipe(t, r.dir, r.env, "run", "p.hcl", "--pipeline", "restore", "--run", id)
	sameTree(t, want, filepath.Join(r.dir, "out"))
}

// TestDedupStores backs up a folder three times through a dedup stage
// into each store type, with a change between runs: the later runs store
// a few chunks; every run restores as it was; verify checks every chunk,
// with and without the key; prune deletes the packs no run names once
// they are older than the grace period, and what stays restores.
func TestDedupStores(t *testing.T) {
	stores := map[string]func(t *testing.T) dedupStore{
		"s3": func(t *testing.T) dedupStore {
			b := newS3Bench(t)
			bucket := b.bucket(t, "dedup")
			return dedupStore{vars: s3Vars, sink: s3Block("sink", `key = "dd/${run.id}/"
    keep_last = var.keep`), source: s3Block("source", `prefix = "dd/"`), env: b.env(bucket, b.m.Endpoint),
				packs: func(t *testing.T) []string { return b.keys(t, bucket, "dd/"+manifest.PacksDir) }}
		},
		"gcs": func(t *testing.T) dedupStore {
			g := gcsStart(t)
			bucket := g.bucket(t, "dedup")
			ep := fmt.Sprintf("endpoint = %q", g.Endpoint)
			return dedupStore{
				sink:   fmt.Sprintf("  sink \"gcs\" {\n    bucket = %q\n    %s\n    key = \"dd/${run.id}/\"\n    keep_last = var.keep\n  }", bucket, ep),
				source: fmt.Sprintf("  source \"gcs\" {\n    bucket = %q\n    %s\n    prefix = \"dd/\"\n  }", bucket, ep),
				packs:  func(t *testing.T) []string { return g.list(t, bucket, "dd/"+manifest.PacksDir) }}
		},
		"azure": func(t *testing.T) dedupStore {
			e := startAzureEnv(t)
			c := e.newContainer(t)
			return dedupStore{vars: azureVars, sink: azureBlock("sink", `    key = "dd/${run.id}/"
    keep_last = var.keep`), source: azureBlock("source", `    prefix = "dd/"`), env: azureEnvVars(e, e.URL, c),
				packs: func(t *testing.T) []string { return e.names(t, c, "dd/"+manifest.PacksDir) }}
		},
	}
	for _, name := range []string{"s3", "gcs", "azure"} {
		t.Run(name, func(t *testing.T) { testDedupStore(t, stores[name](t)) })
	}
}

func testDedupStore(t *testing.T, st dedupStore) {
	r := newDedupRig(t, st)
	data := filepath.Join(r.dir, "data")
	dedupText(t, filepath.Join(data, "dump.sql"), 6<<20, 1)
	randomFile(t, filepath.Join(data, "bin", "random"), 1<<20, 2)
	writeFile(t, filepath.Join(data, "small.txt"), []byte("a small file\n"))
	var wants []string
	backup := func() dedupRun {
		t.Helper()
		wants = append(wants, r.snapshot(t, fmt.Sprintf("want-%d", len(wants)+1)))
		mustPipe(t, r.dir, r.env, "run", "p.hcl", "--pipeline", "backup")
		return r.runs(t)[0]
	}
	first := backup()
	change(t, filepath.Join(data, "dump.sql"), 3<<20, "a changed stretch of the dump")
	second := backup()
	writeFile(t, filepath.Join(data, "new.txt"), []byte(strings.Repeat("new lines\n", 1000)))
	third := backup()
	t.Logf("stored: %d, then %d, then %d bytes", first.Stored, second.Stored, third.Stored)
	for i, run := range []dedupRun{second, third} {
		if run.Stored > first.Stored/10 {
			t.Errorf("run %d stored %d bytes, the first %d: more than a tenth for a change of a few bytes", i+2, run.Stored, first.Stored)
		}
	}
	for i, run := range []dedupRun{first, second, third} {
		r.restore(t, run.RunID, wants[i])
	}
	// Copies to a folder, oldest first: each restores from the copy alone.
	for i, run := range []dedupRun{first, third} {
		mustPipe(t, r.dir, r.env, "run", "p.hcl", "--pipeline", "copy", "--run", run.RunID)
		os.RemoveAll(filepath.Join(r.dir, "out"))
		mustPipe(t, r.dir, nil, "run", "p.hcl", "--pipeline", "restore-copy", "--run", run.RunID)
		sameTree(t, wants[2*i], filepath.Join(r.dir, "out"))
	}
	for _, args := range [][]string{{"--all"}, {"--all", "--decrypt"}} {
		res := mustPipe(t, r.dir, r.env, append([]string{"verify", "p.hcl", "--pipeline", "backup"}, args...)...)
		if !strings.Contains(res.Stdout, "3 runs") || !strings.Contains(res.Stdout, "all good") {
			t.Errorf("verify %v:\n%s", args, res.Stdout)
		}
	}

	// Other data, then keep_last = 1: the three runs go, and their packs,
	// which no run names any more, once older than the grace period.
	before := len(packsOnly(st.packs(t)))
	os.RemoveAll(data)
	randomFile(t, filepath.Join(data, "other"), 512<<10, 3)
	fourth := backup()
	env := []string{"PIPE_VAR_keep=1", "PIPE_VAR_grace=2s"}
	dry := mustPipe(t, r.dir, append(r.env, env...), "backups", "prune", "p.hcl", "--pipeline", "backup", "--dry-run").Stdout
	if strings.Count(dry, "would delete run ") != 3 {
		t.Errorf("prune --dry-run:\n%s", dry)
	}
	time.Sleep(3 * time.Second)
	done := mustPipe(t, r.dir, append(r.env, env...), "backups", "prune", "p.hcl", "--pipeline", "backup").Stdout
	if !strings.Contains(done, fmt.Sprintf("deleted %d packs of chunks no run names", before)) {
		t.Errorf("prune of %d packs no run names:\n%s", before, done)
	}
	// The fourth run's pack; the announcements older than the grace went.
	if left := st.packs(t); len(left) != 1 || len(packsOnly(left)) != 1 {
		t.Errorf("after prune the packs' folder holds %v", left)
	}
	r.restore(t, fourth.RunID, wants[3])
	if res := mustPipe(t, r.dir, r.env, "verify", "p.hcl", "--pipeline", "backup", "--all"); !strings.Contains(res.Stdout, "all good") {
		t.Errorf("verify after prune:\n%s", res.Stdout)
	}
}

// TestDedupConcurrent: backups and prunes at once lose nothing; a backup
// killed (kill -9) part way leaves a store that verify passes and a later
// prune cleans; a prune killed part way leaves every kept run whole.
func TestDedupConcurrent(t *testing.T) {
	b := newS3Bench(t)
	bucket := b.bucket(t, "dedup-concurrent")
	st := dedupStore{vars: s3Vars, sink: s3Block("sink", `key = "dd/${run.id}/"
    keep_last = var.keep`), source: s3Block("source", `prefix = "dd/"`), env: b.env(bucket, b.m.Endpoint),
		packs: func(t *testing.T) []string { return b.keys(t, bucket, "dd/"+manifest.PacksDir) }}
	r := newDedupRig(t, st)
	data := filepath.Join(r.dir, "data")
	short := []string{"PIPE_VAR_grace=1s", "PIPE_VAR_keep=2"}

	// Two backups of different data into the store at once: each its own
	// packs; both restore.
	dedupText(t, filepath.Join(data, "dump.sql"), 8<<20, 4)
	twin := filepath.Join(r.dir, "twin")
	writeFile(t, filepath.Join(r.dir, "twin.hcl"), []byte(strings.ReplaceAll(dedupFile(st), `path = "data"`, `path = "twin"`)))
	randomFile(t, filepath.Join(twin, "other"), 6<<20, 5)
	wantData, wantTwin := r.snapshot(t, "want-data"), filepath.Join(r.dir, "want-twin")
	if out, err := exec.Command("cp", "-r", twin, wantTwin).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	other := spawnPipe(t, r.dir, r.env, "run", "twin.hcl", "--pipeline", "backup")
	mustPipe(t, r.dir, r.env, "run", "p.hcl", "--pipeline", "backup")
	if err := other.Wait(); err != nil {
		t.Fatalf("the second of two backups at once: %v", err)
	}
	both := r.runs(t)
	if len(both) != 2 {
		t.Fatalf("%d runs after two backups at once", len(both))
	}
	for _, run := range both {
		os.RemoveAll(filepath.Join(r.dir, "out"))
		mustPipe(t, r.dir, r.env, "run", "p.hcl", "--pipeline", "restore", "--run", run.RunID)
		if _, err := os.Stat(filepath.Join(r.dir, "out", "other")); err == nil {
			sameTree(t, wantTwin, filepath.Join(r.dir, "out"))
		} else {
			sameTree(t, wantData, filepath.Join(r.dir, "out"))
		}
	}

	// Backups of changing data while prunes run in a loop.
	var wants []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var pruneErrs []string
	prunes, deleted, byRetention, last := 0, 0, 0, ""
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res := runPipe(t, r.dir, append(r.env, short...), "backups", "prune", "p.hcl", "--pipeline", "backup")
			if res.Err != nil {
				pruneErrs = append(pruneErrs, fmt.Sprintf("%v\n%s%s", res.Err, res.Stdout, res.Stderr))
			}
			prunes++
			last = res.Stdout
			if m := regexp.MustCompile(`deleted (\d+) packs?`).FindStringSubmatch(res.Stdout); m != nil {
				n, _ := strconv.Atoi(m[1])
				deleted += n
			}
		}
	}()
	for i := range 5 {
		// A file the next run no longer has: packs fall out of use.
		os.Remove(filepath.Join(data, fmt.Sprintf("new-%d", i-1)))
		randomFile(t, filepath.Join(data, fmt.Sprintf("new-%d", i)), 1<<20, uint64(10+i))
		change(t, filepath.Join(data, "dump.sql"), 1<<20, fmt.Sprintf("change %d", i)) // the one before is gone
		wants = append(wants, r.snapshot(t, fmt.Sprintf("want-%d", i)))
		res := mustPipe(t, r.dir, append(r.env, short...), "run", "p.hcl", "--pipeline", "backup")
		if m := regexp.MustCompile(`deleted (\d+) packs? of chunks`).FindStringSubmatch(res.Stderr); m != nil {
			n, _ := strconv.Atoi(m[1])
			byRetention += n
		}
		// Between backups, past the grace: prunes that delete packs, and
		// backups that start while one does.
		time.Sleep(time.Duration(1000+rand.IntN(1000)) * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d prunes ran during the 5 backups, deleting %d packs; the backups' retention deleted %d", prunes, deleted, byRetention)
	if deleted+byRetention == 0 {
		t.Errorf("no prune deleted a pack while the backups ran: the test tested nothing; the last prune said:\n%s", last)
	}
	if len(pruneErrs) > 0 {
		t.Errorf("prune failed while backups ran:\n%s", strings.Join(pruneErrs, "\n"))
	}
	runs := r.runs(t)
	if len(runs) != 2 {
		t.Fatalf("%d runs with keep_last = 2: %v", len(runs), runs)
	}
	r.restore(t, runs[0].RunID, wants[4])
	r.restore(t, runs[1].RunID, wants[3])
	if res := mustPipe(t, r.dir, r.env, "verify", "p.hcl", "--pipeline", "backup", "--all"); !strings.Contains(res.Stdout, "all good") {
		t.Errorf("verify after backups and prunes at once:\n%s", res.Stdout)
	}

	// kill -9 while a backup uploads packs.
	randomFile(t, filepath.Join(data, "large"), 48<<20, 20)
	before := len(st.packs(t))
	killed := spawnPipe(t, r.dir, append(r.env, short...), "run", "p.hcl", "--pipeline", "backup")
	waitFor(t, 60*time.Second, "the backup's first pack", func() bool { return len(st.packs(t)) > before+1 })
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()
	if n := len(r.runs(t)); n != 2 {
		t.Errorf("after a backup killed part way the store lists %d runs, want 2", n)
	}
	if res := mustPipe(t, r.dir, r.env, "verify", "p.hcl", "--pipeline", "backup", "--all"); !strings.Contains(res.Stdout, "all good") {
		t.Errorf("verify after a backup was killed:\n%s", res.Stdout)
	}
	time.Sleep(1500 * time.Millisecond)
	res := mustPipe(t, r.dir, append(r.env, short...), "backups", "prune", "p.hcl", "--pipeline", "backup")
	if after := len(st.packs(t)); after > before {
		t.Errorf("prune left %d objects in the packs' folder, %d before the killed backup:\n%s", after, before, res.Stdout)
	}
	r.restore(t, runs[0].RunID, wants[4])

	// kill -9 while prune deletes packs: every run it keeps stays whole.
	os.RemoveAll(data)
	randomFile(t, filepath.Join(data, "fresh"), 4<<20, 30)
	want := r.snapshot(t, "want-fresh")
	mustPipe(t, r.dir, r.env, "run", "p.hcl", "--pipeline", "backup")
	time.Sleep(1500 * time.Millisecond)
	pr := spawnPipe(t, r.dir, append(r.env, "PIPE_VAR_grace=1s", "PIPE_VAR_keep=1"), "backups", "prune", "p.hcl", "--pipeline", "backup")
	time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
	pr.Process.Signal(syscall.SIGKILL)
	pr.Wait()
	kept := r.runs(t)
	for _, run := range kept {
		if run.RunID == kept[0].RunID {
			r.restore(t, run.RunID, want)
		}
	}
	if res := mustPipe(t, r.dir, r.env, "verify", "p.hcl", "--pipeline", "backup", "--all"); !strings.Contains(res.Stdout, "all good") {
		t.Errorf("verify after a prune was killed:\n%s", res.Stdout)
	}
	mustPipe(t, r.dir, append(r.env, "PIPE_VAR_grace=1s", "PIPE_VAR_keep=1"), "backups", "prune", "p.hcl", "--pipeline", "backup")
	r.restore(t, r.runs(t)[0].RunID, want)
	packs := st.packs(t)
	sort.Strings(packs)
	t.Logf("left in the packs' folder: %v", packs)
}

// packsOnly keeps the packs of keys (not the announcements).
func packsOnly(keys []string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasSuffix(k, ".pack") {
			out = append(out, k)
		}
	}
	return out
}

// spawnPipe starts pipe in dir and returns it running, for kill -9.
func spawnPipe(t *testing.T, dir string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(pipeBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd
}

// waitFor polls ok until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !ok() {
		if time.Now().After(end) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
