package postgres

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// parentRun is a full run of cluster 7 on timeline 1 that ended at end.
func parentRun(end time.Time, more map[string]string) *sdk.Parent {
	facts := map[string]string{sdk.FactSystemID: "7", factTimeline: "1", factStopTLI: "1", factStartLSN: "0/2000028", factStopLSN: "0/2000100",
		factStopTime: end.Format(time.RFC3339Nano), sdk.FactBackupType: typeFull}
	for k, v := range more {
		facts[k] = v
	}
	return &sdk.Parent{RunID: "20261129T010000Z-aaaaaa", Finished: end, Facts: facts, Listing: []byte(listingFormat + "\n8192 base/5/16384\n")}
}

// TestChainDecides: each reason to take a full instead of an incremental
// is named, and a parent that passes every check is built on.
func TestChainDecides(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	v17 := map[string]string{"server_version_num": "170004", "server_version": "17.4", "summarize_wal": "on", "block_size": "8192", "segment_size": "1GB"}
	c := chainConfig{sdk.ChainPolicy{Incremental: true, FullEvery: 3, FullAfter: "2d"}}
	for _, tc := range []struct {
		name     string
		c        chainConfig
		parent   *sdk.Parent
		settings map[string]string
		tli      int32
		why      string // "" builds on the parent
	}{
		{"builds on the parent", c, parentRun(now.Add(-time.Hour), nil), v17, 1, ""},
		{"not asked", chainConfig{sdk.ChainPolicy{FullEvery: 3}}, parentRun(now, nil), v17, 1, "-"},
		{"16", c, parentRun(now, nil), map[string]string{"server_version_num": "160004", "server_version": "16.4"}, 1, "need 17 or later"},
		{"summaries off", c, parentRun(now, nil), map[string]string{"server_version_num": "170004", "summarize_wal": "off", "block_size": "8192", "segment_size": "1GB"}, 1, "summarize_wal is off"},
		{"16 KiB blocks", c, parentRun(now, nil), map[string]string{"server_version_num": "170004", "summarize_wal": "on", "block_size": "16384", "segment_size": "1GB"}, 1, "block_size is 16384"},
		{"no parent", c, nil, v17, 1, "there is no run to build on: sink s3: it holds no earlier run"},
		{"no listing", c, func() *sdk.Parent { p := parentRun(now, nil); p.Listing = nil; return p }(), v17, 1, "lists no files to build on"},
		{"another cluster", c, parentRun(now, map[string]string{sdk.FactSystemID: "8"}), v17, 1, "of another cluster"},
		{"a new timeline", c, parentRun(now, nil), v17, 2, "moved to timeline 2"},
		{"switched in the parent", c, parentRun(now, map[string]string{factStopTLI: "2"}), v17, 2, "began on timeline 1 and ended on 2"},
		{"full_every", c, parentRun(now, map[string]string{sdk.FactBackupType: typeIncremental, factChainLength: "2", factFullTime: now.Format(time.RFC3339Nano)}), v17, 1, "full_every = 3"},
		{"full_after", c, parentRun(now, map[string]string{sdk.FactBackupType: typeIncremental, factChainLength: "1", factFullTime: now.Add(-49 * time.Hour).Format(time.RFC3339Nano)}), v17, 1, `full_after = "2d"`},
		{"a young chain", c, parentRun(now, map[string]string{sdk.FactBackupType: typeIncremental, factChainLength: "1", factFullTime: now.Add(-47 * time.Hour).Format(time.RFC3339Nano)}), v17, 1, ""},
	} {
		why := ""
		if tc.parent == nil {
			why = "sink s3: it holds no earlier run"
		}
		p := tc.c.decide(tc.parent, why, tc.settings, "7", tc.tli, now)
		switch {
		case tc.why == "" && (p.Parent == nil || p.Why != ""):
			t.Errorf("%s: a full (%q), want an incremental", tc.name, p.Why)
		case tc.why == "-" && (p.Parent != nil || p.Why != ""):
			t.Errorf("%s: %+v, want a full without a reason", tc.name, p)
		case tc.why != "" && tc.why != "-" && (p.Parent != nil || !strings.Contains(p.Why, tc.why)):
			t.Errorf("%s: parent %v, why %q; want a full because %q", tc.name, p.Parent != nil, p.Why, tc.why)
		}
	}
}

