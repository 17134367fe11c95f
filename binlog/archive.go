package binlog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pipebackup/pipe/internal/binlogfile"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/dedup"
)

// Store is where an archive keeps its objects.
type Store interface {
	sdk.Sink
	List(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error)
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// Archive is a binlog archive: a store's folder, and how segments are
// sealed in it.
type Archive struct {
	Store Store
	// Root is the archive's folder in the store, "" or ending in "/".
	Root string
	// Seal is how the archiver seals each segment (one zstd frame, one
	// age file to its recipients); Open how fetch and verify open one
	// (the same codec, the identities).
	Seal, Open dedup.Format
	// Ext is what the format adds to an object's name (".zst.age").
	Ext string
	// Exclusive says the store creates an object only if none is at its
	// key (sdk.Schema.ExclusiveCreate): the archiver needs it.
	Exclusive bool
}

// ErrNotArchived is a file the archive holds no segment of.
var ErrNotArchived = errors.New("not archived")

// Segment is one stored byte range of a binlog file.
type Segment struct {
	Server     uint32
	File       string
	Start, End int64
	Sum        string // SHA-256 of the stored object, hex
	Key        string
	Size       int64 // the stored object's
}

var segmentName = regexp.MustCompile(`^([^/]+)\.([0-9a-f]{12})-([0-9a-f]{12})-([0-9a-f]{64})(\.[a-z0-9.]+)?$`)

// parseKey reads a segment's key below the archive's root.
func parseKey(rel string) (Segment, bool) {
	dir, base := path.Split(rel)
	id, err := strconv.ParseUint(strings.TrimSuffix(dir, "/"), 10, 32)
	m := segmentName.FindStringSubmatch(base)
	if err != nil || m == nil {
		return Segment{}, false
	}
	start, _ := strconv.ParseInt(m[2], 16, 64)
	end, _ := strconv.ParseInt(m[3], 16, 64)
	if end <= start {
		return Segment{}, false
	}
	return Segment{Server: uint32(id), File: m[1], Start: start, End: end, Sum: m[4]}, true
}

// key is where a segment goes.
func (a *Archive) key(s Segment) string {
	return fmt.Sprintf("%s%d/%s.%012x-%012x-%s%s", a.Root, s.Server, s.File, s.Start, s.End, s.Sum, a.Ext)
}

// Listing is what an archive holds, by server and file.
type Listing struct {
	// Files are each server's files, in order, with their segments in
	// order of their start.
	Servers map[uint32][]*File
	// Foreign are the keys under the root that are no segment.
	Foreign []string
}

// File is one binlog file of a server in the archive.
type File struct {
	Name     string
	Segments []Segment
	// End is where the segments from 0 on stop being contiguous: the
	// bytes a fetch restores.
	End int64
	// Gap is the first byte missing before a later segment (-1: none).
	Gap int64
}

// List reads what the archive holds.
func (a *Archive) List(ctx context.Context) (*Listing, error) {
	objs, err := a.Store.List(ctx, a.Root)
	if err != nil {
		return nil, fmt.Errorf("listing the binlog archive: %w", err)
	}
	l := &Listing{Servers: map[uint32][]*File{}}
	files := map[uint32]map[string]*File{}
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, a.Root)
		s, ok := parseKey(rel)
		if !ok {
			l.Foreign = append(l.Foreign, o.Key)
			continue
		}
		s.Key, s.Size = o.Key, o.Size
		if files[s.Server] == nil {
			files[s.Server] = map[string]*File{}
		}
		f := files[s.Server][s.File]
		if f == nil {
			f = &File{Name: s.File}
			files[s.Server][s.File] = f
			l.Servers[s.Server] = append(l.Servers[s.Server], f)
		}
		f.Segments = append(f.Segments, s)
	}
	for _, fs := range l.Servers {
		slices.SortFunc(fs, func(x, y *File) int { return binlogfile.CompareNames(x.Name, y.Name) })
		for _, f := range fs {
			f.cover()
		}
	}
	return l, nil
}

// cover sorts a file's segments and finds where they stop being
// contiguous. Two segments may start at one byte (an archiver that
// stored a range again after a crash): the longer counts.
func (f *File) cover() {
	slices.SortFunc(f.Segments, func(x, y Segment) int {
		if x.Start != y.Start {
			return int(x.Start - y.Start)
		}
		return int(y.End - x.End)
	})
	f.End, f.Gap = 0, -1
	for _, s := range f.Segments {
		switch {
		case s.Start <= f.End:
			f.End = max(f.End, s.End)
		case f.Gap < 0:
			f.Gap = f.End
		}
	}
}

// Put seals and stores bytes start..start+len(data) of a server's file.
func (a *Archive) Put(ctx context.Context, sealer *dedup.Sealer, server uint32, file string, start int64, data []byte) (Segment, error) {
	if !a.Exclusive {
		return Segment{}, errors.New("the archive's store cannot create an object only if none is there (its plugin does not declare exclusive create): keep the archive in an fs, s3, gcs or azure store")
	}
	blob, err := sealer.Seal(data)
	if err != nil {
		return Segment{}, fmt.Errorf("%s at %d: %w", file, start, err)
	}
	sum := sha256.Sum256(blob)
	s := Segment{Server: server, File: file, Start: start, End: start + int64(len(data)), Sum: hex.EncodeToString(sum[:]), Size: int64(len(blob))}
	s.Key = a.key(s)
	w, err := a.Store.Create(ctx, sdk.Object{Key: s.Key, Stream: file, Size: s.Size, MaxSize: s.Size, Exclusive: true})
	if err != nil {
		return Segment{}, fmt.Errorf("storing %s: %w", s.Key, err)
	}
	if _, err := w.Write(blob); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return Segment{}, fmt.Errorf("storing %s: %w", s.Key, err)
	}
	if err := w.Commit(ctx); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return Segment{}, fmt.Errorf("committing %s: %w", s.Key, err)
	}
	if fl, ok := a.Store.(sdk.Flusher); ok {
		if err := fl.Flush(ctx); err != nil {
			return Segment{}, fmt.Errorf("making %s durable: %w", s.Key, err)
		}
	}
	return s, nil
}

