package runner

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// stream is one stream as the run names it.
type stream struct {
	source  string // name in the source
	name    string // name for sinks and the manifest
	ext     string // extension of what the sinks receive
	size    int64  // source size, or -1
	outSize int64  // size the sinks receive if known, or -1
	maxSize int64  // bound of what the sinks receive, or -1
	digest  string // recorded digest to verify (restore), or ""
	runKey  bool   // a copied run's key object (not one of its objects)
}

// maxStored bounds what encoding stages make of n source bytes (each
// stage's kind knows its own bound; a decoding stage's is unknown).
func maxStored(p *plan.Pipeline, n int64) int64 {
	if n < 0 {
		return -1
	}
	for _, s := range p.Stages {
		if n = s.MaxOut(n); n < 0 {
			return -1
		}
	}
	return n
}

type streamsPlan struct {
	streams     []stream
	manifestKey string
	// from is the run read through its manifest, if any; copy is set when
	// the pipeline copies it unchanged into stores (no stage transforms
	// it): the copy is a complete run of its own there, with the same id.
	from *catalog.Run
	// cat is the store from was chosen in, when the source was read as
	// runs: a run that builds on others finds them there.
	cat   *catalog.Catalog
	copy  bool
	codec string // decompress codec when "auto"
	frame int
	total int64
	// raw is the read run's manifest as stored, when the run read it
	// again (see checkSignature); signer the fingerprint of the trusted
	// key that signed it, when the pipeline trusts keys.
	raw    []byte
	signer string
}

// planStreams decides what the run reads. A storage source (files, a
// bucket) that names a folder or prefix is read as runs: the newest
// complete run's objects (its manifest says what they are and how to
// verify them), never objects that no manifest names. One object named on
// purpose is read as it is (or, if it is a manifest, as that run). Other
// sources' streams are read as they are. copying says whether the run
// copies a run it reads (see copies).
func planStreams(ctx context.Context, p *plan.Pipeline, src *endpoint, infos []sdk.StreamInfo, sel catalog.Selection, copying bool, warn func(string)) (*streamsPlan, error) {
	for _, in := range infos {
		if err := sdk.CheckStreamName(in.Name); err != nil {
			return nil, fmt.Errorf("source %s yields a stream pipe cannot name: %w; rename it (or, for a command, set its name)", src.name, err)
		}
	}
	sp := &streamsPlan{}
	single := false
	if sel, ok := src.source.(sdk.Selection); ok {
		single = sel.Single()
	}
	storage := src.def != nil && src.def.Schema.Storage
	var err error
	switch {
	case storage && single && len(infos) == 1 && manifest.IsKey(infos[0].Name):
		var r *catalog.Run
		if r, err = namedRun(ctx, src, infos[0].Name, sel); err == nil {
			if r, err = checkSignature(ctx, src, r, sp, p.Trust, fmt.Sprintf("pipeline %q", p.Name), copying, warn); err != nil {
				err = fmt.Errorf("source %s: %w", src.name, err)
			} else {
				err = fromManifest(ctx, p, src, r, sp, copying)
			}
		}
	case storage && !single:
		err = fromRuns(ctx, p, src, infos, sel, sp, copying, warn)
	default:
		err = fromSource(p, src, infos, sp, warn)
	}
	if err != nil {
		return nil, err
	}
	if p.Trust != nil && sp.from == nil {
		return nil, fmt.Errorf("source %s holds no run (%s): pipeline %q has trust { keys }, and only a run's signed manifest can say its objects are yours; nothing is read", src.name, where(src), p.Name)
	}
	if len(sp.streams) == 0 {
		return nil, fmt.Errorf("source %s yields no streams: nothing to back up; check its %s", src.name, where(src))
	}
	sp.total = 0
	for _, s := range sp.streams {
		if s.size < 0 {
			sp.total = -1
			break
		}
		sp.total += s.size
	}
	return sp, nil
}

