package sdk

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"time"
)

// StreamInfo describes one stream a Source yields.
type StreamInfo struct {
	// Name identifies the stream within its source. For files it is the
	// slash-separated path relative to the source's root.
	Name string
	// Size is the stream's length in bytes, or -1 when it is not known in
	// advance (a command's output, say).
	Size int64
}

// Source yields streams: a database dump, the files of a folder, the objects
// of a bucket.
type Source interface {
	// Streams lists the streams a run reads, in the order it should read them.
	Streams(ctx context.Context) ([]StreamInfo, error)
	// Open opens one stream for reading. name is a name Streams returned or,
	// for storage that a restore reads, any object key relative to the
	// source's root (a manifest names the objects it needs). It returns an
	// error wrapping ErrNotFound when there is no such stream.
	Open(ctx context.Context, name string) (io.ReadCloser, error)
}

// Object is one object a Sink writes: the stored form of one stream.
type Object struct {
	// Key is where the object goes, rendered by the host from the sink's
	// key attribute (see Attribute.Key). Sinks without a key attribute get
	// the stream's name.
	Key string
	// Stream is the name of the stream the object holds.
	Stream string
	// Size is the number of bytes that will be written, or -1 when unknown.
	// A sink may use it to preallocate; it must not rely on it.
	Size int64
	// MaxSize bounds the bytes that will be written when Size is unknown
	// (a compressed stream of a known source size), or -1. A sink may use
	// it to size its parts.
	MaxSize int64
	// Replace says the host replaces an object it keeps current (a
	// store's index): a sink that refuses to write over existing objects
	// writes over this one.
	Replace bool
	// Exclusive asks Commit to create the object only if no object exists
	// at Key, decided atomically by the store (an exclusive create, a
	// conditional write), never by a look first: of two writers racing
	// for one key exactly one commits, and the other's Commit fails with
	// an error wrapping ErrExists. pipe sets it only for sinks whose
	// Schema says ExclusiveCreate.
	Exclusive bool
}

// IndexName is the base name of the one object pipe writes more than
// once (Object.Replace): a store of runs' index, at the store's root. A
// sink that keeps versions reads it at its newest; every other object pipe
// writes once.
const IndexName = "pipe-index.json"

// Sink writes streams as objects.
type Sink interface {
	// Create starts one object. Nothing may be visible at obj.Key until
	// Commit succeeds. The ObjectWriter lives no longer than ctx.
	Create(ctx context.Context, obj Object) (ObjectWriter, error)
}

// ObjectWriter receives the bytes of one object. Its methods are called one
// at a time, except Abort, which may be called while a Write is blocked (to
// stop an object that is stuck).
type ObjectWriter interface {
	io.Writer
	// Commit makes the object visible at its key, durably. It is called
	// only when every byte of the stream arrived and every stage succeeded.
	// When Commit fails, pipe calls Abort next.
	Commit(ctx context.Context) error
	// Abort discards everything written. After Abort nothing is left at the
	// object's key, nor any temporary data: after a failed Commit that
	// includes an object the store may have kept although Commit reported
	// an error. Abort after a successful Commit is a no-op.
	Abort(ctx context.Context) error
}

// FileReader is implemented by a stream whose bytes come straight from an
// OS file: a regular file, or a command's output pipe. Across the plugin
// boundary pipe then reads that file itself instead of having its bytes sent
// in messages. Whoever reads the file instead of calling Read calls Done,
// with whether it read to the end, before Close.
type FileReader interface {
	io.ReadCloser
	File() *os.File
	Done(eof bool)
}

// FileWriter is implemented by an ObjectWriter that writes straight to an
// OS file: a temporary file, or a command's input pipe. Across the plugin
// boundary pipe then writes to that file itself and closes its copy before
// calling Commit or Abort, which do what they always do.
type FileWriter interface {
	ObjectWriter
	File() *os.File
}

// Remover is implemented by sinks that can delete a committed object. The
// host uses it to take back the objects of a run that failed after some of
// its streams committed, so a failed run leaves nothing at a final path.
type Remover interface {
	Remove(ctx context.Context, key string) error
}

