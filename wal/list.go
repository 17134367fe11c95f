package wal

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/wal/walname"
)

// Entry is one archived object.
type Entry struct {
	walname.Object
	Key      string
	SystemID uint64
	Size     int64
	Modified time.Time
	// Untrusted, in an archive that trusts keys, says why no trusted key
	// signed the object's name: it counts for nothing but retention (its
	// file is missing unless another object holds it).
	Untrusted string
	// Again says another object listed before holds the same file (a
	// signed object pushed beside an unsigned one, or under another key,
	// or other content of a damaged archive): it counts for nothing but
	// verify and retention, which read and remove every object.
	Again bool
}

// Claim is a file name's claim (see ClaimExt).
type Claim struct {
	walname.File
	Key      string
	SystemID uint64
}

// Timeline is what the archive holds of one timeline of one cluster.
type Timeline struct {
	SystemID uint64 `json:"system_identifier,string"`
	Timeline uint32 `json:"timeline"`
	// Segments counts the segments; First and Last name the lowest and
	// highest.
	Segments int    `json:"segments"`
	First    string `json:"first,omitempty"`
	Last     string `json:"last,omitempty"`
	// Gaps are the runs of segments missing between First and Last.
	Gaps []Gap `json:"gaps,omitempty"`
	// History, Backups and Partials name the other files.
	History  []string  `json:"history,omitempty"`
	Backups  []string  `json:"backups,omitempty"`
	Partials []string  `json:"partials,omitempty"`
	Bytes    int64     `json:"bytes"`
	Newest   time.Time `json:"newest"`
}

// Gap is a run of missing segments, From to To inclusive.
type Gap struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Count uint64 `json:"count"`
}

// Listing is the archive's contents.
type Listing struct {
	Timelines []*Timeline `json:"timelines"`
	Entries   []Entry     `json:"-"`
	// Duplicates names files archived twice with other content (only a
	// damaged archive holds them: push never writes them).
	Duplicates []string `json:"duplicates,omitempty"`
	// Other counts objects under the root that are not archived WAL.
	Other int `json:"other_objects,omitempty"`
	// Claims are the claims of names (see ClaimExt).
	Claims []Claim `json:"-"`
	// SignaturesChecked says the archive trusts keys: each object's name
	// was checked, and Untrusted are the objects none of them signed.
	SignaturesChecked bool        `json:"signatures_checked,omitempty"`
	Untrusted         []BadObject `json:"untrusted,omitempty"`
	// Newest is when the newest segment was archived (zero: none).
	Newest     time.Time `json:"newest_segment"`
	NewestName string    `json:"newest_segment_name,omitempty"`
}

// Gaps counts the missing segments of every timeline.
func (l *Listing) Gaps() uint64 {
	var n uint64
	for _, t := range l.Timelines {
		for _, g := range t.Gaps {
			n += g.Count
		}
	}
	return n
}

// List reads the archive's contents: per cluster and timeline, the
// segments, the gaps between them and the other files.
func (a *Archive) List(ctx context.Context) (*Listing, error) {
	if err := a.CheckRoot(ctx); err != nil {
		return nil, err
	}
	infos, err := a.Store.List(ctx, a.Root)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", a.where(), err)
	}
	ls := &lister{
		root:    a.Root,
		segSize: a.SegmentSize,
		trust:   a.Trust,
		l:       &Listing{},
		tls:     map[string]*Timeline{},
		segs:    map[string][]uint64{},
		seen:    map[string]string{},
		dup:     map[string]bool{},
	}
	ls.l.SignaturesChecked = a.Trust != nil
	for _, in := range infos {
		ls.add(in)
	}
	return ls.finish(), nil
}

// lister builds a Listing from the objects under an archive's root, one
// object at a time.
type lister struct {
	root    string
	segSize uint32
	trust   signing.Trust // nil: signatures not checked
	l       *Listing
	tls     map[string]*Timeline // by folder
	segs    map[string][]uint64  // segment numbers, by folder
	seen    map[string]string    // dir+name → file digest
	dup     map[string]bool
}