// namedRun reads the run whose manifest a storage source names (key), and
// checks that it is the run sel asks for.
func namedRun(ctx context.Context, src *endpoint, key string, sel catalog.Selection) (*catalog.Run, error) {
	m, err := catalog.ReadManifest(ctx, src.source, key)
	if err != nil {
		return nil, fmt.Errorf("source %s: manifest %s: %w", src.name, key, err)
	}
	r := &catalog.Run{Key: key, Manifest: m}
	if sel.RunID != "" && sel.RunID != m.RunID {
		return nil, fmt.Errorf("source %s names the manifest of run %s, not of run %s", src.name, m.RunID, sel.RunID)
	}
	if sel.Pipeline != "" && sel.Pipeline != m.Pipeline {
		return nil, fmt.Errorf("source %s names a run of pipeline %q, not of %q", src.name, m.Pipeline, sel.Pipeline)
	}
	if t := sel.Target; t != nil {
		if ok, why := t.Reaches(r); !ok {
			return nil, fmt.Errorf("source %s names run %s, which cannot be recovered to %s: %s, after the target, and a recovery replays forward from the end of the backup it restores (the server would refuse to start); point the source at the folder or prefix of all runs to restore the newest that can (pipe backups lists them), or choose a later target", src.name, m.RunID, t, why)
		}
	}
	return r, nil
}

// fromRuns reads a storage source's folder or prefix as runs: the run sel
// picks (the newest complete one unless it says otherwise), through its
// manifest; or, for a backup of a folder that holds no run, its files as
// they are.
func fromRuns(ctx context.Context, p *plan.Pipeline, src *endpoint, infos []sdk.StreamInfo, sel catalog.Selection, sp *streamsPlan, copying bool, warn func(string)) error {
	cat, err := catalog.Read(ctx, sourceStore{src.source, infos})
	if err != nil {
		return fmt.Errorf("source %s: %w", src.name, err)
	}
	for _, bad := range cat.Invalid {
		if sel.RunID == "" {
			return fmt.Errorf("source %s: manifest %s: %w; remove it, or choose a run (run = \"…\", or point the source at one run's folder or manifest)", src.name, bad.Key, bad.Err)
		}
		warn(fmt.Sprintf("source %s: manifest %s is not valid, its run is left out: %v", src.name, bad.Key, bad.Err))
	}
	if len(cat.Runs) == 0 {
		if p.Restores() || len(infos) == 0 {
			return noRun(src, cat)
		}
		// A backup of a folder of files.
		return fromListing(p, infos, sp)
	}
	r, err := cat.Select(sel)
	if err != nil {
		return fmt.Errorf("source %s (%s): %w", src.name, where(src), err)
	}
	if sel.RunID == "" && sel.Before.IsZero() && sel.Target == nil {
		for _, g := range cat.Newer(r.Manifest.StartedAt) {
			warn(fmt.Sprintf("run %s under the source looks incomplete (%s, %s, no manifest: it did not finish, or is still running); restoring the newest complete run, %s", g.RunID, plan.Plural(len(g.Objects), "object"), pipefile.HumanSize(g.Size), r.Manifest.RunID))
		}
	}
	sp.cat = cat
	// The run chosen, and only it, is checked: a newest run that fails is
	// an error, never a reason to read an older one instead.
	if r, err = checkSignature(ctx, src, r, sp, p.Trust, fmt.Sprintf("pipeline %q", p.Name), copying, warn); err != nil {
		return fmt.Errorf("source %s: %w", src.name, err)
	}
	return fromManifest(ctx, p, src, r, sp, copying)
}

