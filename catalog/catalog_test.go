package catalog

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

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// memStore is a store in memory.
type memStore map[string][]byte

func (m memStore) List(context.Context) ([]sdk.ObjectInfo, error) {
	var out []sdk.ObjectInfo
	for k, v := range m {
		out = append(out, sdk.ObjectInfo{Key: k, Size: int64(len(v))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m memStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	b, ok := m[key]
	if !ok {
		return nil, fmt.Errorf("%s: %w", key, sdk.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m memStore) run(t *testing.T, pipeline, id string, finished time.Time, objects ...string) {
	t.Helper()
	man := &manifest.Manifest{RunID: id, Pipeline: pipeline, StartedAt: finished.Add(-time.Minute), FinishedAt: finished}
	for _, o := range objects {
		data := []byte("object " + o)
		m[id+"/"+o] = data
		man.Objects = append(man.Objects, manifest.Object{Stream: o, Key: o, Size: int64(len(data)), Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(data)), Codec: "none"})
	}
	b, err := man.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	m[id+"/"+manifest.FileName] = b
}

func TestRead(t *testing.T) {
	st := memStore{}
	t0 := time.Date(2026, 11, 20, 1, 0, 0, 0, time.UTC)
	st.run(t, "nightly", "20261120T005900Z-aaaaaa", t0, "a", "b")
	st.run(t, "nightly", "20261121T005900Z-bbbbbb", t0.Add(24*time.Hour), "a")
	st.run(t, "weekly", "20261119T005900Z-cccccc", t0.Add(-24*time.Hour), "a")
	// A run that never finished, a temporary file and a stray object.
	st["20261122T005900Z-dddddd/a"] = []byte("partial")
	st["20261122T005900Z-dddddd/.pipe-tmp-b-123"] = []byte("tmp")
	st["notes.txt"] = []byte("hello")
	// A manifest that is not one, and one whose object climbs out.
	st["20261118T000000Z-eeeeee/pipe-manifest.json"] = []byte(`{"format":"pipe-manifest/v1","run_id":"x"}`)
	st.run(t, "nightly", "20261117T005900Z-ffffff", t0.Add(-72*time.Hour), "a")
	b := bytes.Replace(st["20261117T005900Z-ffffff/"+manifest.FileName], []byte(`"key": "a"`), []byte(`"key": "../../a"`), 1)
	st["20261117T005900Z-ffffff/"+manifest.FileName] = b

	c, err := Read(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range c.Runs {
		ids = append(ids, r.Manifest.RunID)
	}
	if got := strings.Join(ids, " "); got != "20261121T005900Z-bbbbbb 20261120T005900Z-aaaaaa 20261119T005900Z-cccccc" {
		t.Errorf("runs, newest first: %s", got)
	}
	if len(c.Invalid) != 2 {
		t.Fatalf("invalid: %+v", c.Invalid)
	}
	for _, inv := range c.Invalid {
		switch inv.Key {
		case "20261118T000000Z-eeeeee/pipe-manifest.json":
			if !strings.Contains(inv.Err.Error(), "invalid manifest") {
				t.Errorf("%s: %v", inv.Key, inv.Err)
			}
		case "20261117T005900Z-ffffff/pipe-manifest.json":
			if !strings.Contains(inv.Err.Error(), "outside the store") {
				t.Errorf("%s: %v", inv.Key, inv.Err)
			}
		default:
			t.Errorf("unexpected invalid %s", inv.Key)
		}
	}
	// Incomplete: the unfinished run (2 objects), the objects of the
	// refused manifests' runs, then the stray object without a run id.
	if len(c.Incomplete) == 0 || c.Incomplete[0].RunID != "20261122T005900Z-dddddd" || len(c.Incomplete[0].Objects) != 2 || c.Incomplete[0].Size != 10 {
		t.Errorf("incomplete[0] = %+v", c.Incomplete[0])
	}
	last := c.Incomplete[len(c.Incomplete)-1]
	if last.RunID != "" || len(last.Objects) != 1 || last.Objects[0].Key != "notes.txt" {
		t.Errorf("last incomplete group = %+v", last)
	}
	if n := c.Newer(c.Runs[0].Manifest.StartedAt); len(n) != 1 || n[0].RunID != "20261122T005900Z-dddddd" {
		t.Errorf("newer than the newest complete run: %+v", n)
	}
	if r := c.Run("20261120T005900Z-aaaaaa"); r == nil || r.Stored() != int64(len("object a")+len("object b")) {
		t.Errorf("Run(…aaaaaa) = %+v", r)
	}
}

// memWriter is a memStore pipe can write to.
type memWriter struct{ memStore }

func (m memWriter) Put(_ context.Context, key string, b []byte) error {
	m.memStore[key] = b
	return nil
}

func (m memWriter) Remove(_ context.Context, key string) error {
	delete(m.memStore, key)
	return nil
}

// countingStore counts the objects opened.
type countingStore struct {
	memStore
	opened *int
}

func (c countingStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	*c.opened++
	return c.memStore.Open(ctx, key)
}

// TestListThroughIndex: a listing reads the index instead of every
// manifest, and still tells the truth when the index is stale or lost.
func TestListThroughIndex(t *testing.T) {
	st := memStore{}
	t0 := time.Date(2026, 11, 20, 1, 0, 0, 0, time.UTC)
	for i := range 20 {
		st.run(t, "nightly", fmt.Sprintf("202611%02dT005900Z-%06x", i+1, i), t0.Add(time.Duration(i)*24*time.Hour), "a", "b")
	}
	st["20261130T005900Z-ffffff/a"] = []byte("partial") // a run that did not finish
	opened := 0
	cs := countingStore{st, &opened}
	first, err := List(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Runs) != 20 || first.Read != 20 || !first.Stale || len(first.Incomplete) != 1 {
		t.Fatalf("without an index: %d runs, %d read, stale %v, incomplete %v", len(first.Runs), first.Read, first.Stale, first.Incomplete)
	}
	if err := UpdateIndex(context.Background(), memWriter{st}, first.Runs, nil); err != nil {
		t.Fatal(err)
	}
	opened = 0
	second, err := List(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Runs) != 20 || second.FromIndex != 20 || second.Read != 0 || second.Stale || opened != 1 {
		t.Fatalf("through the index: %d runs, %d from it, %d read, %d opened, stale %v", len(second.Runs), second.FromIndex, second.Read, opened, second.Stale)
	}
	if second.Runs[0].RunID != "20261120T005900Z-000013" || second.Runs[0].Streams != 2 {
		t.Fatalf("newest = %+v", second.Runs[0])
	}
	if len(second.Incomplete) != 1 || second.Incomplete[0].RunID != "20261130T005900Z-ffffff" {
		t.Fatalf("incomplete = %+v", second.Incomplete)
	}
	// A run deleted and one added behind the index's back: the truth wins.
	delete(st, "20261101T005900Z-000000/pipe-manifest.json")
	st.run(t, "nightly", "20261201T005900Z-aaaaaa", t0.Add(40*24*time.Hour), "a")
	// A forged entry whose manifest does not exist is ignored.
	third, err := List(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Runs) != 20 || third.Read != 1 || !third.Stale || third.Runs[0].RunID != "20261201T005900Z-aaaaaa" {
		t.Fatalf("stale index: %d runs, %d read, stale %v, newest %s", len(third.Runs), third.Read, third.Stale, third.Runs[0].RunID)
	}
	for _, e := range third.Runs {
		if e.RunID == "20261101T005900Z-000000" {
			t.Fatal("a deleted run is listed")
		}
	}
	// A damaged index is read around.
	st[IndexName] = []byte("{not json")
	if l, err := List(context.Background(), cs); err != nil || len(l.Runs) != 20 || !l.Stale {
		t.Fatalf("damaged index: %v, %+v", err, l)
	}
}

// TestSelectReachesTheTarget: a restore that recovers to a point reads
// a run that ended before it. Unless a run is named, the newest such run;
// a run named (by id or --before) that ended after the point is refused
// before anything is read, naming the newest that can reach it.
func TestSelectReachesTheTarget(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	run := func(id string, finished time.Time, stopLSN string) *Run {
		m := &manifest.Manifest{RunID: id, Pipeline: "base", StartedAt: finished.Add(-time.Minute), FinishedAt: finished}
		if stopLSN != "" {
			m.Source = map[string]string{"stop_lsn": stopLSN}
		}
		return &Run{Key: id + "/" + manifest.FileName, Manifest: m}
	}
	c := &Catalog{Runs: []*Run{ // newest first
		run("20261126T115900Z-cccccc", t0.Add(2*time.Hour), "0/9000100"),
		run("20261126T105900Z-bbbbbb", t0.Add(time.Hour), "0/5000100"),
		run("20261126T095900Z-aaaaaa", t0, "0/2000100"),
	}}
	atTime := &Target{Attribute: "recovery_target_time", Value: "2026-11-26 10:30:00+00", Time: t0.Add(30 * time.Minute)}
	atLSN := &Target{Attribute: "recovery_target_lsn", Value: "0/6000000", LSN: 0x6000000}
	for _, tc := range []struct {
		name string
		sel  Selection
		want string // the run, or the words of the error
	}{
		{"time: the newest before it", Selection{Target: atTime}, "20261126T095900Z-aaaaaa"},
		{"lsn: the newest that ended at or before it", Selection{Target: atLSN}, "20261126T105900Z-bbbbbb"},
		{"lsn: exactly at the end", Selection{Target: &Target{Attribute: "recovery_target_lsn", Value: "0/5000100", LSN: 0x5000100}}, "20261126T105900Z-bbbbbb"},
		{"a run named that reaches it", Selection{RunID: "20261126T095900Z-aaaaaa", Target: atLSN}, "20261126T095900Z-aaaaaa"},
		{"a run named after the time", Selection{RunID: "20261126T105900Z-bbbbbb", Target: atTime},
			`run 20261126T105900Z-bbbbbb cannot be recovered to recovery_target_time = "2026-11-26 10:30:00+00": it finished at 2026-11-26T11:00:00Z, after the target, and a recovery replays forward from the end of the backup it restores (the server would refuse to start); restore run 20261126T095900Z-aaaaaa, the newest that can (run = "20261126T095900Z-aaaaaa" in the source, or --run 20261126T095900Z-aaaaaa), or choose a later target`},
		{"a run named after the position", Selection{RunID: "20261126T115900Z-cccccc", Target: atLSN}, "it ended at WAL position 0/9000100, after the target"},
		{"--before that picks a run after the target", Selection{Before: t0.Add(90 * time.Minute), Target: atTime}, "restore run 20261126T095900Z-aaaaaa"},
		{"none reaches it", Selection{Target: &Target{Attribute: "recovery_target_lsn", Value: "0/1000000", LSN: 0x1000000}},
			`no complete run can be recovered to recovery_target_lsn = "0/1000000" (no complete run): the oldest, 20261126T095900Z-aaaaaa: it ended at WAL position 0/2000100, after the target; choose a later target`},
		{"a run named, none reaches it", Selection{RunID: "20261126T095900Z-aaaaaa", Target: &Target{Attribute: "recovery_target_time", Value: "x", Time: t0.Add(-time.Hour)}}, "no run here can: choose a later target"},
	} {
		r, err := c.Select(tc.sel)
		var got string
		if err != nil {
			got = err.Error()
		} else {
			got = r.Manifest.RunID
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: %s\nwant %s", tc.name, got, tc.want)
		}
	}
	// A run that is not a base backup is not judged by a WAL position.
	plain := &Catalog{Runs: []*Run{run("20261126T115900Z-dddddd", t0, "")}}
	if r, err := plain.Select(Selection{Target: atLSN}); err != nil || r.Manifest.RunID != "20261126T115900Z-dddddd" {
		t.Errorf("a run without stop_lsn: %v %v", r, err)
	}
}

// goneStore lists a manifest that is gone when read: a prune deleted it
// between the listing and the read.
type goneStore struct{}

func (goneStore) List(context.Context) ([]sdk.ObjectInfo, error) {
	return []sdk.ObjectInfo{{Key: "20260101T000000Z-abcdef/pipe-manifest.json"}, {Key: "20260101T000000Z-abcdef/a.zst"}}, nil
}

func (goneStore) Open(_ context.Context, key string) (io.ReadCloser, error) {
	return nil, fmt.Errorf("%s: %w", key, sdk.ErrNotFound)
}

// A manifest deleted between the listing and its read is a run going,
// not an invalid manifest that stops every plan.
func TestReadManifestGone(t *testing.T) {
	c, err := Read(context.Background(), goneStore{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Invalid) != 0 || len(c.Runs) != 0 {
		t.Errorf("a vanished manifest: %d invalid, %d runs", len(c.Invalid), len(c.Runs))
	}
}
