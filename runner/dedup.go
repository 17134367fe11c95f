package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/dedup"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// dedupBackup is a backup's dedup stage bound to its store: the index of
// the chunks the store holds, loaded from the lists of the pipeline's
// newest runs under the same key, the packer writing the run's new chunks
// beside the runs, and the workers.
type dedupBackup struct {
	b      dedupWriter
	sink   *endpoint
	folder string // the packs' folder, from the store's root
	check  string
	chunks string
	format dedup.Format
	// copied, in a copy, is the copied run's account of its chunks.
	copied *manifest.Dedup
	// renewing is closed to stop renewing the announcement.
	renewing chan struct{}
	stopOnce sync.Once
}

// announceAndRenew announces the run, and renews the announcement while
// it runs (see packs.go).
func (d *dedupBackup) announceAndRenew(ctx context.Context, runID string, grace time.Duration) error {
	if err := d.announce(ctx, runID); err != nil {
		return err
	}
	d.renewing = make(chan struct{})
	go d.renew(ctx, runID, grace, d.renewing)
	return nil
}

func (d *dedupBackup) stopRenewing() {
	d.stopOnce.Do(func() {
		if d.renewing != nil {
			close(d.renewing)
		}
	})
}

// dedupWriter is what writes a run's chunks into a store: a backup's
// dedup stage, or a copy's.
type dedupWriter interface {
	Close(ctx context.Context) ([]string, error)
	Abort(ctx context.Context)
	Packs() []string
	Stats() *dedup.Stats
}

// bindDedup binds the job's dedup stage, if the pipeline has one (see
// dedupBackup).
func (r *run) bindDedup(ctx context.Context) (*dedupBackup, error) {
	st := r.p.Dedup()
	if st == nil {
		return nil, nil
	}
	d := st.Dedup
	if d.Key == nil {
		return nil, fmt.Errorf("dedup: the key is not known")
	}
	snk := r.sinks[0]
	storage, ok := snk.sink.(sdk.Storage)
	if !ok {
		return nil, fmt.Errorf("dedup: sink %s cannot list and read its objects, which dedup needs to know the chunks it holds", snk.name)
	}
	root, err := RunsRoot(snk.def.Key)
	if err != nil {
		return nil, fmt.Errorf("dedup: sink %s: %w", snk.name, err)
	}
	db := &dedupBackup{sink: snk, folder: root + manifest.PacksDir, check: d.Key.Check(), chunks: d.Sizes.String(), format: r.p.Format()}
	// Announced before the index is read: see packs.go.
	if err := db.announceAndRenew(ctx, r.o.RunID, graceOf(r.p)); err != nil {
		return nil, err
	}
	ix := dedup.NewIndex(d.IndexMemory)
	if err := r.loadIndex(ctx, ix, sinkStore{st: storage, sink: snk.sink, root: root}, r.p.Name, d.Key.Check(), db.sealing()); err != nil {
		db.stopRenewing()
		return nil, fmt.Errorf("dedup: sink %s: %w", snk.name, err)
	}
	packer := dedup.NewPacker(packSink{db}, r.o.RunID, d.PackSize)
	b, err := dedup.NewBackup(ctx, dedup.BackupConfig{Key: *d.Key, Sizes: d.Sizes, Format: db.format, Index: ix, Packer: packer, Workers: st.Workers, Ahead: plan.DedupAhead(st.Workers)})
	if err != nil {
		db.stopRenewing()
		return nil, fmt.Errorf("dedup: %w", err)
	}
	db.b = b
	for i := range r.job.Stages {
		if r.job.Stages[i].Name == stagekind.Dedup.Name {
			r.job.Stages[i].Proc = b
		}
	}
	return db, nil
}

