// Package binlogfile reads what pipe needs of MariaDB's binlog files:
// the events' headers (the server id, each event's time, a transaction's
// GTID) and the files' names. The binlog archive and the mariadb_backup
// sink's replay share it; it imports nothing of pipe.
package binlogfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// magic starts every binlog file.
var magic = []byte{0xfe, 'b', 'i', 'n'}

// headerSize is an event's common header: timestamp (4), type (1),
// server id (4), event size (4), next position (4), flags (2).
const headerSize = 19

// inUseOffset is the byte of the first event's flags that holds
// LOG_EVENT_BINLOG_IN_USE_F (0x1): set while the server writes the file,
// cleared when it closes it (the event's checksum leaves it out).
const inUseOffset = 4 + 17

// ClearInUse clears the in-use flag of the binlog file f, as the server
// does when it closes the file.
func ClearInUse(f *os.File) error {
	var b [1]byte
	if _, err := f.ReadAt(b[:], inUseOffset); err != nil {
		return err
	}
	if b[0]&1 == 0 {
		return nil
	}
	b[0] &^= 1
	_, err := f.WriteAt(b[:], inUseOffset)
	return err
}

// GTIDEvent is MariaDB's GTID_EVENT, which starts each transaction.
const GTIDEvent = 162

// Event is what pipe reads of an event: its header, and for a GTID
// event the transaction's GTID.
type Event struct {
	Pos       int64
	Timestamp uint32
	Type      byte
	ServerID  uint32
	Size      uint32
	// Domain and Seq are a GTID event's (0, 0 for others).
	Domain uint32
	Seq    uint64
}

// ServerID reads the id of the server that wrote the binlog file at
// path from its first event.
func ServerID(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var head [4 + headerSize]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return 0, fmt.Errorf("%s: too short for a binlog file: %w", path, err)
	}
	if string(head[:4]) != string(magic) {
		return 0, fmt.Errorf("%s is not a binlog file (no magic number)", path)
	}
	return binary.LittleEndian.Uint32(head[4+5:]), nil
}

// Scan calls fn for each whole event of the binlog file r holds, from
// pos on (4, the first event, when pos is 0); it stops early when fn
// returns false, and at the first event cut short (the end of what was
// archived).
func Scan(r io.ReaderAt, pos int64, fn func(Event) bool) error {
	if pos < 4 {
		var m [4]byte
		if _, err := r.ReadAt(m[:], 0); err != nil || string(m[:]) != string(magic) {
			return errors.New("not a binlog file (no magic number)")
		}
		pos = 4
	}
	var h [headerSize + 12]byte
	for {
		n, err := r.ReadAt(h[:], pos)
		if n < headerSize {
			if err == io.EOF || err == nil {
				return nil
			}
			return err
		}
		e := Event{Pos: pos, Timestamp: binary.LittleEndian.Uint32(h[0:]), Type: h[4],
			ServerID: binary.LittleEndian.Uint32(h[5:]), Size: binary.LittleEndian.Uint32(h[9:])}
		if e.Size < headerSize {
			return fmt.Errorf("the event at %d says it holds %d bytes, less than its header", pos, e.Size)
		}
		if e.Type == GTIDEvent && n >= headerSize+12 {
			e.Seq = binary.LittleEndian.Uint64(h[headerSize:])
			e.Domain = binary.LittleEndian.Uint32(h[headerSize+8:])
		}
		// Whole only if its last byte is there.
		var last [1]byte
		if _, err := r.ReadAt(last[:], pos+int64(e.Size)-1); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if !fn(e) {
			return nil
		}
		pos += int64(e.Size)
	}
}

// CompareNames orders binlog file names by their number, then name.
func CompareNames(x, y string) int {
	bx, nx := splitName(x)
	by, ny := splitName(y)
	if bx != by {
		return strings.Compare(bx, by)
	}
	return nx - ny
}

// splitName is a binlog file's base name and number (mysql-bin, 7).
func splitName(name string) (string, int) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return name, -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return name, -1
	}
	return name[:i], n
}

// NextName is the file the server writes after name.
func NextName(name string) (string, error) {
	base, n := splitName(name)
	if n < 0 {
		return "", fmt.Errorf("%q is not a binlog file's name (BASE.NNNNNN)", name)
	}
	digits := len(name) - len(base) - 1
	return fmt.Sprintf("%s.%0*d", base, digits, n+1), nil
}
