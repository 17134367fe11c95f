package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/stages/checksum"
	"github.com/pipebackup/pipe/stages/dedup"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
	"github.com/pipebackup/pipe/wal"
)

// VerifyOptions say what pipe verify checks.
type VerifyOptions struct {
	// RunID, Last and All choose the runs: one by id, the newest Last, or
	// all; by default the newest. Only runs of the store's pipeline count
	// when the store is a sink's.
	RunID string
	Last  int
	All   bool
	// Sample is the percentage of each run's objects to read (0 or 100:
	// every object), chosen at random, at least one.
	Sample float64
	// Decode, when set, is a restore pipeline whose decrypt and decompress
	// stages decode every object to nowhere as well: age authenticates
	// every 64 KiB, zstd checks its frames. Without it nothing needs a key.
	Decode *plan.Pipeline
	// Plan gives the numbers of the job (chunk size, streams at once).
	Plan *plan.Pipeline
	// Progress, when set, watches each run's engine.
	Progress Progress
	// WAL, when set, is the WAL archive a base backup's run needs: verify
	// checks it holds every segment from the backup's start to its end.
	// WALWhere names it in messages; without WAL a base backup's WAL is
	// reported unchecked.
	WAL      func(context.Context) (*wal.Listing, error)
	WALWhere string
	// Trust, when set, are the keys one of which must have signed each
	// run's manifest: a run none signed is bad, and its objects are not
	// read (its manifest cannot say what they should be). Who names whose
	// keys they are, in messages.
	Trust signing.Trust
	Who   string
	// seen are the chunks of deduplicated runs checked already: the runs
	// of a store share them, and each is read once.
	seen *dedup.Seen
}

// seenChunks bounds the chunks verify remembers it checked (about 120
// bytes each: 12 MiB).
const seenChunks = 100_000

// VerifyReport is what pipe verify found.
type VerifyReport struct {
	Store    string      `json:"store"`
	Runs     []RunVerify `json:"runs"`
	Objects  int         `json:"objects"`
	Bad      int         `json:"bad"`
	Bytes    int64       `json:"bytes"`
	Decoded  bool        `json:"decoded"`
	Started  time.Time   `json:"started"`
	Finished time.Time   `json:"finished"`

	// Signatures says each run's manifest signature was checked (see
	// VerifyOptions.Trust).
	Signatures bool `json:"signatures_checked,omitempty"`
}

// OK reports whether every object checked is good.
func (r *VerifyReport) OK() bool { return r.Bad == 0 && len(r.Runs) > 0 }

// RunVerify is one run's result.
type RunVerify struct {
	RunID    string         `json:"run_id"`
	Pipeline string         `json:"pipeline"`
	Manifest string         `json:"manifest"`
	Objects  []ObjectVerify `json:"objects"`
	Bad      int            `json:"bad"`
	// Error is a failure of the whole run (its key would not open).
	Error string `json:"error,omitempty"`
	// WAL is what the archive holds of a base backup's WAL.
	WAL *WALVerify `json:"wal,omitempty"`
	// Damage is what the source found damaged when it read the run's
	// data (see manifest.Damage): the run counts as bad.
	Damage string `json:"damage,omitempty"`
	// SignedBy is the fingerprint of the trusted key that signed the
	// run's manifest, when verify checks signatures.
	SignedBy string `json:"signed_by,omitempty"`
	// NeededBy, for a run verify checks because a run it was asked to
	// check builds on it (see sdk.Chainer), names that run.
	NeededBy string `json:"needed_by,omitempty"`
	// Chain says why the run cannot be restored: a run it builds on is
	// missing, partial or damaged.
	Chain string `json:"chain_error,omitempty"`
}