// fromSource reads the streams of a source that is not read as runs as
// they are; a restore is warned that nothing verifies them.
func fromSource(p *plan.Pipeline, src *endpoint, infos []sdk.StreamInfo, sp *streamsPlan, warn func(string)) error {
	if err := fromListing(p, infos, sp); err != nil {
		return err
	}
	if p.Restores() && len(infos) > 0 {
		what := fmt.Sprintf("%d streams of source %s", len(infos), src.name)
		if len(infos) == 1 {
			what = fmt.Sprintf("%s of source %s", infos[0].Name, src.name)
		}
		warn(fmt.Sprintf("reading %s as it is: no manifest names it, so nothing verifies it", what))
	}
	return nil
}

// selection is the run the pipeline's source asks for, with what the
// command line says beating it.
func selection(p *plan.Pipeline, over catalog.Selection) catalog.Selection {
	var sel catalog.Selection
	if p.Source != nil {
		sel = p.Source.Selection
	}
	if over.RunID != "" {
		sel.RunID, sel.Before = over.RunID, time.Time{}
	}
	if !over.Before.IsZero() {
		sel.Before, sel.RunID = over.Before, ""
	}
	if over.Pipeline != "" {
		sel.Pipeline = over.Pipeline
	}
	return sel
}

// sourceStore lets the catalog read a storage source: its streams are the
// objects under its folder or prefix.
type sourceStore struct {
	src   sdk.Source
	infos []sdk.StreamInfo
}

func (s sourceStore) List(context.Context) ([]sdk.ObjectInfo, error) {
	out := make([]sdk.ObjectInfo, 0, len(s.infos))
	for _, in := range s.infos {
		out = append(out, sdk.ObjectInfo{Key: in.Name, Size: in.Size})
	}
	return out, nil
}

func (s sourceStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.src.Open(ctx, key)
}

// noRun explains a restore from a folder or prefix that holds no complete
// run, and how to read an object anyway.
func noRun(src *endpoint, cat *catalog.Catalog) error {
	if len(cat.Objects) == 0 {
		return fmt.Errorf("source %s holds nothing to restore: no manifest and no object under %s; check the path or prefix (a backup writes each run under its own folder, e.g. backups/<pipeline>/<run id>/)", src.name, where(src))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "source %s (%s) holds no complete run: %s, and no manifest names them", src.name, where(src), plan.Plural(len(cat.Objects), "object"))
	for _, g := range cat.Incomplete {
		if g.RunID == "" {
			continue
		}
		fmt.Fprintf(&b, "; run %s (started %s, %s, %s) has no manifest: it did not finish, or is still running", g.RunID, catalog.TimeText(g.Started), plan.Plural(len(g.Objects), "object"), pipefile.HumanSize(g.Size))
	}
	first := cat.Objects[0].Key
	return fmt.Errorf("%s. pipe restores only runs whose manifest it finds (%w). To read one object on purpose, name it in the source (path = \"…/%s\" for fs; key = \"%s\" for s3, gcs and azure): nothing will verify it", b.String(), catalog.ErrNoRun, first, first)
}

// fromManifest reads run r through its manifest: its objects, each
// checked against the pipeline's decrypt stage unless the run copies
// them as they are (copying), and their codec.
func fromManifest(ctx context.Context, p *plan.Pipeline, src *endpoint, r *catalog.Run, sp *streamsPlan, copying bool) error {
	m := r.Manifest
	sp.manifestKey, sp.from = r.Key, r
	sp.frame = int(m.FrameSize)
	if m.RunKey != nil && !copying {
		if err := openRunKey(ctx, p, sourceStore{src: src.source}, r); err != nil {
			return err
		}
	}
	dec, decomp := p.Stage(stagekind.Decrypt.Name), p.Stage(stagekind.Decompress.Name)
	if m.Dedup != nil {
		return fromDedupManifest(p, r, sp, copying, dec, decomp)
	}
	codecs := map[string]bool{}
	for _, o := range m.Objects {
		codecs[o.Codec] = true
		key := r.ObjectKey(o)
		if key == ".." || strings.HasPrefix(key, "../") {
			return fmt.Errorf("manifest %s: object %q lies outside the source", sp.manifestKey, o.Key)
		}
		// A copy's objects go as they are: encrypted ones stay so.
		if !copying {
			if err := checkDecrypt(p, sp.manifestKey, o, dec, m.RunKey != nil); err != nil {
				return err
			}
		}
		sp.streams = append(sp.streams, objectStream(p, key, o, dec, decomp))
	}
	return runCodec(sp, codecs, decomp)
}

