package binlog

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pipebackup/pipe/internal/binlogfile"
	"github.com/pipebackup/pipe/stages/dedup"
)

// Archiver stores a server's binlog files as the server writes them.
type Archiver struct {
	Archive *Archive
	// Base is the server's log_bin_basename: its files are Base.NNNNNN,
	// listed in Base.index.
	Base string
	// MaxLag is how long a byte the server wrote may wait before it is
	// stored; PartSize how many bytes make a segment at most.
	MaxLag   time.Duration
	PartSize int64
	Log      *slog.Logger

	// Stored counts the bytes stored, Segments the objects; LagNanos is
	// how long the oldest byte not yet stored has waited (0: none
	// waits), for metrics.
	Stored, Segments, LagNanos atomic.Int64
	// Gaps counts the times the server had purged files before they
	// were stored.
	Gaps atomic.Int64

	server  uint32
	done    map[string]int64 // each file's bytes stored, from 0 on
	waiting time.Time        // when the bytes not yet stored were first seen
}

// Files lists the server's binlog files, oldest first, from its index.
func (r *Archiver) Files() ([]string, error) {
	f, err := os.Open(r.Base + ".index")
	if err != nil {
		return nil, fmt.Errorf("reading the server's binlog index: %w (is log_bin on, and is %s its log_bin_basename?)", err, r.Base)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			names = append(names, filepath.Base(line))
		}
	}
	return names, sc.Err()
}

// start learns the server's id and what the archive holds of it.
func (r *Archiver) start(ctx context.Context, files []string) error {
	id, err := binlogfile.ServerID(filepath.Join(filepath.Dir(r.Base), files[0]))
	if err != nil {
		return err
	}
	l, err := r.Archive.List(ctx)
	if err != nil {
		return err
	}
	r.server, r.done = id, map[string]int64{}
	for _, f := range l.Servers[id] {
		r.done[f.Name] = f.End
	}
	// Files the server purged before they were stored break every
	// recovery across them: say so, loudly; only a new backup helps.
	if archived := l.Servers[id]; len(archived) > 0 {
		last := archived[len(archived)-1].Name
		if next, err := binlogfile.NextName(last); err == nil && !slices.Contains(files, last) && binlogfile.CompareNames(files[0], next) > 0 {
			r.Log.Error("the server no longer has the binlog files after the archive's newest: recoveries cannot pass them; take a new backup, and keep the binlog longer than the archiver may be down (binlog_expire_logs_seconds)",
				"server_id", id, "archived_until", last, "server_from", files[0])
			r.Gaps.Add(1)
		}
	}
	r.Log.Info("archiving the binlog", "server_id", id, "files", len(files), "archived_files", len(l.Servers[id]))
	return nil
}

// Run archives until ctx ends; once, it stores every byte the files hold
// now and returns.
func (r *Archiver) Run(ctx context.Context, once bool) error {
	sealer, err := r.Archive.Seal.NewSealer()
	if err != nil {
		return err
	}
	tick := min(max(r.MaxLag/4, 20*time.Millisecond), 250*time.Millisecond)
	for {
		files, err := r.Files()
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("the server's binlog index %s.index lists no file", r.Base)
		}
		if r.done == nil {
			if err := r.start(ctx, files); err != nil {
				return err
			}
		}
		if err := r.pass(ctx, sealer, files, once); err != nil {
			return err
		}
		if once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(tick):
		}
	}
}

// pass stores what waits: every byte of a file the server has left
// (every file but the last); of the one it writes, the whole parts and,
// once the oldest byte waited MaxLag (or at once, with flush), the rest.
func (r *Archiver) pass(ctx context.Context, sealer *dedup.Sealer, files []string, flush bool) error {
	pending := false
	for i, name := range files {
		path := filepath.Join(filepath.Dir(r.Base), name)
		fi, err := os.Stat(path)
		if err != nil {
			if os.IsNotExist(err) && i < len(files)-1 {
				continue // purged as we looked
			}
			return err
		}
		size, at := fi.Size(), r.done[name]
		if size <= at {
			continue
		}
		if i < len(files)-1 || flush {
			if err := r.store(ctx, sealer, path, name, at, size); err != nil {
				return err
			}
			continue
		}
		if whole := at + (size-at)/r.PartSize*r.PartSize; whole > at {
			if err := r.store(ctx, sealer, path, name, at, whole); err != nil {
				return err
			}
			at = whole
		}
		if size == at {
			continue
		}
		if r.waiting.IsZero() {
			r.waiting = time.Now()
		}
		if time.Since(r.waiting) < r.MaxLag {
			pending = true
			continue
		}
		if err := r.store(ctx, sealer, path, name, at, size); err != nil {
			return err
		}
	}
	if pending {
		r.LagNanos.Store(int64(time.Since(r.waiting)))
	} else {
		r.waiting = time.Time{}
		r.LagNanos.Store(0)
	}
	return nil
}

// store stores bytes at..end of a file, in parts of at most PartSize.
func (r *Archiver) store(ctx context.Context, sealer *dedup.Sealer, path, name string, at, end int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, min(r.PartSize, end-at))
	for at < end {
		n := min(r.PartSize, end-at)
		if _, err := f.ReadAt(buf[:n], at); err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		seg, err := r.Archive.Put(ctx, sealer, r.server, name, at, buf[:n])
		if err != nil {
			return err
		}
		at = seg.End
		r.done[name] = at
		r.Stored.Add(n)
		r.Segments.Add(1)
		r.Log.Debug("stored", "file", name, "start", seg.Start, "end", seg.End)
	}
	return nil
}
