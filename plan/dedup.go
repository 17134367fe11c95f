package plan

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/dedup"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// Dedup is a dedup stage's settings.
type Dedup struct {
	// Key is nil until known (a key from a variable known at run time).
	Key         *dedup.Key
	Sizes       dedup.Sizes
	PackSize    int64
	IndexMemory int64
	// Grace is how old a pack no run names must be before prune deletes
	// it (see runner's packs.go).
	Grace time.Duration
}

// Dedup returns the pipeline's dedup stage, or nil.
func (p *Pipeline) Dedup() *Stage { return p.Stage(stagekind.Dedup.Name) }

// Format is how a dedup pipeline seals each chunk: the compress stage's
// codec and level (none without one), the encrypt stage's recipients.
func (p *Pipeline) Format() dedup.Format {
	var f dedup.Format
	if c := p.Stage(stagekind.Compress.Name); c != nil && c.Codec != "none" {
		f.Codec, _ = compress.Lookup(c.Codec)
		f.Level = c.Level
	}
	if e := p.Stage(stagekind.Encrypt.Name); e != nil {
		f.Keys = e.Keys
	}
	return f
}

var dedupOps = ops{
	resolve: func(s *Stage, b *pipefile.Block, p *Pipeline) (bool, hcl.Diagnostics) {
		d := &Dedup{}
		s.Dedup = d
		if !s.Explicit["workers"] {
			// The stage does the compress and encrypt stages' work, which
			// run side by side without it: one worker more than the
			// profile gives a compress stage.
			s.Workers = p.Profile.Workers + 1
		}
		var diags hcl.Diagnostics
		avg := s.ChunkSize
		d.Sizes = dedup.Sizes{Min: avg / 4, Avg: avg, Max: 4 * avg}
		if err := d.Sizes.Check(); err != nil {
			diags = append(diags, errAt(b.AttrRange("chunk_size"), "Invalid chunk size", err.Error()+"."))
		}
		d.PackSize, _ = b.Int("pack_size")
		if d.PackSize < 1<<20 || d.PackSize > 4<<30 {
			diags = append(diags, errAt(b.AttrRange("pack_size"), "Invalid pack size", fmt.Sprintf("pack_size = %s: give between 1 MiB and 4 GiB.", pipefile.HumanSize(d.PackSize))))
		}
		d.IndexMemory, _ = b.Int("index_memory")
		if d.IndexMemory < 1<<20 {
			diags = append(diags, errAt(b.AttrRange("index_memory"), "Invalid index memory", fmt.Sprintf("index_memory = %s: give at least 1 MiB.", pipefile.HumanSize(d.IndexMemory))))
		}
		g, err := pipefile.ParseAge(b.String("grace"))
		if err != nil || g < time.Second {
			diags = append(diags, errAt(b.AttrRange("grace"), "Invalid grace", fmt.Sprintf("grace = %q: give a duration longer than any backup takes, such as \"24h\" or \"2d\".", b.String("grace"))))
		}
		d.Grace = g
		if !b.Unknown["key"] {
			k, err := dedup.ParseKey(b.String("key"))
			if err != nil {
				diags = append(diags, errAt(b.AttrRange("key"), "Invalid deduplication key", err.Error()+"."))
			} else {
				d.Key = &k
			}
		}
		return !diags.HasErrors(), diags
	},
	stage: func(s *Stage, p *Pipeline, _ string, _ int) (engine.Stage, bool, error) {
		c := dedupConfig(s, p)
		worker := c.WorkerMemory()
		if f := c.Format; f.Codec != nil {
			// Each worker's encoder, as a compress stage's worker.
			if cs, err := f.Codec.Stage(f.Level, 1, s.Dedup.Sizes.Max); err == nil {
				worker += cs.Memory
			}
		}
		return engine.Stage{
			Name:   stagekind.Dedup.Name,
			Proc:   dedup.Unbound{},
			Memory: c.StreamMemory(),
			Shared: s.Dedup.IndexMemory + int64(s.Workers)*worker,
		}, true, nil
	},
	ext:      func(*Stage) string { return dedup.ListExt },
	maxOut:   func(s *Stage, n int64) int64 { return dedup.MaxListSize(n, s.Dedup.Sizes) },
	describe: func(s *Stage) string { return describeDedup(s, nil) },
}