// checkDecrypt says what the pipeline's decrypt stage (dec, nil without
// one) lacks to open object o of the run whose manifest is at mkey;
// passphrase says whether the run was encrypted with a passphrase.
func checkDecrypt(p *plan.Pipeline, mkey string, o manifest.Object, dec *plan.Stage, passphrase bool) error {
	switch {
	case o.Encryption != "" && dec == nil && passphrase:
		return fmt.Errorf("the backup in %s is encrypted with a passphrase: add decrypt { passphrase = env(\"PIPE_PASSPHRASE\") } to pipeline %q", mkey, p.Name)
	case o.Encryption != "" && dec == nil:
		return fmt.Errorf("the backup in %s is encrypted (recipients %s): add decrypt { identities = [file(\"keys/backup.key\")] } to pipeline %q", mkey, strings.Join(o.Recipients, ", "), p.Name)
	case o.Encryption == "" && dec != nil:
		return fmt.Errorf("the backup in %s is not encrypted: remove the decrypt stage from pipeline %q", mkey, p.Name)
	case dec != nil && dec.Keys.Passphrase() && !anyShared(dec.Keys.Fingerprints, o.Recipients):
		return fmt.Errorf("%s was encrypted to keys (%s), not to a passphrase: give decrypt { identities = [file(\"keys/backup.key\")] } with one of their identity files", o.Key, strings.Join(o.Recipients, ", "))
	case dec != nil && !anyShared(dec.Keys.Fingerprints, o.Recipients):
		return fmt.Errorf("wrong key: %s was encrypted to %s, and decrypt holds %s; use the identity file of one of those recipients", o.Key, strings.Join(o.Recipients, ", "), strings.Join(dec.Keys.Fingerprints, ", "))
	}
	return nil
}

// objectStream is object o of a run, at key in the source, as the run
// reads it: under its stream's name, with the extensions of what no stage
// decodes, and of the size it had before the backup encoded it when the
// stages decode all of it.
func objectStream(p *plan.Pipeline, key string, o manifest.Object, dec, decomp *plan.Stage) stream {
	ext := ""
	if c, ok := compress.Lookup(o.Codec); ok && decomp == nil {
		ext = c.Ext
	}
	if o.Encryption != "" && dec == nil {
		ext += encrypt.Ext
	}
	s := stream{source: key, name: o.Stream, ext: ext + p.Ext(), size: o.Size, outSize: -1, maxSize: -1, digest: o.Digest}
	if (o.Codec == "none" || decomp != nil) && (o.Encryption == "" || dec != nil) && p.Ext() == "" {
		s.outSize, s.maxSize = o.OriginalSize, o.OriginalSize
	}
	return s
}

// runCodec is the codec of a run's objects (codecs), which must be one,
// and the one a decompress stage that names its codec names.
func runCodec(sp *streamsPlan, codecs map[string]bool, decomp *plan.Stage) error {
	if len(codecs) > 1 {
		return fmt.Errorf("manifest %s mixes codecs (%s); restore them in separate runs", sp.manifestKey, strings.Join(slices.Sorted(maps.Keys(codecs)), ", "))
	}
	for c := range codecs {
		if decomp != nil && decomp.Codec != "auto" && decomp.Codec != c {
			return fmt.Errorf("decompress { codec = %q } but the backup in %s is %s: drop codec to take it from the manifest", decomp.Codec, sp.manifestKey, c)
		}
		sp.codec = c
	}
	return nil
}

