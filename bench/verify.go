package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// checkSize fails unless path is a file of want bytes (want < 0: any
// non-empty file).
func checkSize(path string, want int64) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("expected output missing: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", path)
	}
	if want >= 0 && fi.Size() != want {
		return fi.Size(), fmt.Errorf("%s has %d bytes, want %d", path, fi.Size(), want)
	}
	if want < 0 && fi.Size() == 0 {
		return 0, fmt.Errorf("%s is empty", path)
	}
	return fi.Size(), nil
}

// sameContent fails unless the reader yields exactly the bytes of path.
func sameContent(r io.Reader, path, what string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	const block = 1 << 20
	a, b := make([]byte, block), make([]byte, block)
	var off int64
	for {
		na, ea := io.ReadFull(r, a)
		nb, eb := io.ReadFull(f, b)
		if !bytes.Equal(a[:na], b[:nb]) {
			return fmt.Errorf("%s differs from %s near byte %d", what, path, off+int64(min(na, nb)))
		}
		off += int64(na)
		doneA := ea == io.EOF || ea == io.ErrUnexpectedEOF
		doneB := eb == io.EOF || eb == io.ErrUnexpectedEOF
		if ea != nil && !doneA {
			return ea
		}
		if eb != nil && !doneB {
			return eb
		}
		if doneA || doneB {
			if doneA != doneB {
				return fmt.Errorf("%s and %s differ in length (after %d bytes)", what, path, off)
			}
			return nil
		}
	}
}

// sameFile is cmp: it fails unless the two files are identical.
func sameFile(got, want string) error {
	f, err := os.Open(got)
	if err != nil {
		return err
	}
	defer f.Close()
	return sameContent(f, want, got)
}

// sameAfterZstd fails unless `zstd -d -c zst` yields exactly the bytes of
// want: the reference tool reads pipe's output.
func sameAfterZstd(ctx context.Context, zst, want string) error {
	cmd := exec.CommandContext(ctx, "zstd", "-q", "-d", "-c", zst)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	cerr := sameContent(out, want, "zstd -d -c "+zst)
	_, _ = io.Copy(io.Discard, out)
	werr := cmd.Wait()
	if cerr != nil {
		return cerr
	}
	if werr != nil {
		return fmt.Errorf("zstd -d %s: %w: %s", zst, werr, stderr.String())
	}
	return nil
}
