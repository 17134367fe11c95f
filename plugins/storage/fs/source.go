package fs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// SourceType is the "fs" source.
type SourceType struct{}

var _ sdk.SourceType = SourceType{}

func (SourceType) Schema() sdk.Schema {
	return sdk.Schema{
		Storage:     true,
		Description: "Reads a file, or every file under a folder (one stream per file, named by its path relative to the folder), or a folder as one tar stream.",
		Attributes: []sdk.Attribute{
			{Name: "path", Type: sdk.String, Required: true, Public: true, Description: "The file or folder to read. Relative paths start at the working directory."},
			{Name: "tar", Type: sdk.Bool, Default: false, Description: "Read a folder as one tar stream (named after the folder, with .tar) that keeps directories, modes and symlinks."},
		},
	}
}

type sourceConfig struct {
	Path string `pipe:"path"`
	Tar  bool   `pipe:"tar"`
}

func (SourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	var c sourceConfig
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	fi, err := os.Stat(c.Path)
	if err != nil {
		return nil, sdk.AttrError("path", "cannot read the source path", describe(err))
	}
	s := &Source{path: c.Path, tar: c.Tar, dir: fi.IsDir()}
	if s.dir {
		s.root = c.Path
	} else {
		if c.Tar {
			return nil, sdk.AttrError("tar", "tar needs a folder", c.Path+" is a file; drop tar = true to read it as one stream")
		}
		s.root = filepath.Dir(c.Path)
	}
	return s, nil
}

// Source reads local files.
type Source struct {
	path string
	root string
	dir  bool
	tar  bool
}

var (
	_ sdk.Source    = (*Source)(nil)
	_ sdk.Selection = (*Source)(nil)
)

// Single reports whether path names one file (see sdk.Selection).
func (s *Source) Single() bool { return !s.dir }

// Streams lists the file, the folder's files (sorted by name), or the one
// tar stream.
func (s *Source) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	if !s.dir {
		fi, err := os.Stat(s.path)
		if err != nil {
			return nil, err
		}
		return []sdk.StreamInfo{{Name: filepath.Base(s.path), Size: fi.Size()}}, nil
	}
	if s.tar {
		return []sdk.StreamInfo{{Name: tarName(s.path), Size: -1}}, nil
	}
	var out []sdk.StreamInfo
	links, special := 0, 0
	err := filepath.WalkDir(s.root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case d.IsDir():
			return nil
		case d.Type()&iofs.ModeSymlink != 0:
			links++
			return nil
		case !d.Type().IsRegular():
			special++ // sockets, devices and pipes hold no data to back up
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		out = append(out, sdk.StreamInfo{Name: filepath.ToSlash(rel), Size: fi.Size()})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if err == nil && links+special > 0 {
		sdk.Log().Warn(fmt.Sprintf("%s: skipped %d symbolic link(s) and %d socket(s), device(s) or pipe(s): a folder is read file by file, and only regular files hold data; set tar = true to keep links (and folders and modes) in one tar stream", s.root, links, special),
			"symlinks", links, "special_files", special)
	}
	return out, err
}

func tarName(dir string) string {
	base := filepath.Base(filepath.Clean(dir))
	if base == "." || base == "/" {
		base = "root"
	}
	return base + ".tar"
}

// Open opens a stream, or any file under the source's folder. A file is
// opened through the folder as an os.Root, so no name and no symbolic link
// in the folder leads out of it: a restore reads the store and nothing
// beside it. Only the file path names itself is opened as it is (a link
// the user named on purpose is followed).
func (s *Source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if s.tar && name == tarName(s.path) {
		return s.openTar(ctx), nil
	}
	clean := path.Clean(name)
	if !iofs.ValidPath(clean) {
		return nil, fmt.Errorf("%q is not a path inside %s", name, s.root)
	}
	var f *os.File
	var err error
	if !s.dir && clean == filepath.Base(s.path) {
		f, err = os.Open(s.path)
	} else {
		f, err = openInside(s.root, filepath.FromSlash(clean))
	}
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", filepath.Join(s.root, clean), sdk.ErrNotFound)
		}
		return nil, fmt.Errorf("%s: %w", filepath.Join(s.root, clean), err)
	}
	return &fileReader{ctx: ctx, f: f}, nil
}

// openInside opens name under root, refusing any path or link that leaves
// root.
func openInside(root, name string) (*os.File, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(name)
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		return nil, fmt.Errorf("a symbolic link leads out of %s: a store is read only inside its folder", root)
	}
	return f, err
}

// fileReader reads a file until its context ends (a FIFO or a device may
// never reach EOF on its own).
type fileReader struct {
	ctx context.Context
	f   *os.File
}

func (r *fileReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.f.Read(p)
}

func (r *fileReader) Close() error { return r.f.Close() }

// Seek lets a ranged read (sdk.OpenRange: a deduplicated restore's chunk
// in its pack) start where it reads instead of reading up to there.
func (r *fileReader) Seek(offset int64, whence int) (int64, error) {
	return r.f.Seek(offset, whence)
}

// File and Done let pipe read the file itself across the plugin boundary.
func (r *fileReader) File() *os.File { return r.f }
func (r *fileReader) Done(eof bool)  {}

var _ sdk.FileReader = (*fileReader)(nil)

// openTar streams the folder as a tar archive written by a goroutine.
func (s *Source) openTar(ctx context.Context) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeTar(ctx, pw, s.root))
	}()
	return pr
}

func writeTar(ctx context.Context, w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	// The first name of each file with several (hard links), by device
	// and inode: the others are written as links to it, as tar does.
	names := map[[2]uint64]string{}
	err := filepath.WalkDir(root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() && link == "" {
			return nil // sockets, devices and pipes hold no data to back up
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", ""
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			id := [2]uint64{st.Dev, st.Ino}
			if first, seen := names[id]; seen {
				h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(h)
			}
			names[id] = h.Name
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err == nil && n != h.Size {
			err = fmt.Errorf("%s changed size while being read (%d → %d bytes)", p, h.Size, n)
		}
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// describe turns an OS error into advice.
func describe(err error) string {
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return err.Error() + ": check the path (relative paths start at the working directory)"
	case errors.Is(err, iofs.ErrPermission):
		return err.Error() + ": pipe's user cannot read it"
	}
	return err.Error()
}
