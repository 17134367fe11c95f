package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/testcontainers/testcontainers-go"
)

// writerPolicy is what a backup writer may do in a locked bucket: write,
// read, list and lock on upload, but not delete anything, nor lift a
// governance lock.
const writerPolicy = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":[
"s3:PutObject","s3:GetObject","s3:GetObjectVersion","s3:ListBucket","s3:ListBucketVersions",
"s3:PutObjectRetention","s3:GetObjectRetention","s3:GetObjectLegalHold","s3:GetBucketObjectLockConfiguration",
"s3:AbortMultipartUpload","s3:ListMultipartUploadParts","s3:ListBucketMultipartUploads"],
"Resource":["arn:aws:s3:::*"]}]}`

// writerCredentials are temporary credentials limited to writerPolicy
// (MinIO's STS AssumeRole with a session policy).
func (b *s3Bench) writerCredentials(t *testing.T) aws.Credentials {
	t.Helper()
	c := sts.New(sts.Options{Region: "us-east-1", BaseEndpoint: aws.String(b.m.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider(b.m.User, b.m.Pass, "")})
	out, err := c.AssumeRole(context.Background(), &sts.AssumeRoleInput{RoleArn: aws.String("arn:xxx:xxx:xxx:xxxx"),
		RoleSessionName: aws.String("writer"), Policy: aws.String(writerPolicy), DurationSeconds: aws.Int32(3600)})
	if err != nil {
		t.Fatalf("AssumeRole: %v", err)
	}
	return aws.Credentials{AccessKeyID: *out.Credentials.AccessKeyId, SecretAccessKey: *out.Credentials.SecretAccessKey, SessionToken: *out.Credentials.SessionToken}
}

func (b *s3Bench) clientWith(cr aws.Credentials) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(b.m.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(cr.AccessKeyID, cr.SecretAccessKey, cr.SessionToken)})
}

const lockFile = s3Vars + `
variable "session_token" {
  sensitive = true
  default   = ""
}
variable "mode" { default = "compliance" }
variable "versioned" { default = true }
pipeline "backup" {
  chunk_size = "1MiB"
  source "fs" { path = "data" }
  compress {}
  encrypt { recipients = [file("keys/backup.pub")] }
  checksum {}
  sink "s3" {
    bucket            = var.bucket
    key               = "locked/${pipeline.name}/${run.id}/"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
    session_token     = var.session_token
    part_size         = "5MiB"
    object_lock_days  = 1
    object_lock_mode  = var.mode
    keep_last         = 1
  }
}
pipeline "restore" {
  source "s3" {
    bucket            = var.bucket
    prefix            = "locked/backup/"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
    versioned         = var.versioned
  }
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "fs" { path = "out/" }
}
`

// An object-locked bucket under attack with the backup writer's own
// credentials: every run stays, as written, and restores.
func TestS3ObjectLock(t *testing.T) {
	b := newS3Bench(t)
	ctx := context.Background()
	bucket := "locked"
	for _, name := range []string{bucket, "governance"} {
		if _, err := b.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
			t.Fatal(err)
		}
	}
	plain := b.bucket(t, "unlocked")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p.hcl"), []byte(lockFile))
	mustPipe(t, dir, nil, "keygen", "-o", "keys/backup")

	t.Run("a bucket without lock is refused before anything is stored", func(t *testing.T) {
		writeFile(t, filepath.Join(dir, "data/a"), randomBytes(9, 1000))
		r := runPipe(t, dir, b.env(plain, b.m.Endpoint), "run", "p.hcl", "--pipeline", "backup")
		if r.Err == nil || !strings.Contains(r.Stderr, "object lock") {
			t.Fatalf("err %v, want a failure that names object lock:\n%s", r.Err, r.Stderr)
		}
		if keys := b.keys(t, plain, ""); len(keys) != 0 {
			t.Errorf("the unlocked bucket holds %v", keys)
		}
	})

	if r := mustPipe(t, dir, b.env(bucket, b.m.Endpoint), "plan", "p.hcl"); !strings.Contains(r.Stdout, "lock: every object but the store's index locked (compliance) for 1 day from its upload") {
		t.Errorf("the plan does not show the lock:\n%s", r.Stdout)
	}
	writer := b.writerCredentials(t)
	t.Run("governance", func(t *testing.T) {
		env := append(b.env("governance", b.m.Endpoint, "PIPE_VAR_mode=governance"), "PIPE_VAR_access_key="+writer.AccessKeyID, "PIPE_VAR_secret_key="+writer.SecretAccessKey, "PIPE_VAR_session_token="+writer.SessionToken)
		writeFile(t, filepath.Join(dir, "data/a"), randomBytes(7, 1000))
		mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup")
		r := mustPipe(t, dir, env, "verify", "p.hcl", "--pipeline", "backup", "--locks")
		if !strings.Contains(r.Stdout, "locked (governance) until at least") {
			t.Errorf("verify --locks:\n%s", r.Stdout)
		}
	})
	env := append(b.env(bucket, b.m.Endpoint), "PIPE_VAR_access_key="+writer.AccessKeyID, "PIPE_VAR_secret_key="+writer.SecretAccessKey, "PIPE_VAR_session_token="+writer.SessionToken)
	var runs []string
	data := map[string][]byte{}
	for i := range 3 {
		d := randomBytes(uint64(100+i), 7*s3MiB) // two parts: a multipart upload
		writeFile(t, filepath.Join(dir, "data/a"), d)
		r := mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup", "--json")
		id := runIDOf(t, r.Stdout)
		runs = append(runs, id)
		data[id] = d
		if i > 0 && !strings.Contains(r.Stdout, `"locked_runs": [`) {
			t.Errorf("run %d: retention does not say the older runs wait for their lock:\n%s", i, r.Stdout)
		}
	}
	if r := mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup"); !strings.Contains(r.Stderr, "waits: the store locks it") {
		t.Errorf("the summary does not say the older runs wait for their lock:\n%s", r.Stderr)
	}

	t.Run("prune deletes nothing locked and says until when", func(t *testing.T) {
		r := mustPipe(t, dir, b.env(bucket, b.m.Endpoint), "backups", "prune", "p.hcl")
		for _, id := range runs[:2] {
			if !strings.Contains(r.Stdout, "wait: run "+id+" (compliance until ") {
				t.Errorf("prune does not list run %s as waiting:\n%s", id, r.Stdout)
			}
		}
		if strings.Contains(r.Stdout, "deleted run") {
			t.Errorf("prune deleted a locked run:\n%s", r.Stdout)
		}
		r = runPipe(t, dir, b.env(bucket, b.m.Endpoint), "backups", "delete", "p.hcl", runs[0])
		if r.Err == nil || !strings.Contains(r.Stderr, "is locked by the store; nothing was deleted") {
			t.Errorf("delete of a locked run: %v:\n%s", r.Err, r.Stderr)
		}
	})

	t.Run("verify --locks", func(t *testing.T) {
		r := mustPipe(t, dir, env, "verify", "p.hcl", "--pipeline", "backup", "--all", "--locks")
		for _, id := range runs {
			if !strings.Contains(r.Stdout, "run "+id+": ") || !strings.Contains(r.Stdout, "locked (compliance) until at least") {
				t.Errorf("verify --locks does not prove run %s locked:\n%s", id, r.Stdout)
			}
		}
	})

	// The attack, with the writer's credentials, on every version of
	// every object of the runs.
	written := b.attack(t, writer, bucket, "locked/")
	t.Logf("ransomware drill: %d objects of %d runs, every one written over and hidden by a delete marker", len(written), len(runs)+1)

	t.Run("without versioned the runs are hidden", func(t *testing.T) {
		r := runPipe(t, dir, b.env(bucket, b.m.Endpoint, "PIPE_VAR_versioned=false"), "run", "p.hcl", "--pipeline", "restore", "--run", runs[0])
		if r.Err == nil {
			t.Fatalf("a restore that reads the newest versions succeeded after the attack:\n%s", r.Stderr)
		}
	})

	t.Run("every run restores as written", func(t *testing.T) {
		for _, id := range runs {
			out := filepath.Join(dir, "out")
			if err := os.RemoveAll(out); err != nil {
				t.Fatal(err)
			}
			mustPipe(t, dir, b.env(bucket, b.m.Endpoint), "run", "p.hcl", "--pipeline", "restore", "--run", id)
			got, err := os.ReadFile(filepath.Join(out, "a"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data[id]) {
				t.Errorf("run %s restored %d bytes that differ from the %d backed up", id, len(got), len(data[id]))
			}
		}
	})
}

// runIDOf is the run id in pipe run --json's output.
func runIDOf(t *testing.T, out string) string {
	t.Helper()
	const field = `"run_id": "`
	i := strings.Index(out, field)
	if i < 0 {
		t.Fatalf("no run id in\n%s", out)
	}
	rest := out[i+len(field):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		t.Fatal(errors.New("a run id without its end"))
	}
	return rest[:j]
}