// WALVerify is what the archive holds of the WAL a base backup needs.
type WALVerify struct {
	// First and Last name the segments the backup needs, both included.
	First string `json:"first"`
	Last  string `json:"last"`
	// Checked is false when there was no archive to check.
	Checked bool `json:"checked"`
	// Missing names missing segments (the first ones), MissingCount counts
	// them all.
	Missing      []string `json:"missing,omitempty"`
	MissingCount uint64   `json:"missing_count,omitempty"`
	// GapsAfter are the segments missing from the archive after the
	// backup: a recovery to the end of the archive would stop at the
	// first as if the archive ended there.
	GapsAfter []wal.TimelineGap `json:"gaps_after,omitempty"`
	Error     string            `json:"error,omitempty"`
}

// OK reports whether the backup's WAL is all there (or was not checked),
// and nothing is missing after it.
func (w *WALVerify) OK() bool { return w.Error == "" && w.MissingCount == 0 && len(w.GapsAfter) == 0 }

// checkWAL checks the archive holds a base backup's WAL; nil when the run
// is not a base backup.
func checkWAL(ctx context.Context, m *manifest.Manifest, o VerifyOptions) *WALVerify {
	r, ok, err := wal.BackupRange(m.Source)
	if !ok {
		return nil
	}
	if err != nil {
		return &WALVerify{Error: err.Error()}
	}
	if !r.Complete() {
		return &WALVerify{Error: "the manifest records no end position: the backup did not finish"}
	}
	wv := &WALVerify{}
	wv.First, wv.Last = r.Names()
	if o.WAL == nil {
		return wv
	}
	l, err := o.WAL(ctx)
	if err != nil {
		wv.Error = err.Error()
		return wv
	}
	wv.Checked = true
	wv.Missing, wv.MissingCount = l.Missing(r, 10)
	wv.GapsAfter = l.GapsAfter(r)
	if wv.MissingCount > 0 {
		wv.Error = fmt.Sprintf("%s of the %s … %s this backup needs missing from %s, first %s: recovery from it cannot reach a consistent state",
			plan.Plural(int(wv.MissingCount), "segment"), wv.First, wv.Last, o.WALWhere, strings.Join(wv.Missing, ", "))
	}
	return wv
}

