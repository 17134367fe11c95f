package runner

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/internal/version"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/stages/checksum"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// nameObjects renders each stream's object key for each sink and, for a
// run that stores (not a restore: see kind), the manifest key of each
// storage sink, and fills the job's streams. A copy's keys take the id of
// the run it copies.
func nameObjects(sinks []*endpoint, sp *streamsPlan, job *engine.Job, stores bool) (map[int]string, error) {
	manifests, err := manifestKeys(sinks, sp, stores)
	if err != nil {
		return nil, err
	}
	taken := make([]map[string]string, len(sinks)) // by sink: what each key holds
	for i := range taken {
		taken[i] = map[string]string{}
		if m, ok := manifests[i]; ok {
			taken[i][m] = "the manifest"
		}
	}
	for _, st := range sp.streams {
		es, err := jobStream(st, sinks, sp, taken)
		if err != nil {
			return nil, err
		}
		job.Streams = append(job.Streams, es)
	}
	return manifests, nil
}

// manifestKeys checks each sink's settings against the run and returns,
// for a run that stores, the manifest key of each storage sink.
func manifestKeys(sinks []*endpoint, sp *streamsPlan, stores bool) (map[int]string, error) {
	manifests := map[int]string{}
	for i, s := range sinks {
		key := s.def.Key
		if sp.copy && key != nil {
			key = key.For(sp.from.Manifest.RunID) // the copy keeps its run's id
		}
		if stores && s.def.Stores() && s.def.Retention.Set() {
			if _, ok := s.sink.(sdk.Storage); !ok {
				return nil, fmt.Errorf("sink %s: %s needs a sink that can list and remove its objects; %s cannot", s.name, s.def.Retention.Attr(), s.def.Type)
			}
		}
		if stores && s.def.Stores() {
			k, err := key.ManifestKey()
			if err != nil {
				return nil, fmt.Errorf("sink %s: %w", s.name, err)
			}
			manifests[i] = k
		}
		if s.def.Key != nil && s.def.Key.Kind == pipefile.KeyObject && len(sp.streams) != 1 {
			return nil, fmt.Errorf("sink %s: %s = %s names one object, but the source yields %d streams: end it with \"/\" to make it a folder, or use ${stream.name} in it", s.name, s.def.Key.Attr, s.def.Key.Text, len(sp.streams))
		}
	}
	return manifests, nil
}

// jobStream is st as the engine moves it: its object in each sink, under
// a key that nothing else of the run takes (taken says, by sink, what
// holds each key so far), and the check of its recorded digest.
func jobStream(st stream, sinks []*endpoint, sp *streamsPlan, taken []map[string]string) (engine.Stream, error) {
	es := engine.Stream{Name: st.source, Size: st.size}
	for i, s := range sinks {
		key := st.name + st.ext
		if s.def.Key != nil {
			tmpl := s.def.Key
			if sp.copy {
				tmpl = tmpl.For(sp.from.Manifest.RunID)
			}
			var err error
			if key, err = tmpl.Render(st.name, st.ext); err != nil {
				return es, fmt.Errorf("sink %s: %w", s.name, err)
			}
		}
		if prev, dup := taken[i][key]; dup {
			return es, fmt.Errorf("sink %s: stream %q and %s would both be written to %s: make the sink's path a folder (ending in /) or use ${stream.name} in it", s.name, st.name, prev, key)
		}
		taken[i][key] = fmt.Sprintf("%q", st.name)
		max := st.maxSize
		if st.outSize >= 0 {
			max = st.outSize
		}
		es.Objects = append(es.Objects, sdk.Object{Key: key, Stream: st.name, Size: st.outSize, MaxSize: max})
	}
	if st.digest != "" {
		v, err := checksum.Verify(st.digest, fmt.Sprintf("object %q", st.source))
		if err != nil {
			return es, err
		}
		es.Checks = append(es.Checks, v)
	}
	return es, nil
}

// outcome is what a manifest says of its run's streams besides the
// objects: those that failed, and whether they stand alone.
type outcome struct {
	failed      []manifest.Failed
	independent bool
	damage      string
	listing     string // see sdk.Chainer
	dedup       *manifest.Dedup
}