// lockedArchive is walFile's archive made ready for an attacker: its
// store locks every object, reads them as pipe wrote them, and takes the
// writer's session credentials; push signs, fetch trusts only the key.
func lockedArchive(file string) string {
	file = strings.Replace(file, `variable "keys" { default = "/etc/pipe" }`, `variable "keys" { default = "/etc/pipe" }
variable "session_token" {
  sensitive = true
  default   = ""
}`, 1)
	file = strings.Replace(file, `    secret_access_key = var.secret_key
    timeout           = var.timeout`, `    secret_access_key = var.secret_key
    session_token     = var.session_token
    object_lock_days  = 1
    timeout           = var.timeout`, 1)
	return strings.Replace(file, `archive "pg" {`, `archive "pg" {
  sign { key = file("${var.keys}/signing.key") }
  trust { keys = [file("${var.keys}/signing.pub")] }`, 1)
}

// TestRansomwareDrill is the attack object lock and signatures are for:
// with the backup writer's own credentials, on every object of seven base
// backups and the WAL they need, shorten or clear each lock, delete each
// version, put delete markers, write over every object; then write a
// forged run, encrypted to the public recipient. Every lock change and
// delete is refused, every version pipe wrote survives, the forged run is
// refused by restore and verify, and a point-in-time recovery from the
// attacked archive reaches its target with exact rows.
func TestRansomwareDrill(t *testing.T) {
	requireDocker(t)
	b := newS3Bench(t)
	ctx := context.Background()
	bucket := "drill"
	if _, err := b.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket, ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	mustPipe(t, keys, nil, "keygen", "-o", "wal")
	mustPipe(t, keys, nil, "keygen", "--signing", "-o", "signing")
	writer := b.writerCredentials(t)
	inside := b.inside(bucket)
	inside["PIPE_VAR_access_key"], inside["PIPE_VAR_secret_key"], inside["PIPE_VAR_session_token"] = writer.AccessKeyID, writer.SecretAccessKey, writer.SessionToken
	archive := lockedArchive(strings.Replace(walFile, "ASYNC", "false", 1))
	pg := startWALCluster(t, "drill", false, inside, keys, testcontainers.WithFiles(
		testcontainers.ContainerFile{Reader: strings.NewReader(archive), ContainerFilePath: "/etc/pipe/pg.hcl", FileMode: 0o644},
		testcontainers.ContainerFile{HostFilePath: filepath.Join(keys, "signing.key"), ContainerFilePath: "/etc/pipe/signing.key", FileMode: 0o644},
		testcontainers.ContainerFile{HostFilePath: filepath.Join(keys, "signing.pub"), ContainerFilePath: "/etc/pipe/signing.pub", FileMode: 0o644},
	))
	port, err := pg.c.MappedPort(ctx, "5432/tcp")
	if err != nil {
		t.Fatal(err)
	}
	pg.mustSh(t, `echo "host replication all all scram-sha-256" >> pg_hba.conf`)
	pg.psql(t, 5432, "SELECT pg_reload_conf()")
	pg.mustSh(t, "pgbench -h /var/run/postgresql -U pipe -i -s 2 -q app")

	// Seven base backups by the writer, signed and locked, with writes
	// between them.
	host := t.TempDir()
	base := archive + `
variable "pg_dsn" { sensitive = true }
pipeline "base" {
  source "postgres_basebackup" { dsn = var.pg_dsn }
  compress {}
  encrypt { recipients = [file("${var.keys}/wal.pub")] }
  sign { key = file("${var.keys}/signing.key") }
  sink "s3" {
    bucket            = var.bucket
    key               = "base/${run.id}/${stream.name}${stream.ext}"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
    session_token     = var.session_token
    object_lock_days  = 1
    keep_last         = 1
  }
}
`
	writeFile(t, filepath.Join(host, "base.hcl"), []byte(base))
	dsn := fmt.Sprintf("postgres://pipe:%s@localhost:%s/app?sslmode=disable", pgPassword, port.Port())
	env := append(b.env(bucket, b.m.Endpoint, "PIPE_VAR_keys="+keys, "PIPE_VAR_pg_dsn="+dsn),
		"PIPE_VAR_access_key="+writer.AccessKeyID, "PIPE_VAR_secret_key="+writer.SecretAccessKey, "PIPE_VAR_session_token="+writer.SessionToken)
	pg.psql(t, 5432, "CREATE TABLE marks (note text, at timestamptz DEFAULT clock_timestamp())")
	// keep_last = 1, but every run is locked for a day: retention and
	// WAL retention wait, and say so, with credentials that could not
	// delete anyway.
	var runs []string
	for i := range 7 {
		pg.psql(t, 5432, fmt.Sprintf("INSERT INTO marks (note) VALUES ('night %d')", i))
		out := mustPipe(t, host, env, "run", "base.hcl", "--json").Stdout
		runs = append(runs, runIDOf(t, out))
		var all struct {
			Pipelines []struct {
				Retention []struct {
					Locked []json.RawMessage `json:"locked_runs"`
					Error  string            `json:"error"`
				} `json:"retention"`
				WAL *struct {
					Locked map[string]json.RawMessage `json:"locked"`
					Error  string                     `json:"error"`
				} `json:"wal_retention"`
			} `json:"pipelines"`
		}
		if err := json.Unmarshal([]byte(out), &all); err != nil || len(all.Pipelines) != 1 {
			t.Fatalf("run %d: %v\n%s", i, err, out)
		}
		rep := all.Pipelines[0]
		if len(rep.Retention) != 1 || rep.Retention[0].Error != "" || len(rep.Retention[0].Locked) != i {
			t.Errorf("run %d: retention %+v, want %d runs waiting for their locks", i, rep.Retention, i)
		}
		if rep.WAL == nil || rep.WAL.Error != "" || len(rep.WAL.Locked) != 1 {
			t.Errorf("run %d: WAL retention %+v, want it stopped at a locked file\n%s", i, rep.WAL, out)
		}
	}
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('before')")
	time.Sleep(1500 * time.Millisecond)
	target := pg.psql(t, 5432, "SELECT clock_timestamp()::text")
	time.Sleep(1500 * time.Millisecond)
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('after')")
	pg.archivedThrough(t)
	want := pg.psql(t, 5432, "SELECT string_agg(note, ',' ORDER BY at) FROM marks WHERE note <> 'after'")
	all := pg.psql(t, 5432, "SELECT string_agg(note, ',' ORDER BY at) FROM marks")

	// The attack, with the writer's credentials, on every version of
	// every object pipe wrote.
	written := b.attack(t, writer, bucket, "")
	wal := 0
	for key := range written {
		if strings.HasPrefix(key, "archive/") {
			wal++
		}
	}
	t.Logf("ransomware drill: %d objects (%d of the WAL archive) of 7 base backups, every one written over and hidden by a delete marker", len(written), wal)

	// A forged run, newer than every real one: written with the writer's
	// credentials and the public recipient, without the signing key.
	forge := strings.Replace(strings.Replace(base, `  sign { key = file("${var.keys}/signing.key") }
`, "", 2), `  source "postgres_basebackup" { dsn = var.pg_dsn }`, `  source "fs" { path = "forged" }`, 1)
	writeFile(t, filepath.Join(host, "forge.hcl"), []byte(forge))
	writeFile(t, filepath.Join(host, "forged/base.tar"), randomBytes(3, 4096))
	mustPipe(t, host, env, "run", "forge.hcl", "--pipeline", "base")

	// Restore and recover inside the server's container, with the
	// writer's credentials: the forged run is refused, the newest real run
	// before the target is recovered to it.
	restore := lockedArchive(pitrFile("/tmp/drill", fmt.Sprintf(`recovery_target_time   = %q
    recovery_target_action = "promote"`, target)))
	restore = strings.Replace(restore, `prefix = "base/"`, `prefix = "base/"
    session_token = var.session_token
    versioned = true`, 1)
	restore = strings.Replace(restore, `  decrypt { identities = [file("${var.keys}/wal.key")] }
  decompress {}
  sink "postgres_basebackup"`, `  decrypt { identities = [file("${var.keys}/wal.key")] }
  decompress {}
  trust { keys = [file("${var.keys}/signing.pub")] }
  sink "postgres_basebackup"`, 1)
	if err := pg.c.CopyToContainer(ctx, []byte(restore), "/etc/pipe/drill.hcl", 0o644); err != nil {
		t.Fatal(err)
	}
	latest := strings.Replace(strings.Replace(restore, "/tmp/drill", "/tmp/latest", 1), fmt.Sprintf("recovery_target_time   = %q", target), "", 1)
	latest = strings.Replace(latest, `recovery_target_action = "promote"`, "", 1)
	if err := pg.c.CopyToContainer(ctx, []byte(latest), "/etc/pipe/latest.hcl", 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := pg.sh(t, "pipe run /etc/pipe/latest.hcl"); code == 0 || !strings.Contains(out, "is refused: it is not signed") {
		t.Errorf("a restore of the newest run, the forged one: exit %d\n%s", code, out)
	}
	r := runPipe(t, host, append(env, "PIPE_VAR_access_key="+b.m.User, "PIPE_VAR_secret_key="+b.m.Pass, "PIPE_VAR_session_token="), "verify", "base.hcl", "--pipeline", "base")
	if r.Err == nil || !strings.Contains(r.Stdout, "is refused: it is not signed") {
		t.Errorf("verify of the newest run, the forged one: %v\n%s", r.Err, r.Stdout)
	}
	pg.mustSh(t, "pipe run /etc/pipe/drill.hcl")
	log := pg.startRestored(t, "/tmp/drill", 5450, "")
	if got := pg.psql(t, 5450, "SELECT string_agg(note, ',' ORDER BY at) FROM marks"); got != want {
		t.Errorf("recovered to %s from the attacked archive: marks holds %q, want %q\n%s", target, got, want, lastLines(log, 20))
	}
	pg.mustSh(t, "pg_ctl -D /tmp/drill -m fast -w stop")

	// The newest real run, chosen, recovered to the end of the attacked
	// archive: fetch tells its end from a gap through the versions.
	pg.mustSh(t, "pipe run /etc/pipe/latest.hcl --run "+runs[len(runs)-1])
	log = pg.startRestored(t, "/tmp/latest", 5451, "")
	if got := pg.psql(t, 5451, "SELECT string_agg(note, ',' ORDER BY at) FROM marks"); got != all {
		t.Errorf("recovered to the end of the attacked archive: marks holds %q, want %q\n%s", got, all, lastLines(log, 20))
	}
}

// attack does, with the writer's credentials, what ransomware would to
// every version of every object under prefix (the index aside): shorten
// its lock, clear it (bypassing governance), delete the version, put a
// delete marker on it, and write over it; then the bucket's owner puts a
// delete marker on top. Every lock change and delete must be refused, and
// every version pipe wrote must survive. It returns the versions pipe
// wrote, by key.
func (b *s3Bench) attack(t *testing.T, writer aws.Credentials, bucket, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	attacker := b.clientWith(writer)
	written := map[string]string{}
	vp := s3.NewListObjectVersionsPaginator(b.client, &s3.ListObjectVersionsInput{Bucket: &bucket, Prefix: aws.String(prefix)})
	for vp.HasMorePages() {
		page, err := vp.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range page.Versions {
			if !strings.HasSuffix(*v.Key, "pipe-index.json") {
				written[*v.Key] = *v.VersionId
			}
		}
	}
	var refused, attempts int
	for key, version := range written {
		for _, try := range []func() error{
			func() error { // shorten the lock
				_, err := attacker.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: &bucket, Key: aws.String(key), VersionId: aws.String(version),
					Retention: &types.ObjectLockRetention{Mode: types.ObjectLockRetentionModeCompliance, RetainUntilDate: aws.Time(time.Now().Add(time.Minute))}})
				return err
			},
			func() error { // clear it, bypassing governance
				_, err := attacker.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: &bucket, Key: aws.String(key), VersionId: aws.String(version),
					Retention: &types.ObjectLockRetention{}, BypassGovernanceRetention: aws.Bool(true)})
				return err
			},
			func() error { // delete the version
				_, err := attacker.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(key), VersionId: aws.String(version), BypassGovernanceRetention: aws.Bool(true)})
				return err
			},
			func() error { // a delete marker
				_, err := attacker.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(key)})
				return err
			},
		} {
			attempts++
			if try() != nil {
				refused++
			}
		}
		// Writing over it is allowed (a new version): nothing pipe does
		// may read it.
		if _, err := attacker.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(key), Body: bytes.NewReader([]byte("encrypted by ransomware")),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c}); err != nil {
			t.Errorf("overwriting %s: %v", key, err)
		}
		if _, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(key)}); err != nil {
			t.Errorf("a delete marker on %s: %v", key, err)
		}
	}
	t.Logf("attack on %d objects: %d of %d lock changes and deletes refused", len(written), refused, attempts)
	if refused != attempts || attempts == 0 {
		t.Errorf("%d of %d attempts to shorten a lock or delete a version succeeded", attempts-refused, attempts)
	}
	for key, version := range written {
		if _, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(key), VersionId: aws.String(version)}); err != nil {
			t.Errorf("the version pipe wrote of %s is gone: %v", key, err)
		}
	}
	return written
}
