package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/dedup"
)

// How packs are collected without losing a chunk a backup still needs.
//
// A deduplicating backup announces itself before it reads which chunks
// the store holds: an object <packs>/runs/<run id>, written once. Prune
// deletes a pack only when no run's list names it, the pack is older than
// the grace period, and no run announced within the grace period is
// unfinished (it has no manifest: it is running, or failed lately); and it
// lists the announcements again after working out what no run names, just
// before it deletes. A backup that read the store's chunks before prune
// deleted the runs naming them has announced itself by then, so prune
// deletes no pack; one that announces itself later reads the store after
// those runs are gone, and never refers to their chunks. A backup that
// runs longer than the grace period checks, before its manifest, that
// every pack its lists name is still there, and fails if one is not: a
// run is never stored that names a chunk that is gone.

// announceDir is the folder of the announcements, in the packs' folder.
const announceDir = "runs/"

// DefaultGrace is how long a pack no run names, and a backup's
// announcement, are kept by default.
const DefaultGrace = 24 * time.Hour

// graceOf is the pipeline's dedup grace, or DefaultGrace.
func graceOf(p *plan.Pipeline) time.Duration {
	if d := p.Dedup(); d != nil && d.Dedup != nil && d.Dedup.Grace > 0 {
		return d.Dedup.Grace
	}
	return DefaultGrace
}

// PacksPlan is what prune does with a deduplicating store's packs.
type PacksPlan struct {
	// Delete are the packs no run left names, older than the grace.
	Delete []sdk.ObjectInfo
	// Young counts the packs no run names yet kept: younger than the
	// grace (a running backup's, say).
	Young int
	// Held, when set, says why no pack is deleted this time.
	Held string
	// Notices are announcements older than the grace, deleted too.
	Notices []sdk.ObjectInfo
	// Bytes is the size of Delete.
	Bytes int64
	grace time.Duration
	// announced are the announcements, and manifests the manifests, that
	// stood when the plan was made.
	announced, manifests map[string]bool
}

// planPacks works out which packs of the store cat lists no run names
// once drop is deleted (see PacksPlan); st reads the runs' lists.
func planPacks(ctx context.Context, st catalog.Store, cat *catalog.Catalog, drop []*catalog.Run, now time.Time, grace time.Duration) (*PacksPlan, error) {
	pp := &PacksPlan{grace: grace, announced: map[string]bool{}, manifests: map[string]bool{}}
	if len(cat.Packs) == 0 {
		return pp, nil
	}
	gone := map[string]bool{}
	for _, r := range drop {
		gone[r.Key] = true
	}
	runs := map[string]bool{}
	named := map[string]bool{}
	for _, inv := range cat.Invalid {
		pp.manifests[inv.Key] = true
	}
	for _, r := range cat.Runs {
		runs[r.Manifest.RunID] = true
		pp.manifests[r.Key] = true
		if gone[r.Key] || r.Manifest.Dedup == nil {
			continue
		}
		folder, err := r.Manifest.PacksFolder(r.Key)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", r.Manifest.RunID, err)
		}
		for _, o := range r.Manifest.Objects {
			err := listPacks(ctx, st, r.ObjectKey(o), folder, named)
			if errors.Is(err, sdk.ErrNotFound) {
				break // deleted since the listing (another prune): the run is going
			}
			if err != nil {
				return nil, fmt.Errorf("run %s, %s: %w", r.Manifest.RunID, o.Key, err)
			}
		}
	}
	for _, o := range cat.Packs {
		dir, base := path.Split(o.Key)
		switch {
		case strings.HasSuffix(dir, manifest.PacksDir+announceDir):
			pp.announced[o.Key] = true
			young := now.Sub(o.Modified) < grace
			id, _, _ := strings.Cut(base, ".") // a running backup's renewals: <id>.<n>
			if young && !runs[id] && pp.Held == "" {
				pp.Held = fmt.Sprintf("run %s, announced %s, has no manifest yet: it is running, or failed less than %s ago, and may use chunks no finished run names; a prune after it (or after %s) deletes them",
					id, catalog.TimeText(o.Modified), grace, catalog.TimeText(o.Modified.Add(grace)))
			}
			if !young {
				pp.Notices = append(pp.Notices, o)
			}
		case !strings.HasSuffix(o.Key, dedup.PackExt) || named[o.Key]:
		case now.Sub(o.Modified) < grace:
			pp.Young++
		default:
			pp.Delete = append(pp.Delete, o)
			pp.Bytes += o.Size
		}
	}
	return pp, nil
}