// writeManifests writes the run's manifest to each storage sink, last.
func writeManifests(ctx context.Context, p *plan.Pipeline, runID string, started time.Time, facts map[string]string, sinks []*endpoint, keys map[int]string, sp *streamsPlan, res *engine.Result, runKey *wrappedKey, out outcome, wrote *[]wroteManifest) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	codec, frame, recipients, encryption := "none", int64(0), []string(nil), ""
	if c := p.Stage(stagekind.Compress.Name); c != nil && !c.Idle() {
		codec, frame = c.Codec, int64(c.ChunkSize)
	}
	if e := p.Stage(stagekind.Encrypt.Name); e != nil {
		encryption, recipients = "age", e.Keys.Fingerprints
	}
	decodes := p.Stage(stagekind.Decompress.Name) != nil || p.Stage(stagekind.Decrypt.Name) != nil
	var written []string
	for i := range sinks {
		mkey, ok := keys[i]
		if !ok {
			continue
		}
		m := &manifest.Manifest{RunID: runID, Pipeline: p.Name, StartedAt: started, FinishedAt: time.Now().UTC(),
			FrameSize: frame, Source: facts, PipeVersion: version.Version, Failed: out.failed, Independent: out.independent, Damage: out.damage, Listing: out.listing}
		if runKey != nil {
			m.RunKey = &manifest.RunKey{Key: manifest.Rel(mkey, runKey.keys[i]), Size: int64(len(runKey.wrapped)), Digest: runKey.digest}
		}
		if out.dedup != nil {
			m.Dedup, m.FrameSize = relative(out.dedup, mkey), 0
		}
		for k, r := range res.Streams {
			if !r.Committed {
				continue // failed, in an isolated run
			}
			o := manifest.Object{Stream: sp.streams[k].name, Key: manifest.Rel(mkey, r.Objects[i].Key), Size: r.Written,
				OriginalSize: r.Read, Digest: r.Observed[stagekind.Checksum.Name], Codec: codec, Encryption: encryption, Recipients: recipients}
			if decodes {
				o.OriginalSize = -1
			}
			if m.Dedup != nil {
				o.Codec, o.Encryption, o.Recipients = manifest.ChunksCodec, "", nil
			}
			m.Objects = append(m.Objects, o)
		}
		b, err := encodeManifest(m, p.Sign)
		if err != nil {
			return nil, fmt.Errorf("sink %s: the manifest: %w", sinks[i].name, err)
		}
		if err := putManifest(ctx, sinks, keys, i, m, b, "the manifest", &written, wrote); err != nil {
			return nil, err
		}
	}
	return written, nil
}

// writeCopies writes a copied run's manifest to each storage sink: the
// run as it was (its id, pipeline, times, facts and objects' codecs and
// recipients), its objects where the copy put them, and when it was
// copied. The copy's digests are the bytes it wrote, which the source's
// recorded digests checked on the way. With sign, the copy's manifest is
// signed with the copying pipeline's key. Without, a signed run whose
// objects the copy put where its manifest says keeps its manifest byte for
// byte, and so its signature (and no copied_at); otherwise the copy is not
// signed, and warn says so.
func writeCopies(ctx context.Context, sign *signing.PrivateKey, sinks []*endpoint, keys map[int]string, sp *streamsPlan, res *engine.Result, dd *manifest.Dedup, wrote *[]wroteManifest, warn func(string)) ([]string, error) {
	orig := sp.from.Manifest
	byStream := map[string]manifest.Object{}
	for _, o := range orig.Objects {
		byStream[o.Stream] = o
	}
	var written []string
	for i := range sinks {
		mkey, ok := keys[i]
		if !ok {
			continue
		}
		m := *orig
		m.Objects, m.RunKey = nil, nil
		m.CopiedAt = time.Now().UTC()
		if dd != nil {
			m.Dedup = relative(dd, mkey) // the lists name the target's packs
		}
		for k, r := range res.Streams {
			st := sp.streams[k]
			if st.runKey {
				m.RunKey = &manifest.RunKey{Key: manifest.Rel(mkey, r.Objects[i].Key), Size: r.Written, Digest: r.Observed[stagekind.Checksum.Name]}
				continue
			}
			o := byStream[st.name]
			o.Key, o.Size, o.Digest = manifest.Rel(mkey, r.Objects[i].Key), r.Written, r.Observed[stagekind.Checksum.Name]
			m.Objects = append(m.Objects, o)
		}
		b := []byte(nil)
		if sign == nil {
			if b = copyAsIs(m, orig, sp.raw); b != nil {
				m.CopiedAt = orig.CopiedAt
			} else if sp.raw != nil {
				warn(fmt.Sprintf("sink %s: the copy of run %s is not signed: its objects are not where its signed manifest says, so the copy's manifest differs from the one its signature covers; add sign { key } to the copying pipeline to sign the copy", sinks[i].name, orig.RunID))
			}
		}
		if b == nil {
			var err error
			if b, err = encodeManifest(&m, sign); err != nil {
				return nil, fmt.Errorf("sink %s: the copy's manifest: %w", sinks[i].name, err)
			}
		}
		if err := putManifest(ctx, sinks, keys, i, &m, b, "the copy's manifest", &written, wrote); err != nil {
			return nil, err
		}
	}
	return written, nil
}