// Storage is implemented by sinks that keep objects which can be listed,
// read back and removed (files, buckets): pipe uses it to read manifests and
// to apply retention. Keys are the keys given to Create.
type Storage interface {
	Remover
	// List returns the objects whose keys start with prefix.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Open reads a committed object; errors wrap ErrNotFound when there is
	// none at key.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// RootChecker is implemented by storage whose objects live in a place that
// can be missing without being empty: a folder on a disk that is not
// mounted, or whose path has a typo. CheckRoot returns an error wrapping
// ErrNotFound when the folder prefix names (a prefix ending in "/") does
// not exist, so that a reader can tell an unreachable store from an empty
// one. Object stores need not implement it: a missing bucket fails every
// request.
type RootChecker interface {
	CheckRoot(ctx context.Context, prefix string) error
}

// AfterLister is implemented by storage that can list from a key on: the
// objects whose keys start with prefix and sort after after, in key order,
// at most limit of them. A reader that asks only whether a store holds
// anything after a key (a WAL fetch that found no segment) then needs one
// request, not a listing of everything under prefix.
type AfterLister interface {
	ListAfter(ctx context.Context, prefix, after string, limit int) ([]ObjectInfo, error)
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key      string
	Size     int64
	Modified time.Time
}

// MemoryEstimator is implemented by endpoint types that buffer data of
// their own (the parts of a multipart upload, say). Memory returns the most
// bytes an instance configured with cfg holds while streams objects are in
// flight at once; it must not do any I/O. pipe adds it to the run's budget.
type MemoryEstimator interface {
	Memory(cfg Config, streams int) int64
}

// SmallObjectMemoryEstimator is implemented by storage endpoint types whose
// buffers shrink with the objects they move (an object that fits one part
// takes one buffer of its own size, not concurrency parts). It returns the
// most bytes an instance configured with cfg holds while streams objects,
// none larger than maxObject bytes, are in flight at once: what a WAL
// archive's budget counts, whose objects are at most a segment. Memory
// stays the bound for objects of any size; like it, this must not do any
// I/O. A type without it is counted by Memory.
type SmallObjectMemoryEstimator interface {
	SmallObjectMemory(cfg Config, streams int, maxObject int64) int64
}

// Flusher is implemented by sinks that batch durability work (a directory
// fsync, say) across objects. The host calls Flush once after the last
// commit of a run and before it writes the manifest.
type Flusher interface {
	Flush(ctx context.Context) error
}

// Describer is implemented by sources that know facts about what they
// read: a database's server version, name and size. The host calls
// Describe once after Streams and records the facts in the run's manifest
// (under "source"). Facts must hold no secret.
type Describer interface {
	Describe(ctx context.Context) (map[string]string, error)
}

// Concluder is implemented by sources that learn facts only by reading
// their streams: a base backup's end position, which the server sends
// after the last byte. The host calls Conclude once every stream was read
// to its end, before it writes the run's manifest, and records the facts
// beside Describe's. Facts must hold no secret.
type Concluder interface {
	Conclude(ctx context.Context) (map[string]string, error)
}

// FactDamage is the fact a Concluder records when it read every stream to
// its end but found what it read damaged in places (a database page whose
// checksum does not match, which the server reports only after it sent
// everything): what is damaged, and where, on one line. pipe stores the run
// all the same, with the damage in its manifest, and fails the run once it
// is stored: a backup is not lost to one bad page, the damage is named,
// and the next run stores again.
const FactDamage = "damage"

// Selection is implemented by sources that read what a storage sink wrote
// (files, buckets; their Schema sets Storage). Single reports whether the
// configuration names one object on purpose (a file's path, an object's
// key) rather than a folder or prefix. pipe restores from a folder or
// prefix only runs whose manifest it finds, never objects without one; a
// single named object it reads as it is (following it if it is a
// manifest).
type Selection interface {
	Single() bool
}

// Independent is implemented by sources whose streams stand alone: the
// databases of a server. When Independent reports true (after Streams), a
// stream that fails (a database dropped mid-run, one the user may not
// read) does not stop the others: they are committed, the run's manifest
// names the failed ones, and the run fails as a whole only after the rest
// is stored. Streams named <group>/… stand or fall together: a database
// read table by table (shop/pre-data.dump, shop/data/…). A restore leaves
// out every stream of a group of which one failed in the backup.
type Independent interface {
	Independent() bool
}

// StreamGroup is the group a stream stands or falls with (see
// Independent): the part of its name before the first "/", if it has one.
func StreamGroup(stream string) (string, bool) {
	g, _, ok := strings.Cut(stream, "/")
	return g, ok
}

// Preparer is implemented by sinks that must know every object of a run
// before the first Create: a database restore that applies the schema
// before the tables' data and builds indexes after all of it. The host
// calls Prepare once, before any Create, with the objects in the order the
// run starts them. Create may then be called concurrently for any of them,
// in any order.
type Preparer interface {
	Prepare(ctx context.Context, objects []Object) error
}

// Chooser is implemented by sinks that restore only some of a run's
// objects: a cluster restore of the databases it names. The host asks
// once, after Prepare, with the same objects; an object the sink declines
// is not read at all (not downloaded, decrypted or decoded) unless another
// sink of the run wants it, and Create is not called for it. A sink must
// still cope with Create for an object it declined (a host that does not
// ask): by discarding it.
type Chooser interface {
	Declines(objects []Object) []bool
}

// PartialPreparer is implemented by Preparers that restore the runs of an
// Independent source, which may be partial: some of their streams failed
// in the backup, and no object holds them. For such a run the host calls
// PreparePartial instead of Prepare, with the objects and the names of
// the failed streams as the run's manifest has them (<database>.dump, or
// <database>/... for a database read table by table). The sink must not
// refuse a choice that names them (the user may ask for a database the
// backup lacks) and answers, by position, whether it would have restored
// each: the host names those as missing, restores the rest, and then
// fails the run. A sink without it counts as wanting them all.
type PartialPreparer interface {
	PreparePartial(ctx context.Context, objects []Object, failed []string) (wanted []bool, err error)
}

// SourceType is a kind of source (e.g. "fs"): its config schema and a
// constructor.
type SourceType interface {
	Schema() Schema
	// Configure checks cfg and returns a ready Source. Diagnostics name the
	// attribute they concern so the host can point at the file position.
	Configure(ctx context.Context, cfg Config) (Source, Diagnostics)
}

// SinkType is a kind of sink (e.g. "fs"): its config schema and a
// constructor.
type SinkType interface {
	Schema() Schema
	Configure(ctx context.Context, cfg Config) (Sink, Diagnostics)
}

// Plugin is the set of endpoint types one plugin provides.
type Plugin struct {
	Name    string
	Version string
	Sources map[string]SourceType
	Sinks   map[string]SinkType
}

// ErrNotFound is wrapped by Source.Open when the stream does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is wrapped by ObjectWriter.Commit when the object was created
// with Exclusive and an object exists at its key already.
var ErrExists = errors.New("already exists")

// Lock is how a store protects one committed object from deletion and
// change: S3 Object Lock, say.
type Lock struct {
	// Mode is the store's name for the protection ("COMPLIANCE",
	// "GOVERNANCE"), "" when the object is not locked.
	Mode string
	// Until is when the protection ends; zero without a Mode.
	Until time.Time
	// LegalHold protects the object until someone lifts it, whatever
	// Until says.
	LegalHold bool
}

// Held reports whether the lock keeps the object at time now.
func (l Lock) Held(now time.Time) bool {
	return l.LegalHold || (l.Mode != "" && l.Until.After(now))
}

// Locker is implemented by storage that can lock what it writes (an
// object-locked bucket). ObjectLock says how the object at key, as the
// sink first wrote it, is protected now; errors wrap ErrNotFound when
// there is none. Retention asks it before deleting a run, and deletes
// nothing that is still locked.
type Locker interface {
	ObjectLock(ctx context.Context, key string) (Lock, error)
}