// add files one object: a claim, an archived file (unless it is one
// listed already) or another object.
func (ls *lister) add(in sdk.ObjectInfo) {
	l := ls.l
	rel := strings.TrimPrefix(in.Key, ls.root)
	dir, base := path.Split(rel)
	parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
	if c, ok := parseClaim(base); ok && len(parts) == 2 && walname.Dir(mustSysID(parts[0]), c.Timeline) == dir {
		l.Claims = append(l.Claims, Claim{File: c, Key: in.Key, SystemID: mustSysID(parts[0])})
		return
	}
	o, err := walname.ParseObject(base)
	if err != nil || len(parts) != 2 || walname.Dir(mustSysID(parts[0]), o.Timeline) != dir {
		l.Other++
		return
	}
	id := mustSysID(parts[0])
	if ls.trust != nil {
		if _, err := checkSignature(o, ls.trust, dir); err != nil {
			why := untrusted(err)
			l.Entries = append(l.Entries, Entry{Object: o, Key: in.Key, SystemID: id, Size: in.Size, Modified: in.Modified, Untrusted: why})
			l.Untrusted = append(l.Untrusted, BadObject{Key: in.Key, Error: why})
			return
		}
	}
	if ls.duplicate(dir, o) {
		l.Entries = append(l.Entries, Entry{Object: o, Key: in.Key, SystemID: id, Size: in.Size, Modified: in.Modified, Again: true})
		return
	}
	l.Entries = append(l.Entries, Entry{Object: o, Key: in.Key, SystemID: id, Size: in.Size, Modified: in.Modified})
	ls.count(ls.timeline(dir, id, o.Timeline), dir, o, in)
}

// duplicate reports whether the file o in dir was listed already, and
// notes it among the duplicates when its content differs.
func (ls *lister) duplicate(dir string, o walname.Object) bool {
	if sum, ok := ls.seen[dir+o.Name]; ok {
		if sum != o.FileSum && !ls.dup[dir+o.Name] {
			ls.dup[dir+o.Name] = true
			ls.l.Duplicates = append(ls.l.Duplicates, dir+o.Name)
		}
		return true
	}
	ls.seen[dir+o.Name] = o.FileSum
	return false
}

// timeline returns the timeline of folder dir, added to the listing the
// first time.
func (ls *lister) timeline(dir string, id uint64, tli uint32) *Timeline {
	t := ls.tls[dir]
	if t == nil {
		t = &Timeline{SystemID: id, Timeline: tli}
		ls.tls[dir] = t
		ls.l.Timelines = append(ls.l.Timelines, t)
	}
	return t
}

// count adds the archived file o, stored as in, to its timeline t.
func (ls *lister) count(t *Timeline, dir string, o walname.Object, in sdk.ObjectInfo) {
	l := ls.l
	t.Bytes += in.Size
	switch o.Kind {
	case walname.Segment:
		n, _ := walname.SegmentNumber(o.Name, ls.segSize)
		ls.segs[dir] = append(ls.segs[dir], n)
		t.Segments++
		if in.Modified.After(t.Newest) {
			t.Newest = in.Modified
		}
		if in.Modified.After(l.Newest) {
			l.Newest, l.NewestName = in.Modified, o.Name
		}
	case walname.History:
		t.History = append(t.History, o.Name)
	case walname.Backup:
		t.Backups = append(t.Backups, o.Name)
	case walname.Partial:
		t.Partials = append(t.Partials, o.Name)
	}
}

// finish summarizes each timeline and puts the listing in order.
func (ls *lister) finish() *Listing {
	l := ls.l
	for _, t := range l.Timelines {
		t.summarize(ls.segs[walname.Dir(t.SystemID, t.Timeline)], ls.segSize)
	}
	sort.Slice(l.Timelines, func(i, j int) bool {
		x, y := l.Timelines[i], l.Timelines[j]
		if x.SystemID != y.SystemID {
			return x.SystemID < y.SystemID
		}
		return x.Timeline < y.Timeline
	})
	sort.Strings(l.Duplicates)
	sort.Slice(l.Untrusted, func(i, j int) bool { return l.Untrusted[i].Key < l.Untrusted[j].Key })
	return l
}

// summarize names the first and last of the timeline's segments ns and
// the gaps between them, and sorts its other files; a timeline without
// segments is left as it is.
func (t *Timeline) summarize(ns []uint64, segSize uint32) {
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	if len(ns) == 0 {
		return
	}
	t.First, t.Last = walname.SegmentName(t.Timeline, ns[0], segSize), walname.SegmentName(t.Timeline, ns[len(ns)-1], segSize)
	for i := 1; i < len(ns); i++ {
		if ns[i] > ns[i-1]+1 {
			t.Gaps = append(t.Gaps, Gap{From: walname.SegmentName(t.Timeline, ns[i-1]+1, segSize), To: walname.SegmentName(t.Timeline, ns[i]-1, segSize), Count: ns[i] - ns[i-1] - 1})
		}
	}
	sort.Strings(t.History)
	sort.Strings(t.Backups)
	sort.Strings(t.Partials)
}

// parseClaim parses a claim's base name.
func parseClaim(base string) (walname.File, bool) {
	n, ok := strings.CutSuffix(base, ClaimExt)
	if !ok {
		return walname.File{}, false
	}
	f, err := walname.ParseName(n)
	return f, err == nil
}

