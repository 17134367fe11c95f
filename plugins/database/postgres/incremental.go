package postgres

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// The chain's facts and backup types, as sdk names them.
const (
	factChainLength = sdk.FactChainLength
	factFullRun     = sdk.FactFullRun
	factFullTime    = sdk.FactFullTime
	typeFull        = sdk.BackupFull
	typeIncremental = sdk.BackupIncremental
)

// incrementalVersion is the first server that takes incremental base
// backups (UPLOAD_MANIFEST, BASE_BACKUP ... INCREMENTAL).
const incrementalVersion = 170000

// listingFormat heads a run's listing (see sdk.Chainer): the files of the
// server's backup manifest, one "<size> <path>" line each, a path that is
// not UTF-8 as "<size> hex:<hex>" (the manifest's Encoded-Path).
const listingFormat = "pipe-pg-files/v1"

// chainConfig is what the source's incremental attributes say.
type chainConfig struct{ sdk.ChainPolicy }

// chainAttributes are the attributes of incremental base backups.
func chainAttributes() []sdk.Attribute {
	return sdk.ChainAttributes("Take incremental base backups (PostgreSQL 17 and later, with summarize_wal = on): the server sends only the blocks changed since the pipeline's newest run in its store, which the run names as its parent. pipe takes a full on its own, and says why, when there is no parent it can build on (none, or one whose chain lacks a run or an object), the parent is of another cluster or timeline, the server cannot (older than 17, summarize_wal off, its WAL summaries no longer reach back to the parent) or the policy (full_every, full_after) asks for one. A restore composes the chain.")
}

// chainPlan is what a run decided to be.
type chainPlan = sdk.ChainPlan

// decide says whether the run can build on parent (offered with why
// when nil) on a server with these settings and system identifier, as
// the policy allows.
func (c chainConfig) decide(parent *sdk.Parent, why string, settings map[string]string, systemID string, timeline int32, now time.Time) chainPlan {
	if !c.Incremental {
		return chainPlan{}
	}
	full := sdk.Full
	if n, _ := strconv.Atoi(settings["server_version_num"]); n < incrementalVersion {
		return full("the server runs PostgreSQL %s, and incremental backups need 17 or later", settings["server_version"])
	}
	if !layoutKnown(settings) {
		return full("the server's block_size is %s and segment_size %s: pipe composes incremental backups of the default layout only (8192 and 1GB)", settings["block_size"], settings["segment_size"])
	}
	if settings["summarize_wal"] != "on" {
		return full("summarize_wal is off: incremental backups need the server's WAL summaries (set summarize_wal = on and reload the server; the next run after that is a full, and those after it incremental)")
	}
	if parent == nil {
		return full("there is no run to build on: %s", why)
	}
	if len(parent.Listing) == 0 {
		return full("the newest run, %s, lists no files to build on (taken without incremental = true, on a server older than 17, or by an older pipe)", parent.RunID)
	}
	f := parent.Facts
	if f[sdk.FactSystemID] != systemID {
		return full("the newest run, %s, is of another cluster (system identifier %s, the server's %s)", parent.RunID, f[sdk.FactSystemID], systemID)
	}
	if f[factTimeline] != f[factStopTLI] {
		return full("the newest run, %s, began on timeline %s and ended on %s", parent.RunID, f[factTimeline], f[factStopTLI])
	}
	if f[factStopTLI] != strconv.Itoa(int(timeline)) {
		return full("the server moved to timeline %d since the newest run, %s, which ended on timeline %s", timeline, parent.RunID, f[factStopTLI])
	}
	if why := c.FullDue(parent, now); why != "" {
		return chainPlan{Why: why}
	}
	return chainPlan{Parent: parent}
}

// layoutKnown reports whether the server's blocks and relation segments
// are those a restore composes (BLCKSZ 8192, RELSEG_SIZE 1 GiB).
func layoutKnown(settings map[string]string) bool {
	return settings["block_size"] == "8192" && settings["segment_size"] == "1GB"
}

// canIncrement reports whether a later run could build on this server's
// backup: it is 17 or later, with the default layout. Only then does the
// run keep its listing.
func canIncrement(settings map[string]string) bool {
	n, _ := strconv.Atoi(settings["server_version_num"])
	return n >= incrementalVersion && layoutKnown(settings)
}

