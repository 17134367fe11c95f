package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pipebackup/pipe/wal/walname"
)

// Two pushes of different content under one name at the same moment,
// through two archives on one store (an old primary and a promoted
// standby on the same timeline): exactly one archives its file, the
// other gets ErrConflict, and a fetch returns the winner's bytes; a
// retry of the winner is a notice, of the loser a conflict again.
func TestPushRace(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	root := filepath.Join(t.TempDir(), "wal")
	archives := [2]*Archive{newArchive(t, root, c), newArchive(t, root, c)}
	for n := uint64(1); n <= 16; n++ {
		f, _ := walname.ParseName(name(1, n))
		data := [2][]byte{segment(testSysID, 1, n), segment(testSysID, 1, n+1000)}
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range archives {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = archives[i].PushData(ctx, f, data[i])
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("%s: both pushes of different content archived their file", f.Name)
			case err == nil:
				winner = i
			case !errors.Is(err, ErrConflict):
				t.Fatalf("%s: the losing push failed with %v, not ErrConflict", f.Name, err)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: neither push archived its file: %v", f.Name, errs)
		}
		got, err := archives[1-winner].FetchData(ctx, f.Name)
		if err != nil || string(got) != string(data[winner]) {
			t.Fatalf("%s: fetch after the race: %v (the winner's bytes: %v)", f.Name, err, string(got) == string(data[winner]))
		}
		if r, err := archives[1-winner].PushData(ctx, f, data[winner]); err != nil || !r.Already {
			t.Fatalf("%s: the winner's content again: %+v, %v", f.Name, r, err)
		}
		if _, err := archives[winner].PushData(ctx, f, data[1-winner]); !errors.Is(err, ErrConflict) {
			t.Fatalf("%s: the loser again: %v, want ErrConflict", f.Name, err)
		}
	}
	l, err := archives[0].List(ctx)
	must(t, err)
	if len(l.Entries) != 16 || len(l.Duplicates) != 0 || len(l.Claims) != 16 || l.Other != 0 {
		t.Fatalf("the archive holds %d files, %d claims, duplicates %v, %d other objects", len(l.Entries), len(l.Claims), l.Duplicates, l.Other)
	}
}

// A push killed after it claimed a name and before it stored the object
// leaves a claim alone: the retry of the same file stores it; other
// content is refused, as if the first were archived.
func TestClaimWithoutObject(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	data, other := segment(testSysID, 1, 1), segment(testSysID, 1, 2)
	f, _ := walname.ParseName(name(1, 1))
	claim := filepath.Join(a.Root, walname.Dir(testSysID, 1), f.Name+ClaimExt)
	must(t, os.MkdirAll(filepath.Dir(claim), 0o700))
	must(t, os.WriteFile(claim, []byte(fileDigest(data)+"\n"), 0o600))
	if _, err := a.FetchData(ctx, f.Name); !errors.Is(err, ErrNotArchived) {
		t.Fatalf("a claim without its object fetched: %v", err)
	}
	if _, err := a.PushData(ctx, f, other); !errors.Is(err, ErrConflict) {
		t.Fatalf("other content under a claimed name: %v, want ErrConflict", err)
	}
	if r, err := a.PushData(ctx, f, data); err != nil || r.Already {
		t.Fatalf("the claimed content: %+v, %v; want it stored", r, err)
	}
	if got, err := a.FetchData(ctx, f.Name); err != nil || string(got) != string(data) {
		t.Fatalf("fetch after the retry: %v", err)
	}
	must(t, os.WriteFile(claim+"x", nil, 0o600)) // not a claim: another object
	must(t, os.WriteFile(filepath.Join(a.Root, walname.Dir(testSysID, 1), name(1, 2)+ClaimExt), []byte("junk\n"), 0o600))
	if _, err := a.PushData(ctx, walname.File{Name: name(1, 2), Kind: walname.Segment, Timeline: 1}, other); err == nil || errors.Is(err, ErrConflict) {
		t.Fatalf("a damaged claim: %v, want an error that is not a conflict", err)
	}
}

// A missing segment before archived WAL of its timeline is a hole, also
// when the next file archived is a .partial or lies logs away; after the
// last archived segment, or before only another timeline's, it is not
// archived.
func TestFetchHole(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	for _, n := range []uint64{1, 2, 4, 9000} {
		_, err := a.Push(ctx, c.write(t, name(1, n), segment(testSysID, 1, n)))
		must(t, err)
	}
	_, err := a.Push(ctx, c.write(t, name(2, 9100)+".partial", segment(testSysID, 2, 9100)))
	must(t, err)
	_, err = a.Push(ctx, c.write(t, name(3, 50), segment(testSysID, 3, 50)))
	must(t, err)
	dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
	for _, tc := range []struct {
		name string
		want error
	}{
		{name(1, 3), ErrHole},
		{name(1, 5), ErrHole},    // the next is 9000, two logs later
		{name(1, 8999), ErrHole}, // just before it
		{name(1, 9001), ErrNotArchived},
		{name(2, 9000), ErrHole}, // timeline 2 holds 9100.partial
		{name(2, 9101), ErrNotArchived},
		{name(3, 49), ErrHole},
		{name(4, 1), ErrNotArchived},
		{"00000005.history", ErrNotArchived},
	} {
		err := a.Fetch(ctx, tc.name, dest)
		if !errors.Is(err, tc.want) {
			t.Errorf("fetch %s: %v, want %v", tc.name, err, tc.want)
		}
		if errors.Is(tc.want, ErrHole) && errors.Is(err, ErrNotArchived) {
			t.Errorf("fetch %s: a hole reads as not archived", tc.name)
		}
	}
}