func mustSysID(s string) uint64 {
	id, err := walname.ParseSystemID(s)
	if err != nil || fmt.Sprint(id) != s {
		return 0
	}
	return id
}

func (a *Archive) where() string {
	if a.Root == "" {
		return "the archive"
	}
	return fmt.Sprintf("the archive %q", a.Root)
}

// BadObject is an object verify found wrong.
type BadObject struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// VerifyReport is what Verify found.
type VerifyReport struct {
	Objects int         `json:"objects"`
	Bytes   int64       `json:"bytes"`
	Decoded bool        `json:"decoded"`
	Bad     []BadObject `json:"bad,omitempty"`
	// Labels are the archived backup labels whose WAL the archive lacks.
	Labels []LabelGap `json:"backup_labels_missing_wal,omitempty"`
}

// Verify reads every listed object, workers at once, and checks its
// stored bytes against the digest in its name; with decode, it also
// decrypts and decompresses it and checks the file's digest (which needs
// the archive's Decrypt keys).
func (a *Archive) Verify(ctx context.Context, l *Listing, decode bool, workers int) (*VerifyReport, error) {
	rep := &VerifyReport{Decoded: decode}
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(workers, 1))
	labels := map[string]BackupLabel{} // decoded backup labels, by key
	for _, e := range l.Entries {
		if e.Untrusted != "" {
			// Nothing it holds counts: it is not read. The checks already
			// started count too, under mu.
			mu.Lock()
			rep.Objects++
			rep.Bad = append(rep.Bad, BadObject{Key: e.Key, Error: e.Untrusted})
			mu.Unlock()
			continue
		}
		g.Go(func() error {
			label, err := a.check(ctx, e, decode)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Objects++
			if err != nil {
				rep.Bad = append(rep.Bad, BadObject{Key: e.Key, Error: err.Error()})
			} else {
				rep.Bytes += e.Size
			}
			if label != nil {
				labels[e.Key] = *label
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return rep, err
	}
	sort.Slice(rep.Bad, func(i, j int) bool { return rep.Bad[i].Key < rep.Bad[j].Key })
	rep.Labels = a.labelGaps(l, labels)
	return rep, nil
}

// LabelGap is the WAL an archived backup label's base backup needs that
// the archive lacks.
type LabelGap struct {
	Label string `json:"label"`
	// First and Last name the segments the backup needs: from the label's
	// name alone (its start) unless it was decoded (its stop too).
	First string `json:"first"`
	Last  string `json:"last"`
	// Missing names the first missing segments; Count counts them.
	Missing []string `json:"missing"`
	Count   uint64   `json:"count"`
}

// labelGaps checks the WAL each archived backup label (.backup file)
// needs: the segments from its start to its stop, as decoded labels say,
// else its start segment, which its name gives.
func (a *Archive) labelGaps(l *Listing, decoded map[string]BackupLabel) []LabelGap {
	var out []LabelGap
	for _, e := range l.Entries {
		if e.Kind != walname.Backup || a.SegmentSize == 0 || e.Untrusted != "" || e.Again {
			continue
		}
		n, err := walname.SegmentNumber(e.Name[:24], a.SegmentSize)
		off, err2 := strconv.ParseUint(e.Name[25:33], 16, 32)
		if err != nil || err2 != nil {
			continue
		}
		r := Range{SystemID: e.SystemID, StartTLI: e.Timeline, StopTLI: e.Timeline, Start: n*uint64(a.SegmentSize) + off, SegmentSize: a.SegmentSize}
		if b, ok := decoded[e.Key]; ok {
			r.Start, r.Stop, r.StopTLI = b.Start, b.Stop, max(b.StopTLI, e.Timeline)
		}
		if missing, count := l.Missing(r, 10); count > 0 {
			first, last := r.Names()
			out = append(out, LabelGap{Label: e.Name, First: first, Last: last, Missing: missing, Count: count})
		}
	}
	return out
}

// check reads one object and checks it; decoded, a backup label's also
// returns what it says.
func (a *Archive) check(ctx context.Context, e Entry, decode bool) (*BackupLabel, error) {
	if decode {
		cc := &contentCheck{f: e.File, sysid: e.SystemID, segSize: a.SegmentSize}
		if err := a.read(ctx, e.Object, e.Key, cc); err != nil {
			return nil, err
		}
		return cc.check()
	}
	sum, err := a.storedDigest(ctx, e.Object, e.Key)
	if err != nil {
		return nil, err
	}
	if sum != e.StoredSum {
		return nil, fmt.Errorf("does not match the digest in its name: the object is corrupt or was tampered with")
	}
	return nil, nil
}
