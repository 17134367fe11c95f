package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// catalogBackend is an object store the catalog test runs against: how a
// pipeline names it, and how the test reads, writes and deletes its
// objects behind pipe's back.
type catalogBackend struct {
	vars  string // the pipeline file's variables
	block func(kind, where string) string
	env   []string
	put   func(t *testing.T, key string, b []byte)
	get   func(t *testing.T, key string) []byte
	del   func(t *testing.T, key string)
}

// TestCatalog runs the catalog on MinIO, fake-gcs-server and Azurite: list
// with complete, incomplete and foreign runs; verify catches a flipped
// byte, a truncated and a missing object without any key; restore by run
// and by time; prune's dry run lists exactly what prune deletes; a copy
// into a second store restores byte-identical.
func TestCatalog(t *testing.T) {
	requireDocker(t)
	t.Run("s3", func(t *testing.T) {
		b := newS3Bench(t)
		bucket := b.bucket(t, "catalog")
		catalogScenario(t, catalogBackend{
			vars: s3Vars,
			block: func(kind, where string) string {
				return s3Block(kind, where)
			},
			env: b.env(bucket, b.m.Endpoint),
			put: func(t *testing.T, key string, data []byte) { b.put(t, bucket, key, data) },
			get: func(t *testing.T, key string) []byte {
				data, ok := b.get(bucket, key)
				if !ok {
					t.Fatalf("no object %s", key)
				}
				return data
			},
			del: func(t *testing.T, key string) {
				if _, err := b.client.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
	t.Run("gcs", func(t *testing.T) {
		g := gcsStart(t)
		bucket := g.bucket(t, "catalog")
		catalogScenario(t, catalogBackend{
			vars: `variable "endpoint" {}
variable "bucket" {}
`,
			block: func(kind, where string) string {
				return fmt.Sprintf(`%s "gcs" {
    bucket   = var.bucket
    endpoint = var.endpoint
    %s
  }`, kind, where)
			},
			env: []string{"PIPE_VAR_endpoint=" + g.Endpoint, "PIPE_VAR_bucket=" + bucket},
			put: func(t *testing.T, key string, data []byte) { g.put(t, bucket, key, data) },
			get: func(t *testing.T, key string) []byte {
				data, ok := g.get(bucket, key)
				if !ok {
					t.Fatalf("no object %s", key)
				}
				return data
			},
			del: func(t *testing.T, key string) {
				if err := g.c.Bucket(bucket).Object(key).Delete(context.Background()); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
	t.Run("azure", func(t *testing.T) {
		e := startAzureEnv(t)
		cont := e.newContainer(t)
		catalogScenario(t, catalogBackend{
			vars: azureVars,
			block: func(kind, where string) string {
				return azureBlock(kind, where)
			},
			env: azureEnvVars(e, e.URL, cont),
			put: func(t *testing.T, key string, data []byte) { e.upload(t, cont, key, data) },
			get: func(t *testing.T, key string) []byte {
				data, ok := e.read(t, cont, key)
				if !ok {
					t.Fatalf("no blob %s", key)
				}
				return data
			},
			del: func(t *testing.T, key string) {
				if _, err := e.container(cont).NewBlobClient(key).Delete(context.Background(), nil); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
}

var runIDLine = regexp.MustCompile(`(?m)^(2\d{7}T\d{6}Z-[0-9a-f]{6}) +backup `)

func catalogScenario(t *testing.T, be catalogBackend) {
	dir := t.TempDir()
	file := be.vars + `
variable "keep" { default = 10 }
pipeline "backup" {
  source "fs" { path = "data" }
  compress {}
  encrypt { recipients = [file("keys/backup.pub")] }
  ` + be.block("sink", `key = "cat/backup/${run.id}/"
    keep_last = var.keep`) + `
}
pipeline "other" {
  source "fs" { path = "data" }
  ` + be.block("sink", `key = "cat/other/${run.id}/"`) + `
}
pipeline "restore" {
  ` + be.block("source", `prefix = "cat/"
    pipeline = "backup"`) + `
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "fs" { path = "out/" }
}
pipeline "copy" {
  ` + be.block("source", `prefix = "cat/backup/"`) + `
  ` + be.block("sink", `key = "copy/backup/${run.id}/"`) + `
}
pipeline "from_copy" {
  ` + be.block("source", `prefix = "copy/"`) + `
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "fs" { path = "out-copy/" }
}
`
	writeFile(t, filepath.Join(dir, "c.hcl"), []byte(file))
	mustPipe(t, dir, nil, "keygen", "-o", "keys/backup")
	version := func(n int) {
		writeFile(t, filepath.Join(dir, "data", "a"), randomBytes(uint64(n), 300_000))
		writeFile(t, filepath.Join(dir, "data", "version"), []byte(fmt.Sprint(n)))
	}
	for n := 1; n <= 3; n++ {
		version(n)
		mustPipe(t, dir, be.env, "run", "c.hcl", "--pipeline", "backup")
	}
	mustPipe(t, dir, be.env, "run", "c.hcl", "--pipeline", "other")
	// A run that did not finish, long ago.
	be.put(t, "cat/backup/20200101T000000Z-abcdef/a.zst.age", []byte("half a run"))

	// List: the three runs, the one that did not finish, the other
	// pipeline's store.
	out := mustPipe(t, dir, be.env, "backups", "c.hcl").Stdout
	ids := runIDLine.FindAllStringSubmatch(out, -1)
	if len(ids) != 3 || !strings.Contains(out, "run 20200101T000000Z-abcdef") || !strings.Contains(out, `(pipeline "other"): 1 run`) {
		t.Fatalf("pipe backups:\n%s", out)
	}
	newest, oldest := ids[0][1], ids[2][1]
	again := mustPipe(t, dir, be.env, "backups", "c.hcl", "--pipeline", "backup", "--json").Stdout
	if !strings.Contains(again, `"run_id": "`+oldest+`"`) {
		t.Fatalf("pipe backups --json:\n%s", again)
	}

	// Restore by run, by time, and the newest.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--run", oldest}, "1"},
		{nil, "3"},
	} {
		os.RemoveAll(filepath.Join(dir, "out"))
		mustPipe(t, dir, be.env, append([]string{"run", "c.hcl", "--pipeline", "restore"}, tc.args...)...)
		if got, _ := os.ReadFile(filepath.Join(dir, "out", "version")); string(got) != tc.want {
			t.Errorf("restore %v: version %q, want %s", tc.args, got, tc.want)
		}
	}
	os.RemoveAll(filepath.Join(dir, "out"))
	r := runPipe(t, dir, be.env, "run", "c.hcl", "--pipeline", "restore", "--before", "2021-01-01")
	if r.Err == nil || !strings.Contains(r.Stderr, "no complete run finished before 2021-01-01") {
		t.Errorf("restore before 2021: %v\n%s", r.Err, r.Stderr)
	}

	// Verify: good, then a flipped byte, a truncated and a missing object,
	// without any key.
	if out := mustPipe(t, dir, be.env, "verify", "c.hcl", "--pipeline", "backup", "--all").Stdout; !strings.Contains(out, "6 objects of 3 runs") || !strings.Contains(out, "all good") {
		t.Fatalf("verify --all:\n%s", out)
	}
	a := be.get(t, "cat/backup/"+newest+"/a.zst.age")
	flipped := append([]byte(nil), a...)
	flipped[len(flipped)/2] ^= 0xff
	be.put(t, "cat/backup/"+newest+"/a.zst.age", flipped)
	v := runPipe(t, dir, be.env, "verify", "c.hcl", "--pipeline", "backup")
	if v.Err == nil || !strings.Contains(v.Stdout, "BAD "+newest+"/a.zst.age: does not match its recorded digest") {
		t.Errorf("verify of a flipped byte: %v\n%s", v.Err, v.Stdout)
	}
	be.put(t, "cat/backup/"+newest+"/a.zst.age", a[:len(a)-100])
	v = runPipe(t, dir, be.env, "verify", "c.hcl", "--pipeline", "backup")
	if v.Err == nil || !strings.Contains(v.Stdout, "is truncated") {
		t.Errorf("verify of a truncated object: %v\n%s", v.Err, v.Stdout)
	}
	be.del(t, "cat/backup/"+newest+"/a.zst.age")
	v = runPipe(t, dir, be.env, "verify", "c.hcl", "--pipeline", "backup")
	if v.Err == nil || !strings.Contains(v.Stdout, "BAD "+newest+"/a.zst.age: missing") {
		t.Errorf("verify of a missing object: %v\n%s", v.Err, v.Stdout)
	}
	be.put(t, "cat/backup/"+newest+"/a.zst.age", a)
	mustPipe(t, dir, be.env, "verify", "c.hcl", "--pipeline", "backup", "--decrypt")

	// A copy into another prefix is a complete run there: it restores.
	mustPipe(t, dir, be.env, "run", "c.hcl", "--pipeline", "copy", "--run", oldest)
	mustPipe(t, dir, be.env, "run", "c.hcl", "--pipeline", "from_copy")
	want := randomBytes(1, 300_000)
	if got, err := os.ReadFile(filepath.Join(dir, "out-copy", "a")); err != nil || string(got) != string(want) {
		t.Errorf("restored from the copy: %d bytes, %v", len(got), err)
	}
	be.get(t, "copy/backup/"+oldest+"/pipe-manifest.json") // the copy's manifest is where its run id says

	// Prune with keep_last = 1: the dry run lists what prune deletes.
	env := append(append([]string(nil), be.env...), "PIPE_VAR_keep=1")
	dry := mustPipe(t, dir, env, "backups", "prune", "c.hcl", "--pipeline", "backup", "--dry-run").Stdout
	done := mustPipe(t, dir, env, "backups", "prune", "c.hcl", "--pipeline", "backup").Stdout
	would := strings.ReplaceAll(strings.Join(lines(dry, "would delete "), "\n"), "would delete ", "")
	did := strings.ReplaceAll(strings.Join(lines(done, "deleted "), "\n"), "deleted ", "")
	if would == "" || would != did || !strings.Contains(did, "run "+oldest) || !strings.Contains(did, "leftover 20200101T000000Z-abcdef/a.zst.age") {
		t.Errorf("prune --dry-run said\n%s\nprune did\n%s", dry, done)
	}
	if out := mustPipe(t, dir, be.env, "backups", "c.hcl", "--pipeline", "backup").Stdout; !strings.Contains(out, ": 1 run\n") || !strings.Contains(out, newest) {
		t.Errorf("after prune:\n%s", out)
	}
}

// lines returns the lines of s that start with prefix.
func lines(s, prefix string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}