// putManifest writes sink i's manifest m, encoded as b, at keys[i] and
// notes it in written and wrote; when it fails, the manifests written
// before it are taken back (a run is restorable from every sink or none).
// what names the manifest in the error.
func putManifest(ctx context.Context, sinks []*endpoint, keys map[int]string, i int, m *manifest.Manifest, b []byte, what string, written *[]string, wrote *[]wroteManifest) error {
	mkey := keys[i]
	if err := put(ctx, sinks[i].sink, mkey, b); err != nil {
		removeAll(ctx, sinks, keys, *written)
		return fmt.Errorf("sink %s: writing %s %s: %w", sinks[i].name, what, mkey, err)
	}
	*written = append(*written, mkey)
	*wrote = append(*wrote, wroteManifest{sink: i, key: mkey, m: m, size: int64(len(b))})
	return nil
}

// wroteManifest is a manifest a run wrote, for the stores' indexes.
type wroteManifest struct {
	sink int
	key  string
	m    *manifest.Manifest
	size int64
}

// updateIndexes adds the run to the index of each store of runs it wrote
// to (see catalog.Index). A failure costs the next listing speed, not the
// backup: it is a warning.
func updateIndexes(ctx context.Context, sinks []*endpoint, wrote []wroteManifest, warn func(string)) {
	for _, w := range wrote {
		s := sinks[w.sink]
		i := strings.Index(w.key, w.m.RunID)
		if i < 0 {
			continue // not a store of runs: one run in its place
		}
		root := w.key[:i]
		st := sinkStore{st: s.sink.(sdk.Storage), sink: s.sink, root: root}
		e := catalog.NewEntry(strings.TrimPrefix(w.key, root), w.size, w.m)
		if err := catalog.UpdateIndex(ctx, st, []catalog.Entry{e}, nil); err != nil {
			warn(fmt.Sprintf("sink %s: %v; listings read the manifests instead (the backup is complete)", s.name, err))
		}
	}
}

// prepare tells the sinks that want it every object of the run, in order,
// and, for a partial run, the streams that failed in the backup. It
// returns those of them a sink asked for (see sdk.PartialPreparer): every
// one that a sink which cannot tell would have restored.
func prepare(ctx context.Context, sinks []*endpoint, job *engine.Job, failed []string) (missing []string, err error) {
	wanted := make([]bool, len(failed))
	for i, s := range sinks {
		objs := make([]sdk.Object, 0, len(job.Streams))
		for _, st := range job.Streams {
			objs = append(objs, st.Objects[i])
		}
		var w []bool
		if pp, ok := s.sink.(sdk.PartialPreparer); ok && len(failed) > 0 {
			if w, err = pp.PreparePartial(ctx, objs, failed); err != nil {
				return nil, fmt.Errorf("sink %s: %w", s.name, err)
			}
		} else if p, ok := s.sink.(sdk.Preparer); ok {
			if err := p.Prepare(ctx, objs); err != nil {
				return nil, fmt.Errorf("sink %s: %w", s.name, err)
			}
		}
		for j := range wanted {
			wanted[j] = wanted[j] || len(w) != len(failed) || w[j]
		}
	}
	for j, f := range failed {
		if wanted[j] {
			missing = append(missing, f)
		}
	}
	return missing, nil
}

func put(ctx context.Context, s sdk.Sink, key string, b []byte) error {
	return putObject(ctx, s, sdk.Object{Key: key, Stream: path.Base(key), Size: int64(len(b))}, b)
}

// replace writes b at key over what is there (a store's index).
func replace(ctx context.Context, s sdk.Sink, key string, b []byte) error {
	return putObject(ctx, s, sdk.Object{Key: key, Stream: path.Base(key), Size: int64(len(b)), Replace: true}, b)
}

func putObject(ctx context.Context, s sdk.Sink, obj sdk.Object, b []byte) error {
	w, err := s.Create(ctx, obj)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		w.Abort(ctx)
		return err
	}
	if err := w.Commit(ctx); err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return err
	}
	if f, ok := s.(sdk.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

// removeAll takes back manifests already written when a later one failed.
func removeAll(ctx context.Context, sinks []*endpoint, keys map[int]string, written []string) {
	done := map[string]bool{}
	for _, k := range written {
		done[k] = true
	}
	for i, s := range sinks {
		if k, ok := keys[i]; ok && done[k] {
			if rm, ok := s.sink.(sdk.Remover); ok {
				_ = rm.Remove(context.WithoutCancel(ctx), k)
			}
		}
	}
}