// dedupConfig is the stage's backup configuration, without what only the
// run knows (the key, the index, the packer).
func dedupConfig(s *Stage, p *Pipeline) dedup.BackupConfig {
	return dedup.BackupConfig{Sizes: s.Dedup.Sizes, Format: p.Format(), Workers: s.Workers, Ahead: DedupAhead(s.Workers)}
}

// DedupAhead is how many new chunks of a stream may be stored at once,
// with workers: one each, and one more.
func DedupAhead(workers int) int { return workers + 1 }

// DedupReadAhead is how many chunks of a stream a restore reads at once.
const DedupReadAhead = 3

// dedupRestoreMemory is what restoring (or copying) a deduplicated run may
// take beyond
// the layout of the pipeline's own stages: a pipeline that decodes what a
// storage source holds may find a deduplicated run there, whose restore
// stage takes the place of decrypt and decompress (with chunks of the
// default sizes; a run's larger chunks are read fewer at a time, see
// DedupReadAheadFor).
func (p *Pipeline) dedupRestoreMemory(j *engine.Job, l engine.Layout) int64 {
	if p.Def.Source == nil || !p.Def.Source.Schema.Storage {
		return 0
	}
	if !p.Restores() {
		if p.Ext() != "" || !p.WritesManifest() || p.Dedup() != nil {
			return 0
		}
		// It may copy a deduplicated run: the target's index, and per
		// stream a chunk on its way, in one pack more, and the list read
		// and the list written.
		return dedup.DefaultIndexMemory + int64(p.Streams)*(int64(dedup.DefaultSizes.Max+4096)+2*dedup.ListMemory)
	}
	alt := *j
	alt.Stages = []engine.Stage{{Name: stagekind.Dedup.Name, Proc: dedup.Unbound{}, Memory: dedup.RestoreMemory(DedupReadAhead, dedup.DefaultSizes.Max)}}
	for _, s := range j.Stages {
		if s.Name != stagekind.Decrypt.Name && s.Name != stagekind.Decompress.Name {
			alt.Stages = append(alt.Stages, s)
		}
	}
	al, err := alt.Layout()
	if err != nil {
		return 0
	}
	return max(0, al.Total-l.Total)
}

// DedupReadAheadFor is how many chunks of at most max bytes a restore
// reads at once within the memory the plan gives it: DedupReadAhead for
// the default sizes, fewer for larger chunks, at least one.
func DedupReadAheadFor(max int) int {
	allowed := dedup.RestoreMemory(DedupReadAhead, dedup.DefaultSizes.Max)
	for a := DedupReadAhead; a > 1; a-- {
		if dedup.RestoreMemory(a, max) <= allowed {
			return a
		}
	}
	return 1
}

func describeDedup(s *Stage, p *Pipeline) string {
	d := s.Dedup
	text := fmt.Sprintf("chunks of %s on average (%s to %s), packs of %s, an index of %s, %s%s",
		size(int64(d.Sizes.Avg)), size(int64(d.Sizes.Min)), size(int64(d.Sizes.Max)), size(d.PackSize), size(d.IndexMemory), Plural(s.Workers, "worker"), s.fromProfile("workers"))
	if p != nil {
		text += "; each chunk " + p.Format().String()
	}
	return text
}

// checkDedup: a dedup stage cuts the plain stream, first, and its chunks
// are sealed by the compress and encrypt stages after it, into one store
// that keeps runs.
func checkDedup(p *Pipeline) hcl.Diagnostics {
	d := p.Dedup()
	if d == nil {
		return nil
	}
	var diags hcl.Diagnostics
	if p.Stages[0] != d {
		diags = append(diags, errAt(d.Def.Range, "Dedup is not first",
			"dedup cuts the stream as the source yields it, and compresses and encrypts each chunk itself: put it before compress and encrypt."))
	}
	if err := p.Format().Check(); err != nil {
		diags = append(diags, errAt(d.Def.Range, "Chunks cannot be sealed so", err.Error()+"."))
	}
	if len(p.Sinks) != 1 || !p.Sinks[0].Stores() || p.Sinks[0].Key == nil || !p.Sinks[0].Key.UsesRunID() {
		diags = append(diags, errAt(d.Def.Range, "Dedup needs one store of runs",
			"dedup keeps its chunks beside the runs of one store: give one storage sink whose path (key, for object stores) has ${run.id}, e.g. key = \"backups/${run.id}/\". Copy runs to a second store with a pipeline that reads them."))
	}
	for _, s := range p.Stages {
		if s.Kind() == stagekind.Compress || s.Kind() == stagekind.Encrypt {
			s.absorbed = true
		}
	}
	return diags
}
