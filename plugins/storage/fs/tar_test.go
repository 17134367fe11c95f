package fs

import (
	"archive/tar"
	"bytes"
	"syscall"
)

type syscallStat = syscall.Stat_t

type tarBuilder struct {
	buf bytes.Buffer
	w   *tar.Writer
}

func newTarBuilder() *tarBuilder {
	b := &tarBuilder{}
	b.w = tar.NewWriter(&b.buf)
	return b
}

func (b *tarBuilder) file(name, body string) {
	b.w.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
	b.w.Write([]byte(body))
}

func (b *tarBuilder) symlink(name, target string) {
	b.w.WriteHeader(&tar.Header{Name: name, Linkname: target, Mode: 0o777, Typeflag: tar.TypeSymlink})
}

func (b *tarBuilder) bytes() []byte {
	b.w.Close()
	return b.buf.Bytes()
}
