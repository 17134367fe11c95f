package wal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/wal/walname"
)

// checkContent checks that a file's bytes are what its name says it is,
// before they are archived and when they are verified decoded: a segment
// or a .partial segment is a whole segment that starts with a WAL page
// header (its system and timeline are systemID's to check), a history file
// is one PostgreSQL can read, and a backup label's history names the
// position its file name does. Anything else would be archived only to
// fail a recovery later.
func checkContent(f walname.File, data []byte, segSize uint32) error {
	return checkFile(f, int64(len(data)), data, segSize)
}

// checkFile is checkContent of a file of size bytes that starts with
// head: a segment's first page header, or a small file whole.
func checkFile(f walname.File, size int64, head []byte, segSize uint32) error {
	data := head
	switch f.Kind {
	case walname.Segment, walname.Partial:
		if segSize != 0 && size != int64(segSize) {
			return fmt.Errorf("it has %d bytes, not a whole segment of %d", size, segSize)
		}
		h, err := walname.ParseHeader(data)
		if err != nil {
			return fmt.Errorf("not a WAL segment: %w", err)
		}
		if h.Version == 0 {
			return fmt.Errorf("its pages are in the WAL format 0x%04X, which is not of a PostgreSQL version pipe knows (%s): a newer pipe may archive it", h.Magic, walname.KnownVersions)
		}
	case walname.History:
		if _, err := ParseHistory(f.Timeline, data); err != nil {
			return err
		}
	case walname.Backup:
		b, err := ParseBackupLabel(data)
		if err != nil {
			return err
		}
		if want := BackupLabelName(b.StartTLI, b.Start, segSize, f.Name); want != f.Name {
			return fmt.Errorf("its START WAL LOCATION %s is that of %s, not of this file", FormatLSN(b.Start), want)
		}
	}
	return nil
}

// HistoryEntry is a line of a timeline history file: the timeline that
// ended at Switch, where the next one in the history began.
type HistoryEntry struct {
	Timeline uint32
	Switch   uint64
}

// ParseHistory reads the history file of timeline tli as PostgreSQL does
// (readTimeLineHistory): a line per ancestor, "<timeline>\t<switch
// point>\t<reason>", in increasing timelines all before tli; blank lines
// and # comments are skipped. A history file names at least one ancestor.
func ParseHistory(tli uint32, data []byte) ([]HistoryEntry, error) {
	var out []HistoryEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimLeft(sc.Text(), " \t")
		if text == "" || text[0] == '#' {
			continue
		}
		fields := strings.SplitN(text, "\t", 3)
		if len(fields) < 2 {
			return nil, fmt.Errorf("line %d of the history file is not \"<timeline>\\t<switch point>\\t<reason>\": not a timeline history file", line)
		}
		t, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil || t == 0 {
			return nil, fmt.Errorf("line %d of the history file names timeline %q: not a timeline history file", line, fields[0])
		}
		lsn, err := sdk.ParseLSN(fields[1])
		if err != nil {
			return nil, fmt.Errorf("line %d of the history file: %w: not a timeline history file", line, err)
		}
		if len(out) > 0 && uint32(t) <= out[len(out)-1].Timeline {
			return nil, fmt.Errorf("line %d of the history file: timelines must increase (%d after %d)", line, t, out[len(out)-1].Timeline)
		}
		if uint32(t) >= tli {
			return nil, fmt.Errorf("line %d of the history file names timeline %d, not before the file's own %d", line, t, tli)
		}
		out = append(out, HistoryEntry{Timeline: uint32(t), Switch: lsn})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the history file: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("the history file names no timeline: not a timeline history file")
	}
	return out, nil
}

// BackupLabel is what a backup history file (<segment>.<offset>.backup,
// which pg_backup_stop archives) says of its base backup: the WAL from
// Start to Stop makes it consistent.
type BackupLabel struct {
	Start, Stop       uint64
	StartTLI, StopTLI uint32
}

