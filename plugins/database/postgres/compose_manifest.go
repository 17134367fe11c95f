package postgres

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// The lines of an incremental backup's backup_label that make PostgreSQL
// refuse to start on it; a composed chain drops them, as
// pg_combinebackup does.
var incrementalLabelLines = []string{"INCREMENTAL FROM LSN: ", "INCREMENTAL FROM TLI: "}

// stripLabel rewrites the backup_label at p without the incremental
// lines, and says whether it changed it.
func stripLabel(p string) (bool, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return false, err
	}
	var out bytes.Buffer
	changed := false
	for line := range strings.Lines(string(b)) {
		drop := false
		for _, prefix := range incrementalLabelLines {
			drop = drop || strings.HasPrefix(line, prefix)
		}
		if drop {
			changed = true
			continue
		}
		out.WriteString(line)
	}
	if !changed {
		return false, nil
	}
	return true, replaceFile(p, out.Bytes())
}

// replaceFile writes b at p through a file beside it, synced, renamed
// into place.
func replaceFile(p string, b []byte) error {
	tmp := p + ".pipe-partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// manifestEntry is a file's line of a server's backup manifest.
type manifestEntry struct {
	Path         *string `json:"Path,omitempty"`
	EncodedPath  *string `json:"Encoded-Path,omitempty"`
	Size         *uint64 `json:"Size"`
	LastModified string  `json:"Last-Modified,omitempty"`
	Algorithm    string  `json:"Checksum-Algorithm,omitempty"`
	Checksum     string  `json:"Checksum,omitempty"`
}

// fileLine reads line of a server's backup manifest: a file's entry
// ('{ "Path": … },', the manifest writes one to a line), or, ok false,
// any other line. An entry without its path or its size is an error.
func fileLine(line string) (e manifestEntry, ok bool, err error) {
	t := strings.TrimSpace(line)
	if !strings.HasPrefix(t, `{ "Path"`) && !strings.HasPrefix(t, `{ "Encoded-Path"`) {
		return e, false, nil
	}
	err = json.Unmarshal([]byte(strings.TrimSuffix(t, ",")), &e)
	if err == nil && (e.Size == nil || (e.Path == nil) == (e.EncodedPath == nil)) {
		err = errors.New("a file needs a path and a size")
	}
	return e, true, err
}

// name is the entry's path.
func (e manifestEntry) name() (string, error) {
	if e.Path != nil {
		return *e.Path, nil
	}
	if e.EncodedPath == nil {
		return "", errors.New("a file without a path")
	}
	b, err := hex.DecodeString(*e.EncodedPath)
	return string(b), err
}

// line writes the entry back as the server does: one line.
func (e manifestEntry) line(name string, encoded bool) string {
	var b strings.Builder
	if encoded {
		fmt.Fprintf(&b, `{ "Encoded-Path": %q`, hex.EncodeToString([]byte(name)))
	} else {
		p, _ := json.Marshal(name)
		fmt.Fprintf(&b, `{ "Path": %s`, p)
	}
	fmt.Fprintf(&b, `, "Size": %d`, *e.Size)
	if e.LastModified != "" {
		fmt.Fprintf(&b, `, "Last-Modified": %q`, e.LastModified)
	}
	if e.Algorithm != "" && !strings.EqualFold(e.Algorithm, "NONE") {
		fmt.Fprintf(&b, `, "Checksum-Algorithm": %q, "Checksum": %q`, e.Algorithm, e.Checksum)
	}
	b.WriteString(" }")
	return b.String()
}

// newChecksum is the checksum a server's manifest names algorithm; nil
// for NONE (or none).
func newChecksum(algorithm string) (hash.Hash, error) {
	switch strings.ToUpper(algorithm) {
	case "", "NONE":
		return nil, nil
	case "CRC32C":
		return crc32.New(crc32.MakeTable(crc32.Castagnoli)), nil
	case "SHA224":
		return sha256.New224(), nil
	case "SHA256":
		return sha256.New(), nil
	case "SHA384":
		return sha512.New384(), nil
	case "SHA512":
		return sha512.New(), nil
	}
	return nil, fmt.Errorf("checksum algorithm %q is not one PostgreSQL writes", algorithm)
}

// checksumHex is h's sum as the manifest writes it. The server writes its
// CRC-32C as the bytes of the number in memory: little-endian, on every
// platform PostgreSQL runs on here.
func checksumHex(h hash.Hash) string {
	if c, ok := h.(hash.Hash32); ok {
		return hex.EncodeToString(binary.LittleEndian.AppendUint32(nil, c.Sum32()))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fileChecksum is the checksum of the file at p as the server's manifest
// writes it with algorithm, and its size.
func fileChecksum(p, algorithm string) (string, uint64, error) {
	h, err := newChecksum(algorithm)
	if err != nil {
		return "", 0, err
	}
	if h == nil {
		fi, err := os.Stat(p)
		if err != nil {
			return "", 0, err
		}
		return "", uint64(fi.Size()), nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return checksumHex(h), uint64(n), nil
}

// manifestAlgorithm is the checksum algorithm of the first file of the
// server's manifest at p that has one ("" for none).
func manifestAlgorithm(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxManifestLine)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), `"Checksum-Algorithm": "`); ok {
			alg, _, _ := strings.Cut(rest, `"`)
			return alg
		}
	}
	return ""
}