// uploadManifest is the backup manifest UPLOAD_MANIFEST gives the server
// for parent: what the server reads of one (version 2, its system
// identifier, the files' paths and sizes, the WAL range) with the
// manifest's own checksum.
func uploadManifest(parent *sdk.Parent) ([]byte, error) {
	f := parent.Facts
	sc := bufio.NewScanner(bytes.NewReader(parent.Listing))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	if !sc.Scan() || sc.Text() != listingFormat {
		return nil, fmt.Errorf("run %s lists its files in a form this pipe does not know", parent.RunID)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "{ \"PostgreSQL-Backup-Manifest-Version\": 2,\n\"System-Identifier\": %s,\n\"Files\": [", f[sdk.FactSystemID])
	first := true
	for sc.Scan() {
		size, name, ok := strings.Cut(sc.Text(), " ")
		if _, err := strconv.ParseUint(size, 10, 64); !ok || err != nil || name == "" {
			return nil, fmt.Errorf("run %s lists a file as %q", parent.RunID, sc.Text())
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		if h, ok := strings.CutPrefix(name, "hex:"); ok {
			fmt.Fprintf(&b, "\n{ \"Encoded-Path\": %q, \"Size\": %s }", h, size)
			continue
		}
		p, err := json.Marshal(name)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "\n{ \"Path\": %s, \"Size\": %s }", p, size)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("run %s lists its files: %w", parent.RunID, err)
	}
	fmt.Fprintf(&b, " ],\n\"WAL-Ranges\": [\n{ \"Timeline\": %s, \"Start-LSN\": %q, \"End-LSN\": %q }\n],\n", f[factTimeline], f[factStartLSN], f[factStopLSN])
	sum := sha256.Sum256(b.Bytes())
	fmt.Fprintf(&b, "\"Manifest-Checksum\": \"%s\"}\n", hex.EncodeToString(sum[:]))
	return b.Bytes(), nil
}

// lister reads the server's backup manifest as it streams by and keeps
// its files, one listing line each; the manifest writes a file to a line.
type lister struct {
	mu      sync.Mutex
	partial []byte // the start of a line not yet ended
	out     bytes.Buffer
	err     error
}

func newLister() *lister {
	l := &lister{}
	l.out.WriteString(listingFormat + "\n")
	return l
}

func (l *lister) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(l.partial)+len(p) > maxManifestLine {
				l.err = errors.New("the server's backup manifest has a line longer than pipe reads")
				l.partial = nil
				return n, nil
			}
			l.partial = append(l.partial, p...)
			break
		}
		line := p[:i]
		if len(l.partial) > 0 {
			line = append(l.partial, line...)
			l.partial = l.partial[:0]
		}
		l.line(line)
		p = p[i+1:]
	}
	return n, nil
}

// maxManifestLine bounds a line of the server's manifest (a path is at
// most MAXPGPATH, 1024 bytes).
const maxManifestLine = 64 << 10

// line takes one line of the manifest: a file's becomes a line of the
// listing.
func (l *lister) line(line []byte) {
	f, ok, err := fileLine(string(line))
	if err != nil {
		if l.err == nil {
			l.err = fmt.Errorf("a file of the server's backup manifest reads %.120q: %w", bytes.TrimSpace(line), err)
		}
		return
	}
	if !ok {
		return
	}
	var name string
	if f.Path != nil {
		name = *f.Path
		if strings.ContainsAny(name, "\n\r") || strings.HasPrefix(name, "hex:") {
			name = "hex:" + hex.EncodeToString([]byte(name))
		}
	} else {
		name = "hex:" + *f.EncodedPath
	}
	fmt.Fprintf(&l.out, "%d %s\n", *f.Size, name)
}

// listing returns the files read, or nil when the manifest could not be
// read (the next run is then a full, and says so).
func (l *lister) listing() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || len(l.partial) > 0 {
		return nil
	}
	return bytes.Clone(l.out.Bytes())
}

// followed is what Follow was told, kept for Streams.
type followed struct {
	parent *sdk.Parent
	why    string
}

// Follow takes the run the host offers to build on (see sdk.Chainer);
// Streams decides.
func (s *BaseSource) Follow(ctx context.Context, parent *sdk.Parent, why string) error {
	s.follow = followed{parent: parent, why: why}
	return nil
}

// Listing is the run's files for a later run to build on.
func (s *BaseSource) Listing() []byte {
	if s.lister == nil {
		return nil
	}
	return s.lister.listing()
}