// An archive whose folder is not there is not an empty archive: fetch and
// list fail instead of answering "not archived" and "nothing".
func TestMissingRoot(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "unmounted", "wal"), c)
	err := a.Fetch(ctx, name(1, 1), filepath.Join(t.TempDir(), "x"))
	if err == nil || errors.Is(err, ErrNotArchived) {
		t.Errorf("fetch from a missing folder: %v", err)
	}
	if _, err := a.List(ctx); err == nil {
		t.Error("listed a missing folder as an empty archive")
	}
	must(t, os.MkdirAll(a.Root, 0o700))
	if err := a.Fetch(ctx, name(1, 1), filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrNotArchived) {
		t.Errorf("fetch from an empty archive: %v", err)
	}
	if l, err := a.List(ctx); err != nil || len(l.Entries) != 0 {
		t.Errorf("list of an empty archive: %v, %v", l, err)
	}
}

// putRaw archives data under f's name as an older pipe could have, with
// no look at its content.
func putRaw(t *testing.T, a *Archive, f walname.File, data []byte) {
	t.Helper()
	st, sum, err := a.encodeFile(context.Background(), bytes.NewReader(data), int64(len(data)))
	must(t, err)
	defer st.release()
	key := a.Root + walname.Dir(testSysID, f.Timeline) + walname.ObjectName(f.Name, sum, st.digest(), a.ext())
	must(t, a.putFrom(context.Background(), key, f.Name, st.n, st.WriteTo, false))
}

// verify --decrypt reads each file as its kind: junk archived as a
// history file, a backup label or a partial segment (as earlier versions
// of pipe let through) is bad; a backup label whose WAL the archive lacks
// is named, from its name alone without decoding and from its stop with.
func TestVerifyContent(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	for _, n := range []uint64{3, 4, 6} {
		_, err := a.Push(ctx, c.write(t, name(1, n), segment(testSysID, 1, n)))
		must(t, err)
	}
	seg := uint64(testSegSize)
	label := name(1, 2) + ".00000028.backup" // a backup from 2 to 4: 2 is missing
	_, err := a.Push(ctx, c.write(t, label, []byte(backupLabel(1, 2*seg+0x28, 4*seg+0x100))))
	must(t, err)
	label2 := name(1, 4) + ".00000028.backup" // from 4 to 5: 5 is missing
	_, err = a.Push(ctx, c.write(t, label2, []byte(backupLabel(1, 4*seg+0x28, 5*seg+0x100))))
	must(t, err)
	for _, f := range []string{"00000002.history", name(1, 6) + ".00000028.backup", name(1, 7) + ".partial"} {
		pf, _ := walname.ParseName(f)
		putRaw(t, a, pf, []byte("junk\n"))
	}
	l, err := a.List(ctx)
	must(t, err)
	rep, err := a.Verify(ctx, l, false, 2)
	must(t, err)
	if len(rep.Bad) != 0 {
		t.Errorf("verify without a key: %+v", rep.Bad)
	}
	// Without decoding, a label's name gives its start: 2 for the first,
	// and the junk label of 6 needs 6, which is there.
	if fmt.Sprint(rep.Labels) != fmt.Sprint([]LabelGap{{label, name(1, 2), name(1, 2), []string{name(1, 2)}, 1}}) {
		t.Errorf("labels' WAL missing, not decoded: %+v", rep.Labels)
	}
	rep, err = a.Verify(ctx, l, true, 2)
	must(t, err)
	bad := map[string]bool{}
	for _, b := range rep.Bad {
		o, _ := walname.ParseObject(filepath.Base(b.Key))
		bad[o.Name] = true
	}
	if len(rep.Bad) != 3 || !bad["00000002.history"] || !bad[name(1, 6)+".00000028.backup"] || !bad[name(1, 7)+".partial"] {
		t.Errorf("verify --decrypt found bad %+v, want the three junk files", rep.Bad)
	}
	want := []LabelGap{{label, name(1, 2), name(1, 4), []string{name(1, 2)}, 1}, {label2, name(1, 4), name(1, 5), []string{name(1, 5)}, 1}}
	if fmt.Sprint(rep.Labels) != fmt.Sprint(want) {
		t.Errorf("labels' WAL missing, decoded:\n got %+v\nwant %+v", rep.Labels, want)
	}
}
