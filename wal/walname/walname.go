// Package walname reads the names of the files PostgreSQL archives
// (segments, timeline histories, backup labels, partial segments) and of
// the objects pipe archives them as, the header of a segment, and a
// cluster's system identifier in pg_control. It links no store, no codec
// and no hash: pipe-wal, which PostgreSQL starts once per segment, uses it.
package walname

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Kind is what a file PostgreSQL archives holds.
type Kind int

const (
	// Segment is a WAL segment: 24 hex digits (timeline, log, segment).
	Segment Kind = iota
	// History is a timeline's history file: 00000002.history.
	History
	// Backup is a backup label's history: <segment>.<offset>.backup.
	Backup
	// Partial is the last, incomplete segment of a timeline a standby
	// left when it was promoted: <segment>.partial.
	Partial
)

var (
	segmentRE = regexp.MustCompile(`^[0-9A-F]{24}$`)
	historyRE = regexp.MustCompile(`^[0-9A-F]{8}\.history$`)
	backupRE  = regexp.MustCompile(`^[0-9A-F]{24}\.[0-9A-F]{8}\.backup$`)
	partialRE = regexp.MustCompile(`^[0-9A-F]{24}\.partial$`)
)

// File is a name PostgreSQL archives, parsed.
type File struct {
	Name     string
	Kind     Kind
	Timeline uint32
}

// ParseName parses a file name PostgreSQL gives archive_command (%f) or
// restore_command; anything else is refused, so no name can leave the
// archive's layout.
func ParseName(name string) (File, error) {
	f := File{Name: name}
	switch {
	case segmentRE.MatchString(name):
		f.Kind = Segment
	case historyRE.MatchString(name):
		f.Kind = History
	case backupRE.MatchString(name):
		f.Kind = Backup
	case partialRE.MatchString(name):
		f.Kind = Partial
	default:
		return f, fmt.Errorf("%q is not a file PostgreSQL archives (a WAL segment such as 000000010000000000000003, a 00000002.history, a .backup or a .partial file)", name)
	}
	tli, err := strconv.ParseUint(name[:8], 16, 32)
	if err != nil || tli == 0 {
		return f, fmt.Errorf("%q names timeline 0, which does not exist", name)
	}
	f.Timeline = uint32(tli)
	return f, nil
}

// Dir is the folder of a file's objects: system id and timeline.
func Dir(sysid uint64, timeline uint32) string {
	return fmt.Sprintf("%d/%08X/", sysid, timeline)
}

// ObjectName is the base name of the object that holds a file: its name,
// the SHA-256 of the file and of the stored bytes, and the stages'
// extension. A signed object's name has its signature after the stored
// bytes' digest (see signedName).
func ObjectName(name, fileSum, storedSum, ext string) string {
	return name + "-" + fileSum + "-" + storedSum + ext
}

// SigLen is the length of the signature in a signed object's name: an
// ed25519 signature (64 bytes) in unpadded base64url.
const SigLen = 86

// Object is an archived object's base name, parsed.
type Object struct {
	File
	FileSum, StoredSum, Ext string
	// Sig is the signature in the name, encoded; "" for an unsigned
	// object.
	Sig string
	// Size is the stored bytes' size, when a listing said it (0: not
	// known).
	Size int64
}

// ParseObject parses an archived object's base name.
func ParseObject(base string) (Object, error) {
	bad := fmt.Errorf("%q is not an archived WAL object's name", base)
	// <name>-<file digest>-<stored digest>[<signature>]<ext>: the name and
	// the digests hold no "-" (a signature may).
	name, rest, _ := strings.Cut(base, "-")
	fileSum, rest, _ := strings.Cut(rest, "-")
	if len(rest) < 64 || (len(fileSum) != 32 && len(fileSum) != 64) || !lowerHex(fileSum) || !lowerHex(rest[:64]) {
		return Object{}, bad
	}
	o := Object{FileSum: fileSum, StoredSum: rest[:64], Ext: rest[64:]}
	if o.Ext != "" && o.Ext[0] != '.' {
		if len(o.Ext) < SigLen || strings.IndexFunc(o.Ext[:SigLen], notBase64URL) >= 0 {
			return Object{}, bad
		}
		o.Sig, o.Ext = o.Ext[:SigLen], o.Ext[SigLen:]
	}
	for _, e := range strings.Split(o.Ext, ".")[1:] {
		if e == "" || strings.IndexFunc(e, func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }) >= 0 {
			return Object{}, bad
		}
	}
	if len(o.Ext) > 0 && o.Ext[0] != '.' {
		return Object{}, bad
	}
	f, err := ParseName(name)
	if err != nil {
		return Object{}, bad
	}
	o.File = f
	return o, nil
}

// lowerHex reports whether s is lower-case hex digits.
func lowerHex(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && (r < 'a' || r > 'f') }) < 0
}