// read returns a segment's stored bytes, checked against its digest.
func (a *Archive) read(ctx context.Context, s Segment) ([]byte, error) {
	rc, err := a.Store.Open(ctx, s.Key)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.Key, err)
	}
	defer rc.Close()
	blob, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.Key, err)
	}
	if sum := sha256.Sum256(blob); hex.EncodeToString(sum[:]) != s.Sum {
		return nil, fmt.Errorf("%s is damaged: its SHA-256 is %x, its name says %s", s.Key, sum, s.Sum)
	}
	return blob, nil
}

// open decodes a segment's checked bytes.
func (a *Archive) open(opener *dedup.Opener, s Segment, blob []byte) ([]byte, error) {
	data, err := opener.Open(make([]byte, 0, s.End-s.Start), blob)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", s.Key, err)
	}
	if int64(len(data)) != s.End-s.Start {
		return nil, fmt.Errorf("%s holds %d bytes, its name says %d", s.Key, len(data), s.End-s.Start)
	}
	return data, nil
}

// Fetch writes a server's file, as far as its segments are contiguous,
// to dest (a temporary file beside it, renamed), and returns how many
// bytes it wrote. A file the archive holds nothing of is ErrNotArchived.
func (a *Archive) Fetch(ctx context.Context, l *Listing, server uint32, name, dest string) (int64, error) {
	var file *File
	closed := false // a later file follows: the server closed this one
	for _, f := range l.Servers[server] {
		if file != nil {
			closed = true
		}
		if f.Name == name {
			file = f
		}
	}
	if file == nil || file.End == 0 {
		return 0, fmt.Errorf("%s of server %d: %w", name, server, ErrNotArchived)
	}
	opener, err := a.Open.NewOpener()
	if err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(path.Dir(dest), ".pipe-binlog-*")
	if err != nil {
		return 0, sdk.ExplainIO(err)
	}
	defer os.Remove(tmp.Name())
	var at int64
	for _, s := range file.Segments {
		if s.End <= at {
			continue // a shorter copy of a range stored again
		}
		if s.Start > at {
			break
		}
		blob, err := a.read(ctx, s)
		if err != nil {
			tmp.Close()
			return 0, err
		}
		data, err := a.open(opener, s, blob)
		if err != nil {
			tmp.Close()
			return 0, err
		}
		if _, err := tmp.WriteAt(data[at-s.Start:], at); err != nil {
			tmp.Close()
			return 0, sdk.ExplainIO(err)
		}
		at = s.End
	}
	// The segments of a file stored while the server wrote it hold its
	// in-use flag, which the server cleared when it closed the file.
	if closed && at > 4+19 {
		if err := binlogfile.ClearInUse(tmp); err != nil {
			tmp.Close()
			return 0, sdk.ExplainIO(err)
		}
	}
	if err := errors.Join(tmp.Sync(), tmp.Close()); err != nil {
		return 0, sdk.ExplainIO(err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return 0, sdk.ExplainIO(err)
	}
	return at, nil
}

// Problem is what verify found wrong with one object or file.
type Problem struct {
	Key, What string
}

// Verify reads every segment and checks its digest; with decode it also
// opens each (decrypts, decompresses) and checks its length. It reports
// too each file with a gap, and each server whose file numbers skip one.
func (a *Archive) Verify(ctx context.Context, l *Listing, decode bool) ([]Problem, int, error) {
	var problems []Problem
	var opener *dedup.Opener
	if decode {
		var err error
		if opener, err = a.Open.NewOpener(); err != nil {
			return nil, 0, err
		}
	}
	n := 0
	for _, id := range slices.Sorted(maps.Keys(l.Servers)) {
		files := l.Servers[id]
		for i, f := range files {
			if f.Gap >= 0 {
				problems = append(problems, Problem{Key: fmt.Sprintf("%s%d/%s", a.Root, id, f.Name), What: fmt.Sprintf("bytes from %d on are missing before a later segment", f.Gap)})
			}
			if i > 0 {
				if next, err := binlogfile.NextName(files[i-1].Name); err == nil && next != f.Name {
					problems = append(problems, Problem{Key: fmt.Sprintf("%s%d/%s", a.Root, id, next), What: "missing: the archive holds the files before and after it"})
				}
			}
			for _, s := range f.Segments {
				if err := ctx.Err(); err != nil {
					return nil, n, err
				}
				n++
				blob, err := a.read(ctx, s)
				if err == nil && decode {
					_, err = a.open(opener, s, blob)
				}
				if err != nil {
					problems = append(problems, Problem{Key: s.Key, What: err.Error()})
				}
			}
		}
	}
	return problems, n, nil
}
