package sdk

import (
	"fmt"
	"strconv"
	"time"
)

// More facts of a chain (see Chainer): how many incrementals it holds up
// to the run, and its full run's id and end (ChainPlan.Facts writes
// them).
const (
	FactChainLength = "chain_length"
	FactFullRun     = "full_run"
	FactFullTime    = "full_time"
)

// The values of FactBackupType.
const (
	BackupFull        = "full"
	BackupIncremental = "incremental"
)

// ChainPolicy is what a Chainer's incremental attributes say (see
// ChainAttributes): whether to build on the newest run, and how often to
// start a chain afresh. Embed it in a source's config.
type ChainPolicy struct {
	Incremental bool   `pipe:"incremental"`
	FullEvery   int64  `pipe:"full_every"`
	FullAfter   string `pipe:"full_after"`
}

// ChainAttributes are ChainPolicy's attributes; incremental describes
// the first (what an incremental run reads, and when the source takes a
// full instead).
func ChainAttributes(incremental string) []Attribute {
	return []Attribute{
		{Name: "incremental", Type: Bool, Default: false, Description: incremental},
		{Name: "full_every", Type: Number, Default: int64(7), Description: "With incremental: a full at least every this many runs (7: a full, then six incrementals). 1 takes only fulls."},
		{Name: "full_after", Type: String, Description: `With incremental: a full when the chain's full is older than this ("7d", "36h"); default: no limit but full_every.`},
	}
}

// Check refuses settings that cannot work.
func (c ChainPolicy) Check() Diagnostics {
	if c.FullEvery < 1 {
		return AttrError("full_every", "invalid full_every", fmt.Sprintf("%d: give the number of runs from one full to the next, at least 1", c.FullEvery))
	}
	if c.FullAfter != "" {
		if _, err := ParseAge(c.FullAfter); err != nil {
			return AttrError("full_after", "invalid full_after", err.Error())
		}
	}
	return nil
}

// FullDue says why the policy wants a full run rather than one on parent
// (full_every, full_after), or "" when it allows the incremental. A
// parent's chain ended when its full's FactStopTime says.
func (c ChainPolicy) FullDue(parent *Parent, now time.Time) string {
	f := parent.Facts
	length, _ := strconv.Atoi(f[FactChainLength])
	if int64(length)+1 >= c.FullEvery {
		return fmt.Sprintf("full_every = %d: the chain of run %s holds %d runs", c.FullEvery, parent.RunID, length+1)
	}
	if c.FullAfter == "" {
		return ""
	}
	age, _ := ParseAge(c.FullAfter)
	fullTime := f[FactFullTime]
	if f[FactBackupType] != BackupIncremental {
		fullTime = f[FactStopTime]
	}
	at, err := time.Parse(time.RFC3339Nano, fullTime)
	if err != nil {
		return fmt.Sprintf("the newest run, %s, records no time for its chain's full", parent.RunID)
	}
	if now.Sub(at) >= age {
		return fmt.Sprintf("full_after = %q: the chain's full ended %s ago", c.FullAfter, now.Sub(at).Round(time.Minute))
	}
	return ""
}

// ChainPlan is what a run of a Chainer decided to be: incremental on
// Parent, or full, with Why when incrementals were asked for.
type ChainPlan struct {
	Parent *Parent
	Why    string
}

// Full is the plan of a full run, for the reason format and a say.
func Full(format string, a ...any) ChainPlan { return ChainPlan{Why: fmt.Sprintf(format, a...)} }

// Facts are the facts the run records about its place in a chain; asked
// says whether incrementals were (only then is a full's reason kept).
func (p ChainPlan) Facts(asked bool) map[string]string {
	if p.Parent == nil {
		out := map[string]string{FactBackupType: BackupFull}
		if asked && p.Why != "" {
			out[FactFullReason] = p.Why
		}
		return out
	}
	f := p.Parent.Facts
	length, _ := strconv.Atoi(f[FactChainLength])
	fullRun, fullTime := f[FactFullRun], f[FactFullTime]
	if f[FactBackupType] != BackupIncremental {
		fullRun, fullTime = p.Parent.RunID, f[FactStopTime]
	}
	return map[string]string{
		FactBackupType:  BackupIncremental,
		FactParent:      p.Parent.RunID,
		FactChainLength: strconv.Itoa(length + 1),
		FactFullRun:     fullRun,
		FactFullTime:    fullTime,
	}
}