// notBase64URL reports whether r is not a letter, digit, - or _.
func notBase64URL(r rune) bool {
	return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '_'
}

// Unsigned is the object's base name without its signature.
func (o Object) Unsigned() string { return ObjectName(o.Name, o.FileSum, o.StoredSum, o.Ext) }

// SegmentNumber is a segment's position in its timeline, for a segment
// size: the log (8 hex digits) and segment (8) parts of its name.
func SegmentNumber(name string, segSize uint32) (uint64, error) {
	if !segmentRE.MatchString(name[:min(len(name), 24)]) || len(name) < 24 {
		return 0, fmt.Errorf("%q is not a segment", name)
	}
	log, _ := strconv.ParseUint(name[8:16], 16, 32)
	seg, _ := strconv.ParseUint(name[16:24], 16, 32)
	return log*segmentsPerLog(segSize) + seg, nil
}

// SegmentName is the name of segment number n of a timeline.
func SegmentName(timeline uint32, n uint64, segSize uint32) string {
	per := segmentsPerLog(segSize)
	return fmt.Sprintf("%08X%08X%08X", timeline, n/per, n%per)
}

func segmentsPerLog(segSize uint32) uint64 { return 0x100000000 / uint64(segSize) }

// ValidSegmentSize reports whether n is a WAL segment size PostgreSQL
// allows: a power of two from 1 MiB to 1 GiB.
func ValidSegmentSize(n uint32) bool {
	return n >= 1<<20 && n <= 1<<30 && n&(n-1) == 0
}

// Header is what a segment's first page says of it.
type Header struct {
	Timeline    uint32
	SystemID    uint64
	SegmentSize uint32
	// Magic is the page's XLOG_PAGE_MAGIC, the WAL format's version;
	// Version the PostgreSQL major version that writes it, 0 for a format
	// pipe does not know.
	Magic   uint16
	Version int
}

// pageMagic is XLOG_PAGE_MAGIC, the first two bytes of every WAL page, of
// each PostgreSQL major version pipe knows: it changes whenever the WAL's
// format does. The long header that follows (timeline, system identifier,
// segment size) is the same in all of them.
var pageMagic = map[uint16]int{0xD106: 13, 0xD10D: 14, 0xD110: 15, 0xD113: 16, 0xD116: 17, 0xD118: 18}

// KnownVersions names the PostgreSQL versions whose WAL pipe archives.
const KnownVersions = "PostgreSQL 13 to 18"

// xlpLongHeader is XLP_LONG_HEADER in xlp_info: the first page of a
// segment has the long header, with the system id and segment size.
const xlpLongHeader = 0x0002

// ParseHeader reads a segment's first page header (XLogLongPageHeaderData).
func ParseHeader(b []byte) (Header, error) {
	if len(b) < 40 {
		return Header{}, errors.New("shorter than a WAL page header")
	}
	info := binary.LittleEndian.Uint16(b[2:4])
	if info&xlpLongHeader == 0 {
		return Header{}, errors.New("its first page has no long header: not the start of a WAL segment")
	}
	h := Header{Timeline: binary.LittleEndian.Uint32(b[4:8]), SystemID: binary.LittleEndian.Uint64(b[24:32]), SegmentSize: binary.LittleEndian.Uint32(b[32:36]),
		Magic: binary.LittleEndian.Uint16(b[0:2])}
	h.Version = pageMagic[h.Magic]
	if !ValidSegmentSize(h.SegmentSize) {
		return Header{}, fmt.Errorf("its header says a segment size of %d bytes, which PostgreSQL does not make", h.SegmentSize)
	}
	return h, nil
}

// ControlSystemID reads the system identifier from pg_control's contents
// (global/pg_control of a data directory): its first field.
func ControlSystemID(b []byte) (uint64, error) {
	if len(b) < 8 {
		return 0, errors.New("pg_control is shorter than its first field")
	}
	id := binary.LittleEndian.Uint64(b[:8])
	if id == 0 {
		return 0, errors.New("pg_control holds system identifier 0")
	}
	return id, nil
}

// ParseSystemID reads a system identifier as written in a file (digits).
func ParseSystemID(s string) (uint64, error) {
	id, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("%q is not a system identifier (the digits pg_controldata prints as \"Database system identifier\")", s)
	}
	return id, nil
}

// PreviousSegment is the name of the segment before name on its
// timeline, for a segment size.
func PreviousSegment(name string, segSize uint32) (string, error) {
	n, err := SegmentNumber(name, segSize)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", fmt.Errorf("%s is its timeline's first segment", name)
	}
	f, err := ParseName(name)
	if err != nil {
		return "", err
	}
	return SegmentName(f.Timeline, n-1, segSize), nil
}

// DataDirSystemID reads the system identifier from a data directory's
// global/pg_control.
func DataDirSystemID(dataDir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "global", "pg_control"))
	if err != nil {
		return 0, err
	}
	return ControlSystemID(b)
}