// bindDedupCopy gives a copy of a deduplicated run the stage that copies
// the chunks its one store lacks (see dedup.Copier), and returns what
// commits them; nil for a run that is not deduplicated.
func (r *run) bindDedupCopy(ctx context.Context) (*dedupBackup, error) {
	from := r.sp.from
	md := from.Manifest.Dedup
	if md == nil {
		return nil, nil
	}
	if len(r.sinks) != 1 {
		return nil, fmt.Errorf("run %s is deduplicated: copy it to one store at a time (pipeline %q has %d sinks)", from.Manifest.RunID, r.p.Name, len(r.sinks))
	}
	snk := r.sinks[0]
	storage, ok := snk.sink.(sdk.Storage)
	if !ok {
		return nil, fmt.Errorf("run %s is deduplicated: sink %s cannot list and read its objects, which a copy needs to know the chunks it holds", from.Manifest.RunID, snk.name)
	}
	root, err := RunsRoot(snk.def.Key)
	if err != nil {
		return nil, fmt.Errorf("dedup: sink %s: %w", snk.name, err)
	}
	source, err := from.Manifest.PacksFolder(from.Key)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", from.Key, err)
	}
	sizes, err := dedup.ParseSizes(md.Chunker)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", from.Key, err)
	}
	db := &dedupBackup{sink: snk, folder: root + manifest.PacksDir, check: md.KeyCheck, chunks: md.Chunker, copied: md}
	if err := db.announceAndRenew(ctx, from.Manifest.RunID, graceOf(r.p)); err != nil {
		return nil, err
	}
	ix := dedup.NewIndex(dedup.DefaultIndexMemory)
	if err := r.loadIndex(ctx, ix, sinkStore{st: storage, sink: snk.sink, root: root}, from.Manifest.Pipeline, md.KeyCheck, db.sealing()); err != nil {
		db.stopRenewing()
		return nil, fmt.Errorf("dedup: sink %s: %w", snk.name, err)
	}
	c := dedup.NewCopier(ctx, packReader{src: r.src.source, folder: source}, ix, dedup.NewPacker(packSink{db}, r.o.RunID, dedup.DefaultPackSize))
	db.b = c
	st := engine.Stage{Name: stagekind.Dedup.Name, Label: "the chunks " + snk.name + " lacks, from " + source, Proc: c, Memory: int64(sizes.Max) + 4096}
	r.job.Stages = append([]engine.Stage{st}, r.job.Stages...)
	return db, nil
}

// sealing is how a run's chunks are sealed: only runs sealed alike share
// chunks (a chunk of a run encrypted to other keys would not open with
// this run's).
type sealing struct {
	folder, codec, encryption string
	recipients                []string
}

func (a sealing) same(b sealing) bool {
	return a.folder == b.folder && a.codec == b.codec && a.encryption == b.encryption && slices.Equal(slices.Sorted(slices.Values(a.recipients)), slices.Sorted(slices.Values(b.recipients)))
}

// loadIndex fills ix with the chunks of the pipeline's runs in the
// store, newest first, while it has room. A run stored under another key,
// or sealed otherwise (other recipients, another codec), or with its
// packs elsewhere shares no chunk, and is said so. A list whose digest
// is not its manifest's is not trusted, and a run whose list is gone (a
// prune at work) is passed over.
func (r *run) loadIndex(ctx context.Context, ix *dedup.Index, store sinkStore, pipeline, check string, want sealing) error {
	cat, err := catalog.Read(ctx, store)
	if err != nil {
		return fmt.Errorf("reading its runs: %w", err)
	}
	for _, run := range cat.Runs {
		m := run.Manifest
		if m.Pipeline != pipeline || m.Dedup == nil {
			continue
		}
		d := m.Dedup
		if d.KeyCheck != check {
			r.o.Warn(fmt.Sprintf("dedup: run %s was stored under another key (check %s, this one's %s): the run shares none of its chunks", m.RunID, d.KeyCheck, check))
			continue
		}
		folder, err := m.PacksFolder(run.Key)
		if err != nil {
			continue
		}
		if have := (sealing{folder: store.root + folder, codec: d.Codec, encryption: d.Encryption, recipients: d.Recipients}); !have.same(want) {
			r.o.Warn(fmt.Sprintf("dedup: run %s's chunks are sealed otherwise (codec %s, recipients %v, packs in %s): the run shares none of its chunks", m.RunID, d.Codec, d.Recipients, have.folder))
			continue
		}
		for _, o := range m.Objects {
			left, err := loadList(ctx, ix, store, run.ObjectKey(o), o.Digest)
			if errors.Is(err, sdk.ErrNotFound) {
				break // deleted since the listing: its chunks go with it
			}
			if err != nil {
				r.o.Warn(fmt.Sprintf("dedup: run %s, %s: %v; its chunks are not shared", m.RunID, o.Key, err))
				continue
			}
			if left > 0 {
				r.o.Warn(fmt.Sprintf("dedup: the index is full (%d chunks, index_memory): chunks of run %s and older are stored again; raise index_memory to share them", ix.Len(), m.RunID))
				return nil
			}
		}
	}
	return nil
}