// rewriteManifest rewrites the newest run's backup manifest at p for the
// composed directory: each incremental file becomes the file rebuilt
// from it (its name, size and checksum), backup_label its rewritten self,
// and the manifest's checksum covers the new lines. rebuilt says where
// each rebuilt file is, by its path in the manifest; sums the checksums
// taken as they were rebuilt with sumAlgorithm (the others are read
// back).
func rewriteManifest(p string, rebuilt map[string]string, sums map[string]fileSum, sumAlgorithm, label string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(b), "\n")
	type job struct {
		i       int
		entry   manifestEntry
		name    string
		encoded bool
		comma   bool
		disk    string
	}
	var jobs []*job
	end := -1
	for i, line := range lines {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, `"Manifest-Checksum"`) {
			end = i
			break
		}
		entry, ok, err := fileLine(t)
		if err != nil {
			return fmt.Errorf("the backup manifest's line %d: %w", i+1, err)
		}
		if !ok {
			continue
		}
		j := &job{i: i, comma: strings.HasSuffix(t, ","), entry: entry}
		name, err := j.entry.name()
		if err != nil {
			return fmt.Errorf("the backup manifest's line %d: %w", i+1, err)
		}
		j.encoded = j.entry.EncodedPath != nil
		dir, base := path.Split(name)
		switch {
		case strings.HasPrefix(base, incrementalPrefix):
			j.name = dir + strings.TrimPrefix(base, incrementalPrefix)
			if j.disk = rebuilt[j.name]; j.disk == "" {
				return fmt.Errorf("the backup manifest names %s, which the restore did not rebuild", name)
			}
		case name == "backup_label" && label != "":
			j.name, j.disk = name, label
		default:
			continue
		}
		jobs = append(jobs, j)
	}
	if end < 0 {
		return errors.New("the backup manifest has no Manifest-Checksum line")
	}
	var g errgroup.Group
	g.SetLimit(4)
	for _, j := range jobs {
		if s, ok := sums[j.name]; ok && j.name != "backup_label" && strings.EqualFold(j.entry.Algorithm, sumAlgorithm) {
			j.entry.Checksum, j.entry.Size = s.sum, &s.size
			continue
		}
		g.Go(func() error {
			sum, size, err := fileChecksum(j.disk, j.entry.Algorithm)
			if err != nil {
				return fmt.Errorf("checksum of %s: %w", j.disk, sdk.ExplainIO(err))
			}
			j.entry.Checksum, j.entry.Size = sum, &size
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, j := range jobs {
		j.entry.Path, j.entry.EncodedPath = nil, nil
		line := j.entry.line(j.name, j.encoded)
		if j.comma {
			line += ","
		}
		lines[j.i] = line + "\n"
	}
	body := strings.Join(lines[:end], "")
	sum := sha256.Sum256([]byte(body))
	return replaceFile(p, fmt.Appendf([]byte(body), "\"Manifest-Checksum\": \"%s\"}\n", hex.EncodeToString(sum[:])))
}