func anyShared(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// fromListing reads the source's streams as they are. Decoding stages take
// their extension off a stream's name; encoding stages add theirs.
func fromListing(p *plan.Pipeline, infos []sdk.StreamInfo, sp *streamsPlan) error {
	decomp := p.Stage(stagekind.Decompress.Name)
	codecs := map[string][]string{}
	sizeKept := true
	for _, s := range p.Stages {
		if !s.KeepsSize() {
			sizeKept = false
		}
	}
	for _, in := range infos {
		name, ext := in.Name, ""
		for _, s := range p.Stages {
			switch {
			case s.Decodes():
				var codec string
				var err error
				if name, codec, err = s.Strip(name, in.Name); err != nil {
					return err
				}
				if codec != "" {
					codecs[codec] = append(codecs[codec], in.Name)
				}
			default:
				ext += s.Ext()
			}
		}
		st := stream{source: in.Name, name: name, ext: ext, size: in.Size, outSize: -1, maxSize: maxStored(p, in.Size)}
		if sizeKept {
			st.outSize = in.Size
		}
		sp.streams = append(sp.streams, st)
	}
	if len(codecs) > 1 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(codecs)) {
			parts = append(parts, fmt.Sprintf("%s (%s)", c, codecs[c][0]))
		}
		return fmt.Errorf("the streams use different codecs: %s; restore them in separate runs or set decompress { codec = … }", strings.Join(parts, ", "))
	}
	for c := range codecs {
		sp.codec = c
	}
	if decomp != nil && decomp.Codec != "auto" {
		sp.codec = decomp.Codec
	}
	return nil
}

// skipDeclined drops from the job the streams every sink declined (see
// sdk.Chooser): they are not read at all. It returns their names.
func skipDeclined(sinks []*endpoint, job *engine.Job, sp *streamsPlan) []string {
	declined := make([]int, len(job.Streams)) // sinks that decline each stream
	for i, s := range sinks {
		c, ok := s.sink.(sdk.Chooser)
		if !ok {
			return nil // a sink that does not choose wants everything
		}
		objs := make([]sdk.Object, 0, len(job.Streams))
		for _, st := range job.Streams {
			objs = append(objs, st.Objects[i])
		}
		d := c.Declines(objs)
		if len(d) != len(objs) {
			return nil
		}
		for j, no := range d {
			if no {
				declined[j]++
			}
		}
	}
	return dropStreams(job, sp, func(j int) bool { return declined[j] == len(sinks) && len(sinks) > 0 })
}

// skipIncomplete drops from a restore's job the streams of each group
// (the streams named <group>/…, see sdk.Independent) of which a stream
// failed in the backup: a database read table by table restores all of
// its tables or none. It returns their names.
func skipIncomplete(job *engine.Job, sp *streamsPlan, failed []manifest.Failed) []string {
	groups := map[string]bool{}
	for _, f := range failed {
		if g, ok := sdk.StreamGroup(f.Stream); ok {
			groups[g] = true
		}
	}
	if len(groups) == 0 {
		return nil
	}
	return dropStreams(job, sp, func(j int) bool {
		g, ok := sdk.StreamGroup(sp.streams[j].name)
		return ok && groups[g]
	})
}

// dropStreams drops from the job the streams drop picks (by index) and
// returns their names.
func dropStreams(job *engine.Job, sp *streamsPlan, drop func(j int) bool) []string {
	var dropped []string
	keep := job.Streams[:0]
	keepPlan := sp.streams[:0]
	for j, st := range job.Streams {
		if drop(j) {
			dropped = append(dropped, sp.streams[j].name)
			if sp.total >= 0 && sp.streams[j].size >= 0 {
				sp.total -= sp.streams[j].size
			}
			continue
		}
		keep = append(keep, st)
		keepPlan = append(keepPlan, sp.streams[j])
	}
	job.Streams, sp.streams = keep, keepPlan
	return dropped
}
