package fs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pipebackup/pipe/plugins/internal/untar"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// SinkType is the "fs" sink.
type SinkType struct{}

var _ sdk.SinkType = SinkType{}

func (SinkType) Schema() sdk.Schema {
	return sdk.Schema{
		Description:     "Writes each stream to a local file: a temporary file in the target folder, preallocated when the size is known, fsynced once, then renamed into place; folders are fsynced before the manifest is written.",
		Storage:         true,
		ExclusiveCreate: true,
		Attributes: []sdk.Attribute{
			{Name: "path", Type: sdk.String, Required: true, Key: true, Description: `Where each stream goes. A path ending in "/" is a folder that receives every stream as ${stream.name}${stream.ext}; a path that mentions ${stream.name} is a template; any other path is one file and the source must yield exactly one stream.`},
			{Name: "untar", Type: sdk.Bool, Default: false, Consumer: true, Description: "Each stream is a tar archive (from a source with tar = true, or any tar command): extract it into a folder at the path, without the name's .tar (data.tar → data/), instead of writing a file. The folder appears only when the whole archive was extracted; it gets no manifest."},
			{Name: "overwrite", Type: sdk.Bool, Default: false, Description: "Replace files (with untar: folders) that already exist at the path. Without it a run refuses to write over anything, as pg_restore, tar and pgBackRest do, and says what is in the way."},
		},
	}
}

type sinkConfig struct {
	Untar     bool `pipe:"untar"`
	Overwrite bool `pipe:"overwrite"`
}

func (SinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	var c sinkConfig
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	return &Sink{untar: c.Untar, overwrite: c.Overwrite, dirs: map[string]bool{}}, nil
}

// Sink writes local files.
type Sink struct {
	untar     bool
	overwrite bool
	mu        sync.Mutex
	dirs      map[string]bool // folders with renames not yet made durable
	// made are the folders this sink created, deepest last: those an
	// aborted object leaves empty go, so a failed run leaves no empty
	// run folder behind.
	made []string
}

var (
	_ sdk.Sink       = (*Sink)(nil)
	_ sdk.Remover    = (*Sink)(nil)
	_ sdk.Flusher    = (*Sink)(nil)
	_ sdk.FileWriter = (*fileWriter)(nil)
)

// Create makes the temporary file (or folder, with untar) next to the
// final path, so the rename at Commit is atomic.
func (s *Sink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	final := s.final(obj.Key)
	dir := filepath.Dir(final)
	if fi, err := os.Lstat(final); err == nil {
		switch {
		case fi.IsDir() && !s.untar:
			return nil, fmt.Errorf("%s is a folder; end the sink path with / to write into it", final)
		case !fi.IsDir() && s.untar:
			return nil, fmt.Errorf("%s exists and is not a folder", final)
		case obj.Exclusive || (!s.overwrite && !obj.Replace):
			return nil, existsError(final)
		}
	}
	// The folders and the temporary file (or folder) come to be under the
	// lock that an abort takes to remove folders it left empty.
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.mkdirAll(dir); err != nil {
		return nil, advise(err)
	}
	tmp := filepath.Join(dir, ".pipe-tmp-"+filepath.Base(final)+"-"+random())
	if s.untar {
		return newUntar(ctx, s, final, tmp)
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, advise(err)
	}
	if obj.Size > 0 {
		// Reserve the blocks up front; KEEP_SIZE leaves the file's length
		// to the writes. Filesystems without fallocate just skip it.
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, obj.Size); err != nil && isNoSpace(err) {
			f.Close()
			os.Remove(tmp)
			return nil, fmt.Errorf("reserving %d bytes for %s: %w", obj.Size, final, advise(err))
		}
	}
	return &fileWriter{ctx: ctx, s: s, f: f, tmp: tmp, final: final, replace: !obj.Exclusive && (s.overwrite || obj.Replace)}, nil
}

// existsError says that an object is in the way of one that may not
// replace it.
func existsError(final string) error {
	return fmt.Errorf("%s %w: pipe does not write over it unless the sink says overwrite = true (or give each run its own folder, with ${run.id} in path)", final, sdk.ErrExists)
}

// renameNoReplace renames oldpath to newpath only if nothing is at
// newpath, atomically: of two renames to one path, exactly one succeeds,
// and the other fails with EEXIST. A filesystem without RENAME_NOREPLACE
// gets a hard link (which never replaces either) and an unlink.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.ENOTSUP) {
		return err
	}
	if err := os.Link(oldpath, newpath); err != nil {
		return err
	}
	return os.Remove(oldpath)
}