// TestChainFacts: an incremental counts its chain and carries its full's
// run and time from a full parent and from an incremental one.
func TestChainFacts(t *testing.T) {
	end := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	f := chainPlan{Parent: parentRun(end, nil)}.Facts(true)
	if f[sdk.FactParent] != "20261129T010000Z-aaaaaa" || f[factChainLength] != "1" || f[factFullRun] != "20261129T010000Z-aaaaaa" || f[factFullTime] != end.Format(time.RFC3339Nano) {
		t.Errorf("on a full: %v", f)
	}
	g := chainPlan{Parent: parentRun(end, map[string]string{sdk.FactBackupType: typeIncremental, factChainLength: "4", factFullRun: "R0", factFullTime: "T0"})}.Facts(true)
	if g[factChainLength] != "5" || g[factFullRun] != "R0" || g[factFullTime] != "T0" || g[sdk.FactBackupType] != typeIncremental {
		t.Errorf("on an incremental: %v", g)
	}
	if h := (chainPlan{Why: "because"}).Facts(true); h[sdk.FactBackupType] != typeFull || h[sdk.FactFullReason] != "because" {
		t.Errorf("a full: %v", h)
	}
}

// TestListingRoundTrip: the files of a server's manifest, read as it
// streams by in pieces of any size, become the manifest UPLOAD_MANIFEST
// sends: the same paths (one not UTF-8, one with a quote) and sizes, the
// WAL range, and a checksum over all but its last line.
func TestListingRoundTrip(t *testing.T) {
	server := "{ \"PostgreSQL-Backup-Manifest-Version\": 2,\n\"System-Identifier\": 7,\n\"Files\": [\n" +
		"{ \"Path\": \"backup_label\", \"Size\": 227, \"Last-Modified\": \"2026-11-29 10:00:00 GMT\", \"Checksum-Algorithm\": \"CRC32C\", \"Checksum\": \"0a0b0c0d\" },\n" +
		"{ \"Path\": \"base/5/INCREMENTAL.16384\", \"Size\": 8204, \"Last-Modified\": \"2026-11-29 10:00:00 GMT\" },\n" +
		"{ \"Encoded-Path\": \"6261642fff\", \"Size\": 3, \"Last-Modified\": \"2026-11-29 10:00:00 GMT\" },\n" +
		"{ \"Path\": \"we\\\"ird\", \"Size\": 0, \"Last-Modified\": \"2026-11-29 10:00:00 GMT\" }\n],\n" +
		"\"WAL-Ranges\": [\n{ \"Timeline\": 1, \"Start-LSN\": \"0/2000028\", \"End-LSN\": \"0/2000100\" }\n],\n\"Manifest-Checksum\": \"00\"}\n"
	for _, piece := range []int{1, 7, 4096} {
		l := newLister()
		for b := []byte(server); len(b) > 0; b = b[min(piece, len(b)):] {
			l.Write(b[:min(piece, len(b))])
		}
		listing := l.listing()
		want := listingFormat + "\n227 backup_label\n8204 base/5/INCREMENTAL.16384\n3 hex:6261642fff\n0 we\"ird\n"
		if string(listing) != want {
			t.Fatalf("pieces of %d: listing\n%s\nwant\n%s", piece, listing, want)
		}
		up, err := uploadManifest(&sdk.Parent{RunID: "r", Listing: listing, Facts: map[string]string{sdk.FactSystemID: "7", factTimeline: "1", factStartLSN: "0/2000028", factStopLSN: "0/2000100"}})
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Version  int    `json:"PostgreSQL-Backup-Manifest-Version"`
			System   uint64 `json:"System-Identifier"`
			Files    []manifestEntry
			Ranges   []map[string]any `json:"WAL-Ranges"`
			Checksum string           `json:"Manifest-Checksum"`
		}
		if err := json.Unmarshal(up, &m); err != nil {
			t.Fatalf("%v\n%s", err, up)
		}
		i := bytes.LastIndex(up[:len(up)-1], []byte("\n"))
		sum := sha256.Sum256(up[:i+1])
		if m.Version != 2 || m.System != 7 || len(m.Files) != 4 || len(m.Ranges) != 1 || m.Checksum != hex.EncodeToString(sum[:]) {
			t.Fatalf("uploaded manifest %+v\n%s", m, up)
		}
		if n, _ := m.Files[2].name(); n != "bad/\xff" || *m.Files[3].Path != `we"ird` || *m.Files[1].Size != 8204 {
			t.Errorf("files %q, %q, %d", n, *m.Files[3].Path, *m.Files[1].Size)
		}
	}
	l := newLister()
	l.Write([]byte("{ \"Path\": \"x\" },\n"))
	if l.listing() != nil {
		t.Error("a file without a size gave a listing")
	}
}

// TestServerWords: the server's refusal of an incremental, as pglogrepl
// reports it, becomes the server's own words.
func TestServerWords(t *testing.T) {
	err := errors.New(`error response sev="ERROR" code="55000" message="manifest requires WAL from final timeline 1 ending at FF/0, but this backup starts at 0/7000028" detail="" position=0`)
	if got := serverWords(err); got != "manifest requires WAL from final timeline 1 ending at FF/0, but this backup starts at 0/7000028" {
		t.Errorf("got %q", got)
	}
	if got := serverWords(errors.New("connection reset")); got != "connection reset" {
		t.Errorf("got %q", got)
	}
}