// loadList adds to ix the chunks of the list at key, if its bytes have
// the digest its manifest records.
func loadList(ctx context.Context, ix *dedup.Index, store sinkStore, key, digest string) (int64, error) {
	rc, err := store.Open(ctx, key)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return ix.LoadChecked(rc, digest)
}

// packSink creates packs in the store's packs folder.
type packSink struct{ d *dedupBackup }

func (p packSink) Create(ctx context.Context, name string) (sdk.ObjectWriter, error) {
	s := p.d.sink
	return s.sink.Create(ctx, sdk.Object{Key: p.d.folder + name, Stream: name, Size: -1, MaxSize: -1, Exclusive: s.def.Schema.ExclusiveCreate})
}

// close commits the run's last pack and makes its packs durable: every
// chunk its lists name is then in the store.
func (d *dedupBackup) close(ctx context.Context) error {
	defer d.stopRenewing()
	if _, err := d.b.Close(ctx); err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	if f, ok := d.sink.sink.(sdk.Flusher); ok {
		if err := f.Flush(ctx); err != nil {
			return fmt.Errorf("dedup: sink %s: making the packs durable: %w", d.sink.name, err)
		}
	}
	return d.checkPacks(ctx)
}

// abort stops the workers and drops the open pack; the packs committed
// stay, named by no run, for prune.
func (d *dedupBackup) abort(ctx context.Context) {
	d.stopRenewing()
	d.b.Abort(ctx)
}

// manifest is what the run's manifest says of its chunks; the packs'
// folder is made relative to each manifest by writeManifests. A copy's
// says how the copied run's chunks are sealed, and what the copy added.
func (d *dedupBackup) manifest() *manifest.Dedup {
	if d == nil {
		return nil
	}
	st, s := d.b.Stats(), d.sealing()
	return &manifest.Dedup{Format: manifest.ChunksFormat, Packs: d.folder, Chunker: d.chunks, KeyCheck: d.check,
		Codec: s.codec, Encryption: s.encryption, Recipients: s.recipients,
		Chunks: st.Chunks.Load(), Bytes: st.PlainBytes.Load(), NewChunks: st.New.Load(), NewBytes: st.NewBytes.Load(), StoredBytes: st.StoredBytes.Load()}
}

// sealing is how this run seals its chunks, and where it packs them.
func (d *dedupBackup) sealing() sealing {
	s := sealing{folder: d.folder, codec: "none"}
	switch {
	case d.copied != nil:
		s.codec, s.encryption, s.recipients = d.copied.Codec, d.copied.Encryption, d.copied.Recipients
	default:
		if d.format.Codec != nil {
			s.codec = d.format.Codec.Name
		}
		if fp := d.format.Keys.Fingerprints; len(fp) > 0 {
			s.encryption, s.recipients = "age", fp
		}
	}
	return s
}

// relative is m with its packs' folder relative to the manifest at mkey.
func relative(m *manifest.Dedup, mkey string) *manifest.Dedup {
	d := *m
	d.Packs = strings.TrimSuffix(manifest.Rel(mkey, d.Packs+"x"), "x")
	return &d
}