// final is where the object at key ends up: the path, or with untar the
// folder named like the archive without its .tar.
func (s *Sink) final(key string) string {
	p := filepath.Clean(key)
	if s.untar {
		if base := strings.TrimSuffix(p, ".tar"); base != p && filepath.Base(base) != "." && filepath.Base(base) != "/" {
			return base
		}
	}
	return p
}

// mkdirAll makes dir and its missing parents, remembering the ones it
// made. The caller holds s.mu.
func (s *Sink) mkdirAll(dir string) error {
	var missing []string
	for d := dir; d != "." && d != "/" && d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		s.made = append(s.made, missing[i])
	}
	return nil
}

// dropEmpty removes the folders this sink made that are empty now,
// deepest first.
func (s *Sink) dropEmpty() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var kept []string
	for i := len(s.made) - 1; i >= 0; i-- {
		if os.Remove(s.made[i]) != nil {
			kept = append(kept, s.made[i])
		}
	}
	slices.Reverse(kept)
	s.made = kept
}

// Remove deletes a committed file or extracted folder, and the folders it
// leaves empty (a run's folder once its last object is gone).
func (s *Sink) Remove(ctx context.Context, key string) error {
	p := s.final(key)
	var err error
	if s.untar {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return err
	}
	for dir := filepath.Dir(p); dir != "." && dir != "/"; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty (or not ours)
		}
	}
	return nil //nolint:nilerr // a file already gone is removed
}

// Flush fsyncs every folder that received a rename, once.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	dirs := make([]string, 0, len(s.dirs))
	for d := range s.dirs {
		dirs = append(dirs, d)
	}
	s.dirs = map[string]bool{}
	s.mu.Unlock()
	sort.Strings(dirs)
	for _, d := range dirs {
		if err := untar.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sink) renamed(dir string) {
	s.mu.Lock()
	s.dirs[dir] = true
	s.mu.Unlock()
}

type fileWriter struct {
	ctx        context.Context // of Create: once it ends, nothing commits
	s          *Sink
	f          *os.File
	tmp, final string
	replace    bool // Commit may write over a file at final
	done       bool
	off        int64 // bytes written so far
	started    int64 // bytes whose writeback has been started
}

// writePiece is the largest write(2) the sink issues: large writes into
// the page cache stall on dirty-page throttling here (600 MB in 4 MiB writes
// took 1-1.6 s, in 1 MiB writes 0.16 s).
const writePiece = 1 << 20

// writebackEvery is how much is written before writeback of it is started.
const writebackEvery = 4 << 20

// File is the temporary file: across the plugin boundary pipe writes it
// directly (see sdk.FileWriter).
func (w *fileWriter) File() *os.File { return w.f }

// Write writes p and starts the disk writeback of what was written
// (sync_file_range WRITE, which does not wait), so that the disk works
// while the stream is still arriving and the final fsync has little left
// to do: durable output at the speed of an unsynced copy.
func (w *fileWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	written := 0
	for len(p) > 0 {
		n, err := w.f.Write(p[:min(len(p), writePiece)])
		written += n
		w.off += int64(n)
		p = p[n:]
		if err != nil {
			return written, fmt.Errorf("writing %s: %w", w.final, advise(err))
		}
	}
	if w.off-w.started >= writebackEvery {
		// Only a hint: a filesystem without it still gets the fsync.
		sdk.StartWriteback(w.f, w.started, w.off-w.started)
		w.started = w.off
	}
	return written, nil
}

func (w *fileWriter) Commit(ctx context.Context) error {
	if err := w.ctx.Err(); err != nil {
		w.Abort(ctx)
		return fmt.Errorf("not committing %s: %w", w.final, err)
	}
	if err := w.f.Sync(); err != nil {
		w.Abort(ctx)
		return fmt.Errorf("syncing %s: %w", w.final, advise(err))
	}
	if err := w.f.Close(); err != nil {
		w.Abort(ctx)
		return fmt.Errorf("closing %s: %w", w.final, advise(err))
	}
	rename := os.Rename
	if !w.replace {
		rename = renameNoReplace
	}
	if err := rename(w.tmp, w.final); err != nil {
		w.Abort(ctx)
		if errors.Is(err, iofs.ErrExist) {
			return existsError(w.final)
		}
		return fmt.Errorf("committing %s: %w", w.final, advise(err))
	}
	w.done = true
	w.s.renamed(filepath.Dir(w.final))
	return nil
}

