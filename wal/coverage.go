package wal

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/wal/walname"
)

// The facts a base backup's run records (the postgres_basebackup
// source's, in its manifest's "source"): what WAL it needs.
const (
	factSystemID = sdk.FactSystemID
	factTimeline = sdk.FactTimeline
	factStartLSN = sdk.FactStartLSN
	factStopLSN  = sdk.FactStopLSN
	factStopTLI  = sdk.FactStopTimeline
	factSegSize  = sdk.FactWALSegmentSize
)

// Range is the WAL a base backup needs to be consistent: every segment
// from the one holding Start to the one holding the byte before Stop.
type Range struct {
	SystemID          uint64
	StartTLI, StopTLI uint32
	Start, Stop       uint64 // LSNs; Stop is 0 until the backup ended
	SegmentSize       uint32
}

// BackupRange reads a base backup's range from its run's source facts;
// ok is false when the run is not a base backup.
func BackupRange(facts map[string]string) (r Range, ok bool, err error) {
	if facts[factStartLSN] == "" {
		return r, false, nil
	}
	bad := func(k string) (Range, bool, error) {
		return r, true, fmt.Errorf("the manifest's %s %q is not valid", k, facts[k])
	}
	if r.SystemID, err = strconv.ParseUint(facts[factSystemID], 10, 64); err != nil || r.SystemID == 0 {
		return bad(factSystemID)
	}
	tli, err := strconv.ParseUint(facts[factTimeline], 10, 32)
	if err != nil || tli == 0 {
		return bad(factTimeline)
	}
	r.StartTLI, r.StopTLI = uint32(tli), uint32(tli)
	if s := facts[factStopTLI]; s != "" {
		if tli, err = strconv.ParseUint(s, 10, 32); err != nil || tli == 0 {
			return bad(factStopTLI)
		}
		r.StopTLI = uint32(tli)
	}
	seg, err := strconv.ParseUint(facts[factSegSize], 10, 32)
	if err != nil || !walname.ValidSegmentSize(uint32(seg)) {
		return bad(factSegSize)
	}
	r.SegmentSize = uint32(seg)
	if r.Start, err = sdk.ParseLSN(facts[factStartLSN]); err != nil || r.Start == 0 {
		return bad(factStartLSN)
	}
	if s := facts[factStopLSN]; s != "" {
		if r.Stop, err = sdk.ParseLSN(s); err != nil || r.Stop < r.Start {
			return bad(factStopLSN)
		}
	}
	return r, true, nil
}

// Complete reports whether the range has its end (the run finished).
func (r Range) Complete() bool { return r.Stop != 0 }

// Segments are the numbers of the first and last segment the range needs.
func (r Range) Segments() (first, last uint64) {
	first = r.Start / uint64(r.SegmentSize)
	last = first
	if r.Stop > r.Start {
		last = (r.Stop - 1) / uint64(r.SegmentSize)
	}
	return first, last
}

// Names are the names of the first and last segment the range needs.
func (r Range) Names() (first, last string) {
	f, l := r.Segments()
	return walname.SegmentName(r.StartTLI, f, r.SegmentSize), walname.SegmentName(r.StopTLI, l, r.SegmentSize)
}

// Missing names the segments of r the archive lacks (the first max of
// them) and counts them all. A segment counts on any timeline from the
// backup's start to its end (a standby's backup may cross a switch).
func (l *Listing) Missing(r Range, max int) (names []string, n uint64) {
	have := map[uint64]bool{}
	for _, e := range l.Entries {
		if e.Kind != walname.Segment || e.SystemID != r.SystemID || e.Timeline < r.StartTLI || e.Timeline > r.StopTLI || e.Untrusted != "" {
			continue
		}
		if k, err := walname.SegmentNumber(e.Name, r.SegmentSize); err == nil {
			have[k] = true
		}
	}
	first, last := r.Segments()
	for k := first; k <= last; k++ {
		if have[k] {
			continue
		}
		n++
		if len(names) < max {
			names = append(names, walname.SegmentName(r.StopTLI, k, r.SegmentSize))
		}
	}
	return names, n
}

// Before lists the archived segments, .partial and .backup files of a
// cluster that come before segment first (on any timeline): the WAL no
// base backup from first on needs, untrusted objects and second objects
// of a file included. History
// files are never listed: they are small and every later timeline needs
// them.
func (l *Listing) Before(sysid uint64, first uint64, segSize uint32) []Entry {
	var out []Entry
	for _, e := range l.Entries {
		if e.SystemID != sysid || e.Kind == walname.History {
			continue
		}
		n, err := walname.SegmentNumber(e.Name[:24], segSize)
		if err == nil && n < first {
			out = append(out, e)
		}
	}
	return out
}

// ClaimsBefore lists the claims (see ClaimExt) of the names Before lists:
// they go after the objects, once no object of their name is left.
func (l *Listing) ClaimsBefore(sysid uint64, first uint64, segSize uint32) []Claim {
	var out []Claim
	for _, c := range l.Claims {
		if c.SystemID != sysid || c.Kind == walname.History {
			continue
		}
		n, err := walname.SegmentNumber(c.Name[:24], segSize)
		if err == nil && n < first {
			out = append(out, c)
		}
	}
	return out
}

// TimelineGap is a run of segments missing from one timeline.
type TimelineGap struct {
	Timeline uint32 `json:"timeline"`
	Gap
}

// GapsAfter lists the runs of segments missing after a base backup's
// range: on its stop timeline, from the segment after its last one to
// the newest archived, and on every later timeline of its cluster, between
// the segments archived. Recovery to the end of the archive would stop at
// the first of them as if the archive ended there.
func (l *Listing) GapsAfter(r Range) []TimelineGap {
	_, last := r.Segments()
	segs := map[uint32][]uint64{}
	for _, e := range l.Entries {
		if e.Kind != walname.Segment || e.SystemID != r.SystemID || e.Timeline < r.StopTLI || e.Untrusted != "" || e.Again {
			continue
		}
		if n, err := walname.SegmentNumber(e.Name, r.SegmentSize); err == nil {
			segs[e.Timeline] = append(segs[e.Timeline], n)
		}
	}
	tlis := make([]uint32, 0, len(segs))
	for t := range segs {
		tlis = append(tlis, t)
	}
	slices.Sort(tlis)
	var out []TimelineGap
	for _, t := range tlis {
		ns := segs[t]
		slices.Sort(ns)
		prev, have := uint64(0), false
		if t == r.StopTLI {
			prev, have = last, true
		}
		for _, n := range ns {
			if t == r.StopTLI && n <= last {
				continue
			}
			if have && n > prev+1 {
				out = append(out, TimelineGap{Timeline: t, Gap: Gap{From: walname.SegmentName(t, prev+1, r.SegmentSize), To: walname.SegmentName(t, n-1, r.SegmentSize), Count: n - prev - 1}})
			}
			prev, have = n, true
		}
	}
	return out
}