// fromDedupManifest plans the streams of a deduplicated run r: each
// object is a stream's chunk list, which the dedup restore stage turns
// back into the stream (see dedupRestore). The pipeline must decode what
// sealed the chunks: decrypt for encrypted ones, decompress for
// compressed ones.
func fromDedupManifest(p *plan.Pipeline, r *catalog.Run, sp *streamsPlan, copying bool, dec, decomp *plan.Stage) error {
	m := r.Manifest
	d := m.Dedup
	if _, err := m.PacksFolder(r.Key); err != nil {
		return fmt.Errorf("manifest %s: %w", r.Key, err)
	}
	if copying {
		// The lists, each rewritten for the target by the copy's stage.
		for _, o := range m.Objects {
			key := r.ObjectKey(o)
			if key == ".." || strings.HasPrefix(key, "../") {
				return fmt.Errorf("manifest %s: object %q lies outside the source", r.Key, o.Key)
			}
			sp.streams = append(sp.streams, stream{source: key, name: o.Stream, ext: dedup.ListExt, size: o.Size, outSize: -1, maxSize: -1, digest: o.Digest})
		}
		return nil
	}
	if err := checkDecrypt(p, r.Key, manifest.Object{Key: "each chunk", Encryption: d.Encryption, Recipients: d.Recipients}, dec, false); err != nil {
		return err
	}
	if d.Codec != "none" && decomp == nil {
		return fmt.Errorf("the chunks of the deduplicated run in %s are compressed with %s: add decompress {} to pipeline %q", r.Key, d.Codec, p.Name)
	}
	if decomp != nil && decomp.Codec != "auto" && decomp.Codec != d.Codec {
		return fmt.Errorf("decompress { codec = %q } but the chunks of the run in %s are %s: drop codec to take it from the manifest", decomp.Codec, r.Key, d.Codec)
	}
	sp.codec, sp.frame = d.Codec, 0
	for _, o := range m.Objects {
		key := r.ObjectKey(o)
		if key == ".." || strings.HasPrefix(key, "../") {
			return fmt.Errorf("manifest %s: object %q lies outside the source", r.Key, o.Key)
		}
		sp.streams = append(sp.streams, stream{source: key, name: o.Stream, ext: p.Ext(), size: o.Size, outSize: o.OriginalSize, maxSize: o.OriginalSize, digest: o.Digest})
	}
	return nil
}

// dedupRestore puts, in a restore of a deduplicated run, the dedup
// restore stage in place of the decrypt and decompress stages: it reads
// each chunk from its pack in the source, checks it and opens it with
// their keys and codec.
func (r *run) dedupRestore() error {
	if r.sp.from == nil || r.sp.from.Manifest.Dedup == nil || r.kind != restore {
		return nil
	}
	var keys encrypt.Keys
	if dec := r.p.Stage(stagekind.Decrypt.Name); dec != nil {
		keys = dec.Keys
	}
	st, err := dedupStage(r.sp.from, r.src.source, &keys, nil)
	if err != nil {
		return err
	}
	stages := []engine.Stage{st}
	for _, s := range r.job.Stages {
		if s.Name != stagekind.Decrypt.Name && s.Name != stagekind.Decompress.Name {
			stages = append(stages, s)
		}
	}
	r.job.Stages = stages
	return nil
}

// dedupStage is the stage that turns the chunk lists of deduplicated run r
// back into its streams, reading the chunks from src and opening them
// with keys; with keys nil, the stage checks every chunk's blob without a
// key and writes nothing, skipping blobs seen holds.
func dedupStage(r *catalog.Run, src sdk.Source, keys *encrypt.Keys, seen *dedup.Seen) (engine.Stage, error) {
	m := r.Manifest
	folder, err := m.PacksFolder(r.Key)
	if err != nil {
		return engine.Stage{}, fmt.Errorf("manifest %s: %w", r.Key, err)
	}
	sizes, err := dedup.ParseSizes(m.Dedup.Chunker)
	if err != nil {
		return engine.Stage{}, fmt.Errorf("manifest %s: %w", r.Key, err)
	}
	packs := packReader{src: src, folder: folder}
	if keys == nil {
		rs := dedup.NewChecker(packs, plan.DedupReadAheadFor(sizes.Max), sizes.Max, seen)
		return engine.Stage{Name: stagekind.Dedup.Name, Label: "every chunk's digest, in " + folder, Proc: rs, Memory: rs.StreamMemory(sizes.Max)}, nil
	}
	f := dedup.Format{Keys: *keys}
	if m.Dedup.Codec != "none" {
		f.Codec, _ = compress.Lookup(m.Dedup.Codec)
	}
	rs, err := dedup.NewRestore(packs, f, plan.DedupReadAheadFor(sizes.Max), sizes.Max)
	if err != nil {
		return engine.Stage{}, err
	}
	return engine.Stage{Name: stagekind.Dedup.Name, Label: "chunks in " + folder + ", " + f.String(), Proc: rs, Memory: rs.StreamMemory(sizes.Max)}, nil
}

// packReader reads chunks' blobs from the packs in a source.
type packReader struct {
	src    sdk.Source
	folder string
}

func (p packReader) ReadRange(ctx context.Context, pack string, offset int64, b []byte) error {
	rc, err := sdk.OpenRange(ctx, p.src, p.folder+pack, offset, int64(len(b)))
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.ReadFull(rc, b)
	return err
}