func (w *fileWriter) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.f.Close()
	if err := os.Remove(w.tmp); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return err
	}
	w.s.dropEmpty()
	return nil
}

// untarWriter extracts a tar stream into a temporary folder, confined to
// it by os.Root (no entry can escape through ".." or a symlink), and renames
// the folder into place at Commit.
type untarWriter struct {
	ctx        context.Context
	s          *Sink
	tmp, final string
	x          *untar.Writer
	done       bool // committed, or cleaned up
}

func newUntar(ctx context.Context, s *Sink, final, tmp string) (*untarWriter, error) {
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, advise(err)
	}
	x, err := untar.NewWriter(tmp, nil)
	if err != nil {
		os.Remove(tmp)
		return nil, err
	}
	return &untarWriter{ctx: ctx, s: s, tmp: tmp, final: final, x: x}, nil
}

func (w *untarWriter) Write(p []byte) (int, error) {
	n, err := w.x.Write(p)
	if err != nil {
		return n, fmt.Errorf("extracting into %s: %w", w.final, advise(err))
	}
	return n, nil
}

func (w *untarWriter) Commit(ctx context.Context) error {
	if err := w.ctx.Err(); err != nil {
		w.Abort(ctx)
		return fmt.Errorf("not committing %s: %w", w.final, err)
	}
	if err := w.x.Close(); err != nil {
		w.Abort(ctx)
		return fmt.Errorf("extracting into %s: %w", w.final, advise(err))
	}
	if err := untar.SyncTree(w.tmp); err != nil {
		w.Abort(ctx)
		return err
	}
	if fi, err := os.Stat(w.final); err == nil && fi.IsDir() {
		if err := os.RemoveAll(w.final); err != nil {
			w.Abort(ctx)
			return fmt.Errorf("replacing %s: %w", w.final, err)
		}
	}
	if err := os.Rename(w.tmp, w.final); err != nil {
		w.Abort(ctx)
		return err
	}
	w.done = true
	w.s.renamed(filepath.Dir(w.final))
	return nil
}

func (w *untarWriter) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.x.Abort()
	err := os.RemoveAll(w.tmp)
	w.s.dropEmpty()
	return err
}

func random() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
}

// advise adds what to do to I/O errors.
func advise(err error) error { return sdk.ExplainIO(err) }

var _ sdk.Storage = (*Sink)(nil)

// List returns the files whose paths start with prefix, temporary files of
// interrupted runs included. Keys are written as Create was given them: the
// folder part of prefix as it is, then the path below it.
func (s *Sink) List(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error) {
	root := prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		root = prefix[:i+1]
	} else {
		root = ""
	}
	walk := filepath.Clean(root)
	if root == "" {
		walk = "."
	}
	var out []sdk.ObjectInfo
	err := filepath.WalkDir(walk, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(walk, p)
		if err != nil {
			return err
		}
		key := root + filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, sdk.ObjectInfo{Key: key, Size: fi.Size(), Modified: fi.ModTime()})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

var (
	_ sdk.RootChecker = (*Sink)(nil)
	_ sdk.AfterLister = (*Sink)(nil)
)

// CheckRoot reports a folder that does not exist (a disk not mounted, a
// typo) as sdk.ErrNotFound, and a path that is not a folder.
func (s *Sink) CheckRoot(ctx context.Context, prefix string) error {
	dir := filepath.Clean(prefix)
	if prefix == "" {
		dir = "."
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		abs, _ := filepath.Abs(dir)
		return fmt.Errorf("folder %s does not exist (is its disk mounted? is the path right?): %w", abs, sdk.ErrNotFound)
	case err != nil:
		return advise(err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a folder", dir)
	}
	return nil
}

// ListAfter lists the files under prefix whose keys sort after after, at
// most limit.
func (s *Sink) ListAfter(ctx context.Context, prefix, after string, limit int) ([]sdk.ObjectInfo, error) {
	all, err := s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(all), func(i int) bool { return all[i].Key > after })
	all = all[i:]
	return all[:min(len(all), limit)], nil
}

// Open reads a committed file.
func (s *Sink) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	f, err := os.Open(filepath.Clean(key))
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, sdk.ErrNotFound)
	}
	return f, err
}