// ParseBackupLabel reads a backup history file: its START and STOP WAL
// LOCATION lines, and the timelines when it names them.
func ParseBackupLabel(data []byte) (BackupLabel, error) {
	var b BackupLabel
	var haveStart, haveStop bool
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		var err error
		switch key {
		case "START WAL LOCATION":
			b.Start, b.StartTLI, err = labelLocation(value)
			haveStart = err == nil
		case "STOP WAL LOCATION":
			b.Stop, b.StopTLI, err = labelLocation(value)
			haveStop = err == nil
		case "START TIMELINE", "STOP TIMELINE":
			var t uint64
			if t, err = strconv.ParseUint(strings.TrimSpace(value), 10, 32); err == nil && t == 0 {
				err = errors.New("timeline 0")
			}
			if key == "START TIMELINE" {
				b.StartTLI = uint32(t)
			} else {
				b.StopTLI = uint32(t)
			}
		}
		if err != nil {
			return b, fmt.Errorf("its %s line %q is not valid: not a backup history file", key, value)
		}
	}
	switch {
	case !haveStart || !haveStop:
		return b, errors.New("it has no START WAL LOCATION and STOP WAL LOCATION: not a backup history file")
	case b.Stop < b.Start:
		return b, fmt.Errorf("its STOP WAL LOCATION %s is before its START WAL LOCATION %s", FormatLSN(b.Stop), FormatLSN(b.Start))
	}
	return b, nil
}

// labelLocation reads "0/2000028 (file 000000010000000000000002)": the
// position, and the timeline of the file it names.
func labelLocation(v string) (uint64, uint32, error) {
	lsn, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
	at, err := sdk.ParseLSN(lsn)
	if err != nil {
		return 0, 0, err
	}
	file, ok := strings.CutPrefix(rest, "(file ")
	file, ok2 := strings.CutSuffix(file, ")")
	f, err := walname.ParseName(file)
	if !ok || !ok2 || err != nil || f.Kind != walname.Segment {
		return 0, 0, fmt.Errorf("%q names no segment", v)
	}
	return at, f.Timeline, nil
}

// BackupLabelName is the name of the backup history file of a backup that
// started at start on timeline tli: <segment>.<offset in it>.backup. With
// segSize 0 (not known), the segment is taken from like, a name of the
// same form, and only the offset's segment-independent check is made.
func BackupLabelName(tli uint32, start uint64, segSize uint32, like string) string {
	if segSize == 0 {
		// Any segment size: the offset is start modulo it, and the
		// segment's name follows from both; take them from like when
		// they agree with start.
		for size := uint32(1 << 20); size != 0 && size <= 1<<30; size <<= 1 {
			if n := BackupLabelName(tli, start, size, ""); n == like {
				return n
			}
		}
		return BackupLabelName(tli, start, 16<<20, "")
	}
	seg := start / uint64(segSize)
	return fmt.Sprintf("%s.%08X.backup", walname.SegmentName(tli, seg, segSize), start%uint64(segSize))
}

// FormatLSN writes a WAL position as PostgreSQL prints it.
func FormatLSN(lsn uint64) string { return fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)) }

// contentCheck receives a decoded file and checks it as checkContent
// does, without holding a segment: a segment's or partial segment's
// first page and size; the whole of a history file or backup label, which
// are small.
type contentCheck struct {
	f       walname.File
	sysid   uint64
	segSize uint32
	n       int64
	head    []byte
}

// maxSmallFile bounds a history file or backup label.
const maxSmallFile = 1 << 20

func (c *contentCheck) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	keep := 64
	if !hasHeader(c.f) {
		keep = maxSmallFile
	}
	if len(c.head) < keep {
		c.head = append(c.head, p[:min(len(p), keep-len(c.head))]...)
	}
	if !hasHeader(c.f) && c.n > maxSmallFile {
		return 0, fmt.Errorf("%s is larger than %d bytes: not a %s", c.f.Name, maxSmallFile, map[walname.Kind]string{walname.History: "timeline history file", walname.Backup: "backup history file"}[c.f.Kind])
	}
	return len(p), nil
}

// check checks what was written, and returns a backup label's contents.
func (c *contentCheck) check() (*BackupLabel, error) {
	switch c.f.Kind {
	case walname.Segment, walname.Partial:
		if c.segSize != 0 && c.n != int64(c.segSize) {
			return nil, fmt.Errorf("decodes to %d bytes, not a whole segment of %d", c.n, c.segSize)
		}
		h, err := walname.ParseHeader(c.head)
		if err != nil {
			return nil, fmt.Errorf("decodes to something that is not a WAL segment: %w", err)
		}
		if h.SystemID != c.sysid {
			return nil, fmt.Errorf("decodes to a segment of the cluster with system identifier %d, in the folder of %d", h.SystemID, c.sysid)
		}
		return nil, nil
	case walname.Backup:
		b, err := ParseBackupLabel(c.head)
		if err == nil {
			err = checkContent(c.f, c.head, c.segSize)
		}
		if err != nil {
			return nil, fmt.Errorf("decodes to a file that is not its backup label: %w", err)
		}
		return &b, nil
	}
	if err := checkContent(c.f, c.head, c.segSize); err != nil {
		return nil, fmt.Errorf("decodes to a file that is not its history file: %w", err)
	}
	return nil, nil
}
