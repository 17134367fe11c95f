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

	"github.com/pipebackup/pipe/plugins/sdk"
)

// SourceType is the "fs" source.
type SourceType struct{}

var _ sdk.SourceType = SourceType{}

func (SourceType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Reads a file, or every file under a folder (one stream per file, named by its path relative to the folder), or a folder as one tar stream.",
		Attributes: []sdk.Attribute{
			{Name: "path", Type: sdk.String, Required: true, Description: "The file or folder to read. Relative paths start at the working directory."},
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
	err := filepath.WalkDir(s.root, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.Type().IsRegular() {
			return nil // folders; symlinks, sockets and devices need tar = true
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
	return out, err
}

func tarName(dir string) string {
	base := filepath.Base(filepath.Clean(dir))
	if base == "." || base == "/" {
		base = "root"
	}
	return base + ".tar"
}

// Open opens a stream, or any file under the source's folder.
func (s *Source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if s.tar && name == tarName(s.path) {
		return s.openTar(ctx), nil
	}
	clean := path.Clean(name)
	if !iofs.ValidPath(clean) {
		return nil, fmt.Errorf("%q is not a path inside %s", name, s.root)
	}
	f, err := os.Open(filepath.Join(s.root, filepath.FromSlash(clean)))
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", filepath.Join(s.root, clean), sdk.ErrNotFound)
		}
		return nil, err
	}
	return &fileReader{ctx: ctx, f: f}, nil
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