// holdLockedPacks moves the packs the store still locks out of pp's
// Delete into rp's Locked: a later prune deletes them.
func (rp *RetentionPlan) holdLockedPacks(ctx context.Context, w catalog.Writer, now time.Time) error {
	pp := rp.Packs
	if pp == nil {
		return nil
	}
	del := pp.Delete[:0:0]
	pp.Bytes = 0
	for _, o := range pp.Delete {
		l, err := heldBy(ctx, w, o.Key, "", now)
		if err != nil {
			return fmt.Errorf("pack %s: %w; nothing was deleted", o.Key, err)
		}
		if l != nil {
			rp.Locked = append(rp.Locked, *l)
			continue
		}
		del = append(del, o)
		pp.Bytes += o.Size
	}
	pp.Delete = del
	return nil
}

// listPacks adds to named every pack the chunk list at key names.
func listPacks(ctx context.Context, st catalog.Store, key, folder string, named map[string]bool) error {
	rc, err := st.Open(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	l := dedup.NewListReader(rc)
	last := ""
	for {
		ref, err := l.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if ref.Pack != last {
			last = ref.Pack
			named[folder+last] = true
		}
	}
}

// applyPacks deletes what pp says, unless a backup announced itself since
// the plan was made (see the comment at the top), and returns how many
// packs it deleted.
func applyPacks(ctx context.Context, w catalog.Writer, pp *PacksPlan, now time.Time) (int, error) {
	if pp == nil || pp.Held != "" || len(pp.Delete)+len(pp.Notices) == 0 {
		return 0, nil
	}
	if len(pp.Delete) > 0 {
		objs, err := w.List(ctx)
		if err != nil {
			return 0, err
		}
		for _, o := range objs {
			dir, base := path.Split(o.Key)
			switch {
			case strings.HasSuffix(dir, manifest.PacksDir+announceDir) && !pp.announced[o.Key] && now.Sub(o.Modified) < pp.grace:
				pp.Held = fmt.Sprintf("run %s announced itself while prune ran; a later prune deletes the packs no run names", base)
				return 0, nil
			case manifest.IsKey(o.Key) && !pp.manifests[o.Key]:
				// A run finished since: its chunks were not counted.
				pp.Held = fmt.Sprintf("a run finished while prune ran (%s); a later prune deletes the packs no run names", o.Key)
				return 0, nil
			}
		}
	}
	n := 0
	for _, o := range pp.Delete {
		if err := w.Remove(ctx, o.Key); err != nil {
			return n, fmt.Errorf("removing pack %s: %w", o.Key, err)
		}
		n++
	}
	for _, o := range pp.Notices {
		if err := w.Remove(ctx, o.Key); err != nil {
			return n, fmt.Errorf("removing %s: %w", o.Key, err)
		}
	}
	return n, nil
}

// announce writes the backup's announcement (see the comment at the top).
func (d *dedupBackup) announce(ctx context.Context, runID string) error {
	host, _ := os.Hostname()
	b, err := json.Marshal(map[string]any{"run_id": runID, "host": host, "pid": os.Getpid(), "started_at": time.Now().UTC()})
	if err != nil {
		return err
	}
	key := d.folder + announceDir + runID
	if err := put(ctx, d.sink.sink, key, append(b, '\n')); err != nil {
		return fmt.Errorf("dedup: sink %s: announcing the run at %s: %w", d.sink.name, key, err)
	}
	return nil
}

// renew announces the run again every quarter of the grace period until
// stop is closed, so that prune holds its packs however long it runs.
func (d *dedupBackup) renew(ctx context.Context, runID string, grace time.Duration, stop <-chan struct{}) {
	every := max(grace/4, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if err := d.announce(ctx, fmt.Sprintf("%s.%d", runID, n)); err != nil {
				sdk.Log().Warn("dedup: renewing the run's announcement", "err", err)
			}
		}
	}
}

// checkPacks makes sure every pack the run's lists name is in the store:
// a prune while the run was longer than the grace may have taken one.
func (d *dedupBackup) checkPacks(ctx context.Context) error {
	objs, err := d.sink.sink.(sdk.Storage).List(ctx, d.folder)
	if err != nil {
		return fmt.Errorf("dedup: sink %s: listing the packs: %w", d.sink.name, err)
	}
	have := map[string]bool{}
	for _, o := range objs {
		have[o.Key] = true
	}
	for _, p := range d.b.Packs() {
		if !have[d.folder+p] {
			return fmt.Errorf("dedup: pack %s, which this run refers to, is gone from sink %s: a prune deleted it while the run took longer than the grace period; run the backup again", p, d.sink.name)
		}
	}
	return nil
}
