package runner_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/runner"
)

// lockedStore is a store in memory whose objects can be locked: a
// delete of a locked object fails, as S3 Object Lock refuses it.
type lockedStore struct {
	objects map[string][]byte
	locks   map[string]sdk.Lock
	asked   int
}

func (s *lockedStore) List(context.Context) ([]sdk.ObjectInfo, error) {
	var out []sdk.ObjectInfo
	for k, b := range s.objects {
		out = append(out, sdk.ObjectInfo{Key: k, Size: int64(len(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (s *lockedStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	b, ok := s.objects[key]
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, sdk.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (s *lockedStore) Put(_ context.Context, key string, b []byte) error {
	s.objects[key] = b
	return nil
}

func (s *lockedStore) Remove(_ context.Context, key string) error {
	if s.locks[key].Held(time.Now()) {
		return fmt.Errorf("%s is locked", key)
	}
	delete(s.objects, key)
	return nil
}

func (s *lockedStore) ObjectLock(_ context.Context, key string) (sdk.Lock, error) {
	s.asked++
	return s.locks[key], nil
}

// addRun stores a run that finished at, its objects and manifest locked
// until until (none when zero).
func (s *lockedStore) addRun(at, until time.Time) string {
	id := at.UTC().Format("20060102T150405Z") + "-abcdef"
	data := []byte("data of " + id)
	m := &manifest.Manifest{RunID: id, Pipeline: "nightly", StartedAt: at, FinishedAt: at,
		Objects: []manifest.Object{{Stream: "a", Key: "a.zst", Size: int64(len(data)), Codec: "zstd", Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(data))}}}
	b, _ := m.Marshal()
	s.objects[id+"/a.zst"], s.objects[id+"/pipe-manifest.json"] = data, b
	if !until.IsZero() {
		for _, k := range []string{id + "/a.zst", id + "/pipe-manifest.json"} {
			s.locks[k] = sdk.Lock{Mode: "COMPLIANCE", Until: until}
		}
	}
	return id
}

// keepLast plans keep_last = n in the store at now, and holds what it
// locks.
func (s *lockedStore) keepLast(t *testing.T, n int, now time.Time) *runner.RetentionPlan {
	t.Helper()
	ctx := context.Background()
	cat, err := catalog.Read(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := runner.PlanRetention(cat, runner.Keep{Pipeline: "nightly", Rule: pipefile.Retention{Last: n}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.HoldLocked(ctx, s, now); err != nil {
		t.Fatal(err)
	}
	return rp
}

// Retention deletes no run the store still locks: the run waits, named
// with until when, and the runs whose lock ended go.
func TestRetentionWaitsForLocks(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	st := &lockedStore{objects: map[string][]byte{}, locks: map[string]sdk.Lock{}}
	unlocked := st.addRun(now.Add(-96*time.Hour), time.Time{})
	expired := st.addRun(now.Add(-72*time.Hour), now.Add(-time.Hour))
	locked := st.addRun(now.Add(-48*time.Hour), now.Add(30*time.Hour))
	newest := st.addRun(now.Add(-time.Hour), now.Add(70*time.Hour))
	rp := st.keepLast(t, 1, now)
	if len(rp.Locked) != 1 || rp.Locked[0].RunID != locked || !rp.Locked[0].Until.Equal(now.Add(30*time.Hour)) {
		t.Fatalf("locked: %+v, want run %s until %s", rp.Locked, locked, now.Add(30*time.Hour))
	}
	if s := rp.Locked[0].String(); !strings.Contains(s, "run "+locked+" (compliance until ") {
		t.Errorf("the waiting run is said as %q", s)
	}
	d, err := runner.ApplyRetention(ctx, st, rp)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(d.Runs)
	if strings.Join(d.Runs, ",") != unlocked+","+expired {
		t.Errorf("deleted %v, want %s and %s", d.Runs, unlocked, expired)
	}
	for _, id := range []string{locked, newest} {
		if _, ok := st.objects[id+"/pipe-manifest.json"]; !ok {
			t.Errorf("run %s lost its manifest", id)
		}
		if _, ok := st.objects[id+"/a.zst"]; !ok {
			t.Errorf("run %s lost its object", id)
		}
	}
	standing := map[string]bool{}
	for _, r := range rp.Standing() {
		standing[r.Manifest.RunID] = true
	}
	if !standing[locked] || !standing[newest] || len(standing) != 2 {
		t.Errorf("standing runs %v, want %s and %s (WAL retention keeps what they need)", standing, locked, newest)
	}
}

// A store that locks nothing is never asked twice per run, and a run's
// lock is its manifest's.
func TestRetentionAsksTheManifestOnly(t *testing.T) {
	now := time.Now()
	st := &lockedStore{objects: map[string][]byte{}, locks: map[string]sdk.Lock{}}
	for i := range 3 {
		st.addRun(now.Add(-time.Duration(48+i)*time.Hour), time.Time{})
	}
	st.keepLast(t, 1, now)
	if st.asked != 2 {
		t.Errorf("asked the store %d times for 2 runs to delete, want 2 (their manifests)", st.asked)
	}
}