// ObjectVerify is one object's result.
type ObjectVerify struct {
	Key    string `json:"key"`
	Stream string `json:"stream"`
	Size   int64  `json:"size"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

// Verify reads runs' stored bytes from a store and checks each object's
// size and SHA-256 against its manifest (and, with Decode, decrypts and
// decodes it), naming every bad object. Objects are checked independently:
// one bad object stops none of the others.
func Verify(ctx context.Context, s *Store, o VerifyOptions) (*VerifyReport, error) {
	o.seen = dedup.NewSeen(seenChunks)
	rep := &VerifyReport{Store: s.Where(), Started: time.Now().UTC(), Decoded: o.Decode != nil, Signatures: o.Trust != nil}
	defer func() { rep.Finished = time.Now().UTC() }()
	runs, cat, err := chooseRuns(ctx, s, o)
	if err != nil {
		return rep, err
	}
	runs, neededBy, broken := withParents(cat, runs)
	defer func() {
		// A run whose chain is broken is bad, its own objects checked
		// all the same.
		for i := range rep.Runs {
			if err := broken[rep.Runs[i].Manifest]; err != nil {
				rep.Runs[i].Chain = err.Error()
				rep.Runs[i].Bad++
				rep.Bad++
			}
		}
	}()
	for _, r := range runs {
		signer := ""
		if o.Trust != nil {
			tr, _, fp, err := trustedRun(ctx, s, r, o.Trust, o.Who)
			switch {
			case errors.Is(err, ErrUntrustedRun):
				rep.Runs = append(rep.Runs, RunVerify{RunID: r.Manifest.RunID, Pipeline: r.Manifest.Pipeline, Manifest: r.Key, Bad: 1, Error: err.Error()})
				rep.Bad++
				continue
			case err != nil:
				return rep, err
			}
			r, signer = tr, fp
		}
		rv, err := verifyRun(ctx, s, r, o)
		if err != nil {
			return rep, err
		}
		rv.SignedBy, rv.NeededBy = signer, neededBy[r.Key]
		rep.Runs = append(rep.Runs, *rv)
		for _, ov := range rv.Objects {
			rep.Objects++
			if ov.OK {
				rep.Bytes += ov.Size
			}
		}
		rep.Bad += rv.Bad
	}
	return rep, nil
}

// chooseRuns reads the store's catalog and picks the runs to verify,
// newest first; it returns the catalog too.
func chooseRuns(ctx context.Context, s *Store, o VerifyOptions) ([]*catalog.Run, *catalog.Catalog, error) {
	cat, err := catalog.Read(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	var runs []*catalog.Run
	for _, r := range cat.Runs {
		if s.Kind == "sink" && r.Manifest.Pipeline != s.Pipeline {
			continue
		}
		runs = append(runs, r)
	}
	if o.RunID != "" {
		for _, r := range runs {
			if r.Manifest.RunID == o.RunID {
				return []*catalog.Run{r}, cat, nil
			}
		}
		for _, bad := range cat.Invalid {
			return nil, nil, fmt.Errorf("%s holds no complete run %s; manifest %s is not valid: %w", s.Where(), o.RunID, bad.Key, bad.Err)
		}
		return nil, nil, fmt.Errorf("%s holds no complete run %s (pipe backups lists its runs)", s.Where(), o.RunID)
	}
	if len(runs) == 0 {
		if len(cat.Invalid) > 0 {
			return nil, nil, fmt.Errorf("%s holds no valid run: manifest %s: %w", s.Where(), cat.Invalid[0].Key, cat.Invalid[0].Err)
		}
		return nil, nil, fmt.Errorf("%s holds no complete run", s.Where())
	}
	switch {
	case o.All:
		return runs, cat, nil
	case o.Last > 0:
		return runs[:min(o.Last, len(runs))], cat, nil
	}
	return runs[:1], cat, nil
}

// withParents adds to runs every run one of them builds on (see
// sdk.Chainer), back to its full, after the last that needs it: a run
// restores only if they do. It says which run needs each run it added,
// and why each run whose chain is broken cannot be restored, by key.
func withParents(cat *catalog.Catalog, runs []*catalog.Run) ([]*catalog.Run, map[string]string, map[string]error) {
	in := map[string]bool{}
	for _, r := range runs {
		in[r.Key] = true
	}
	neededBy := map[string]string{}
	broken := map[string]error{}
	out := runs
	for _, r := range runs {
		chain, err := cat.Chain(r)
		if err != nil {
			broken[r.Key] = err
		}
		for _, p := range chain[1:] {
			if !in[p.Key] {
				in[p.Key] = true
				neededBy[p.Key] = r.Manifest.RunID
				out = append(out, p)
			}
		}
	}
	return out, neededBy, broken
}

// verifyRun checks one run's objects in one engine job whose streams are
// kept apart.
func verifyRun(ctx context.Context, s *Store, r *catalog.Run, o VerifyOptions) (*RunVerify, error) {
	m := r.Manifest
	rv := &RunVerify{RunID: m.RunID, Pipeline: m.Pipeline, Manifest: r.Key}
	objs := sample(m.Objects, o.Sample)
	p := o.Plan
	job := &engine.Job{Source: s.Source(), ChunkSize: p.ChunkSize, Parallel: p.Streams, Depth: p.Depth, Isolate: true,
		Sinks: []engine.Sink{{Name: "discard", Sink: discard{}}}}
	if m.Dedup != nil {
		if err := dedupVerify(ctx, s, r, o, job); err != nil {
			return failedRun(rv, r, objs, err), nil
		}
	} else if o.Decode != nil {
		d, err := decodeJob(ctx, s, r, o.Decode)
		if err != nil {
			return failedRun(rv, r, objs, err), nil
		}
		job.Stages, job.ChunkSize, job.Parallel, job.Depth = d.Stages, d.ChunkSize, d.Parallel, d.Depth
	}
	type check struct {
		key, stream string
		size        int64
	}
	var checks []check
	add := func(key, stream, digest string, size int64) error {
		v, err := checksum.Verify(digest, fmt.Sprintf("object %q", key))
		if err != nil {
			return err
		}
		job.Streams = append(job.Streams, engine.Stream{Name: key, Size: size,
			Checks:  []engine.Observation{&sizeCheck{want: size, what: fmt.Sprintf("object %q", key)}, v},
			Objects: []sdk.Object{{Key: key, Stream: stream, Size: -1, MaxSize: -1}}})
		checks = append(checks, check{key, stream, size})
		return nil
	}
	for _, ob := range objs {
		if err := add(r.ObjectKey(ob), ob.Stream, ob.Digest, ob.Size); err != nil {
			return nil, err
		}
	}
	if k := m.RunKey; k != nil && o.Decode == nil {
		// Without the passphrase, the run's key object is checked as bytes
		// too (with it, opening it checked them).
		if err := add(manifest.Resolve(r.Key, k.Key), encrypt.RunKeyName, k.Digest, k.Size); err != nil {
			return nil, err
		}
	}
	run, err := engine.New(job)
	if err != nil {
		return nil, err
	}
	if o.Progress != nil {
		o.Progress.Start(m.RunID, -1, run)
	}
	res, err := run.Run(ctx)
	if o.Progress != nil {
		o.Progress.Stop()
	}
	if err != nil {
		return nil, err
	}
	for i, c := range checks {
		ov := ObjectVerify{Key: c.key, Stream: c.stream, Size: c.size, OK: true}
		if e := res.Streams[i].Err; e != nil {
			ov.OK, ov.Error = false, describeBad(e, c.key)
			rv.Bad++
		}
		rv.Objects = append(rv.Objects, ov)
	}
	if rv.WAL = checkWAL(ctx, m, o); rv.WAL != nil && !rv.WAL.OK() {
		rv.Bad++
	}
	if m.Damaged() {
		// The objects hold what the source sent, intact; what it sent
		// was damaged.
		rv.Damage = m.Damage
		rv.Bad++
	}
	return rv, nil
}

// failedRun is rv with objs bad for err: the run could not be checked.
func failedRun(rv *RunVerify, r *catalog.Run, objs []manifest.Object, err error) *RunVerify {
	rv.Error = err.Error()
	rv.Bad = len(objs)
	for _, ob := range objs {
		rv.Objects = append(rv.Objects, ObjectVerify{Key: r.ObjectKey(ob), Stream: ob.Stream, Size: ob.Size, Error: err.Error()})
	}
	return rv
}

// dedupVerify gives job, which checks a deduplicated run's chunk lists,
// the stage that checks the chunks they name: every blob's digest, or
// with --decrypt every chunk opened, with the restore pipeline's keys.
func dedupVerify(ctx context.Context, s *Store, r *catalog.Run, o VerifyOptions, job *engine.Job) error {
	m := r.Manifest
	if o.Decode == nil {
		st, err := dedupStage(r, s.Source(), nil, o.seen)
		job.Stages = []engine.Stage{st}
		return err
	}
	dec := o.Decode.Stage(stagekind.Decrypt.Name)
	var keys encrypt.Keys
	switch d := m.Dedup; {
	case d.Encryption != "" && dec == nil:
		return fmt.Errorf("run %s's chunks are encrypted (to %s), and pipeline %q, which --decrypt decodes with, has no decrypt stage: add decrypt { identities = [file(\"keys/backup.key\")] } with the key of one of those recipients", m.RunID, strings.Join(d.Recipients, ", "), o.Decode.Name)
	case d.Encryption == "" && dec != nil:
		return fmt.Errorf("run %s's chunks are not encrypted, and pipeline %q decrypts: verify it without --decrypt", m.RunID, o.Decode.Name)
	case dec != nil && !anyShared(dec.Keys.Fingerprints, d.Recipients):
		return fmt.Errorf("wrong key: run %s's chunks were encrypted to %s, and pipeline %q decrypts with %s", m.RunID, strings.Join(d.Recipients, ", "), o.Decode.Name, strings.Join(dec.Keys.Fingerprints, ", "))
	case dec != nil:
		keys = dec.Keys
	}
	st, err := dedupStage(r, s.Source(), &keys, nil)
	job.Stages = []engine.Stage{st}
	return err
}

// decodeJob is the restore pipeline's job for a run: its decrypt (with the
// run's key, for a passphrase backup) and decompress stages, for the
// run's codec.
func decodeJob(ctx context.Context, s *Store, r *catalog.Run, dp *plan.Pipeline) (*engine.Job, error) {
	m := r.Manifest
	dec := dp.Stage(stagekind.Decrypt.Name)
	encrypted := m.Objects[0].Encryption != ""
	switch {
	case encrypted && dec == nil:
		return nil, fmt.Errorf("run %s is encrypted (to %s), and pipeline %q, which --decrypt decodes with, has no decrypt stage: add decrypt { identities = [file(\"keys/backup.key\")] } with the key of one of those recipients before its decompress, or give the file that restores these backups", m.RunID, strings.Join(m.Objects[0].Recipients, ", "), dp.Name)
	case !encrypted && dec != nil:
		return nil, fmt.Errorf("run %s is not encrypted, and pipeline %q decrypts: verify it without --decrypt", m.RunID, dp.Name)
	}
	if dec != nil {
		saved := dec.Keys
		defer func() { dec.Keys = saved }() // the next run may have another key
		if m.RunKey != nil {
			if err := openRunKey(ctx, dp, s, r); err != nil {
				return nil, err
			}
		} else if !anyShared(dec.Keys.Fingerprints, m.Objects[0].Recipients) {
			return nil, fmt.Errorf("wrong key: run %s was encrypted to %s, and pipeline %q decrypts with %s: give its decrypt block the identity of one of those recipients (identities = [file(\"keys/backup.key\")]), or give the file whose restore pipeline holds it", m.RunID, strings.Join(m.Objects[0].Recipients, ", "), dp.Name, strings.Join(dec.Keys.Fingerprints, ", "))
		}
		return dp.Job(m.Objects[0].Codec, int(m.FrameSize))
	}
	return dp.Job(m.Objects[0].Codec, int(m.FrameSize))
}

// sample picks pct% of objs at random (at least one), in their order.
func sample(objs []manifest.Object, pct float64) []manifest.Object {
	if pct <= 0 || pct >= 100 || len(objs) == 0 {
		return objs
	}
	n := max(1, int(math.Ceil(float64(len(objs))*pct/100)))
	pick := rand.Perm(len(objs))[:n]
	keep := make([]bool, len(objs))
	for _, i := range pick {
		keep[i] = true
	}
	var out []manifest.Object
	for i, o := range objs {
		if keep[i] {
			out = append(out, o)
		}
	}
	return out
}

// describeBad says what is wrong with an object, from its stream's error
// (without the stream's name, which the report gives).
func describeBad(err error, key string) string {
	msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("stream %q: ", key))
	msg = strings.TrimPrefix(msg, fmt.Sprintf("object %q ", key))
	if errors.Is(err, sdk.ErrNotFound) {
		return "missing: " + msg
	}
	return msg
}

// sizeCheck fails a stream whose length is not the manifest's.
type sizeCheck struct {
	want, n int64
	what    string
}

func (c *sizeCheck) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

func (c *sizeCheck) Finish() (string, error) {
	switch {
	case c.n < c.want:
		return "", fmt.Errorf("%s is truncated: %d of its %d bytes are stored", c.what, c.n, c.want)
	case c.n > c.want:
		return "", fmt.Errorf("%s is %d bytes, the manifest says %d", c.what, c.n, c.want)
	}
	return "", nil
}

// discard is a sink that keeps nothing: what verify decodes goes nowhere.
type discard struct{}

func (discard) Create(context.Context, sdk.Object) (sdk.ObjectWriter, error) {
	return discardWriter{}, nil
}

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error)  { return len(p), nil }
func (discardWriter) Commit(context.Context) error { return nil }
func (discardWriter) Abort(context.Context) error  { return nil }

var _ io.Writer = discardWriter{}
