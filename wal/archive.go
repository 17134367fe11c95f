package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/wal/spool"
	"github.com/pipebackup/pipe/wal/walname"
)

// Store is where an archive keeps its objects: a storage sink.
type Store interface {
	sdk.Sink
	List(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error)
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	Remove(ctx context.Context, key string) error
}

// Archive is a WAL archive: a store's folder, and how files are stored in
// it.
type Archive struct {
	Store Store
	// Root is the archive's folder in the store, "" or ending in "/".
	Root string
	// Codec and Level compress each file; Codec nil stores it as it is.
	Codec *compress.Codec
	Level int
	// Encrypt are the keys push encrypts to, Decrypt those fetch decrypts
	// with; nil: none.
	Encrypt, Decrypt *encrypt.Keys
	// SystemID is the cluster's system identifier, 0 to read it from
	// pg_control (and, for segments, check it against their header).
	SystemID uint64
	// SegmentSize is the cluster's WAL segment size.
	SegmentSize uint32
	// DataDir is where pg_control is read from ("": the working
	// directory, where PostgreSQL runs its commands).
	DataDir string
	// Exclusive says the store creates an object only if none is at its
	// key, atomically (sdk.Schema.ExclusiveCreate): push needs it.
	Exclusive bool
	// Sign, when set, is the key push signs each object's name with.
	Sign *signing.PrivateKey
	// Trust, when set, are the keys whose signatures fetch, list and
	// verify accept: an object whose name none of them signed is not
	// fetched, and list and verify report it. Nil checks nothing.
	Trust signing.Trust
	// StoredMemory bounds the stored bytes the process's pushes hold
	// before they are stored (0: DefaultStoredMemory); beyond it they
	// spill to a temporary file in SpillDir ("": the system's).
	// TransferMemory bounds the objects in transfer to or from the store
	// at once (0: one object of the largest size, MaxObject). See Memory.
	StoredMemory, TransferMemory int64
	SpillDir                     string

	// pg_control, read once: a push that sends several files asks for
	// it for each.
	controlOnce sync.Once
	controlData []byte
	controlErr  error
	limitsOnce  sync.Once
	lim         *limits
	frames      sync.Pool // *compress.FrameWriter
	pushLists   listCache // what pushes listed of the archive
}

// control returns the data directory's global/pg_control.
func (a *Archive) control() ([]byte, error) {
	a.controlOnce.Do(func() {
		a.controlData, a.controlErr = os.ReadFile(filepath.Join(a.DataDir, "global", "pg_control"))
	})
	return a.controlData, a.controlErr
}

// MaxFile bounds a file the archive holds in memory: the largest WAL
// segment PostgreSQL makes, and its stored forms.
const MaxFile = 1 << 30

// ErrNotArchived is returned by Fetch for a file the archive does not hold.
var ErrNotArchived = errors.New("not in the archive")

// ErrConflict is returned by Push for a file the archive holds with other
// content.
var ErrConflict = errors.New("archived with other content")

// ext is what the archive's stages add to an object's name.
func (a *Archive) ext() string { return Ext(a.Codec, a.Encrypt != nil || a.Decrypt != nil) }

// Ext is what an archive's stages add to an object's name: the codec's
// extension (none for nil), then age's when encrypted.
func Ext(codec *compress.Codec, encrypted bool) string {
	ext := ""
	if codec != nil {
		ext += codec.Ext
	}
	if encrypted {
		ext += encrypt.Ext
	}
	return ext
}

// PushResult says what a push did.
type PushResult struct {
	Key      string
	Already  bool // the same content was archived before: nothing written
	Ahead    bool // by an earlier push, which pushed it ahead
	Bytes    int64
	Stored   int64
	SystemID uint64
}

// systemID is the cluster's system identifier for a file: the configured
// one, else pg_control's; a segment's own header must agree.
func (a *Archive) systemID(f walname.File, data []byte) (uint64, error) {
	id := a.SystemID
	if id == 0 {
		b, err := a.control()
		switch {
		case err == nil:
			if id, err = walname.ControlSystemID(b); err != nil {
				return 0, err
			}
		case !hasHeader(f) || data == nil:
			return 0, fmt.Errorf("the cluster's system identifier: %w; run pipe in the data directory (as archive_command and restore_command are), or set system_identifier in the archive", err)
		}
	}
	if hasHeader(f) && data != nil {
		h, err := walname.ParseHeader(data)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f.Name, err)
		}
		if id != 0 && h.SystemID != id {
			return 0, fmt.Errorf("%s belongs to the cluster with system identifier %d, and this archive is for %d: is archive_command pointed at another cluster's archive?", f.Name, h.SystemID, id)
		}
		// The first segment of a new timeline begins as a copy of its
		// parent's up to the switch: its first page names an ancestor.
		if h.Timeline > f.Timeline {
			return 0, fmt.Errorf("%s: its header says timeline %d, later than its name's %d", f.Name, h.Timeline, f.Timeline)
		}
		if h.SegmentSize != a.SegmentSize && a.SegmentSize != 0 {
			return 0, fmt.Errorf("%s is a segment of %d bytes, and the archive says segment_size = %d", f.Name, h.SegmentSize, a.SegmentSize)
		}
		id = h.SystemID
	}
	return id, nil
}

// hasHeader reports whether a file starts with a segment's page header:
// a segment, or a .partial one.
func hasHeader(f walname.File) bool { return f.Kind == walname.Segment || f.Kind == walname.Partial }

// find returns the archived objects of a file (not its name's claim).
func (a *Archive) find(ctx context.Context, dir, name string) (objs []walname.Object, keys []string, err error) {
	infos, err := a.Store.List(ctx, a.Root+dir+name+"-")
	if err != nil {
		return nil, nil, err
	}
	objs, keys = split(objectsByName(infos)[name]) // not a temporary file, nor another file's
	return objs, keys, nil
}

// Push archives the file at p: read in blocks through compression and
// encryption (never whole), stored under its name and digests, committed
// durably. The same content again writes nothing; other content under an
// archived name is ErrConflict.
func (a *Archive) Push(ctx context.Context, p string) (*PushResult, error) {
	f, err := walname.ParseName(filepath.Base(p))
	if err != nil {
		return nil, err
	}
	return a.PushFile(ctx, f, p)
}

// PushFile archives the file at p as file f (see Push).
func (a *Archive) PushFile(ctx context.Context, f walname.File, p string) (*PushResult, error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > MaxFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, MaxFile)
	}
	return a.push(ctx, f, fh, fi.Size())
}

// PushData archives the contents of file f (see push).
func (a *Archive) PushData(ctx context.Context, f walname.File, data []byte) (*PushResult, error) {
	return a.push(ctx, f, bytes.NewReader(data), int64(len(data)))
}

// push archives the size bytes of src as file f. Of two pushes of
// different content under one name, at any moment, exactly one archives
// its file: the one whose claim of the name the store created (see
// ClaimExt); the other returns ErrConflict.
func (a *Archive) push(ctx context.Context, f walname.File, src io.ReaderAt, size int64) (*PushResult, error) {
	if !a.Exclusive {
		return nil, fmt.Errorf("%s: the archive's store cannot create an object only if none is there (its plugin does not declare exclusive create), so two servers could archive different files under one name: keep the archive in an fs, s3, gcs or azure store", f.Name)
	}
	head, err := readHead(f, src, size)
	if err == nil {
		err = checkFile(f, size, head, a.SegmentSize)
	}
	if err != nil {
		return nil, fmt.Errorf("%s is not archived: %w", f.Name, err)
	}
	id, err := a.systemID(f, head)
	if err != nil {
		return nil, err
	}
	dir := walname.Dir(id, f.Timeline)
	res := &PushResult{SystemID: id, Bytes: size}
	// Two things at once: the file's encoding, which also gives its
	// digest (one read of the file), and the look at the archive (a
	// listing, then, once the digest is known and nothing is archived
	// under the name, its claim: round trips). A file archived already
	// wastes its encoding; that is a retry's cost.
	sums := make(chan string, 1)
	var found, sum string
	var lookErr error
	looked := make(chan struct{})
	go func() {
		defer close(looked)
		found, sum, lookErr = a.claim(ctx, dir, f.Name, func(like, sum string) bool { return a.sameFile(like, src, size, sum) }, sums)
	}()
	st, encSum, encErr := a.encodeFile(ctx, src, size)
	sums <- encSum // "" after an error: no claim
	if encErr == nil {
		defer st.release()
	}
	<-looked
	switch {
	case encErr != nil:
		return nil, fmt.Errorf("%s: %w", f.Name, encErr)
	case lookErr != nil:
		return nil, lookErr
	case found != "":
		res.Key, res.Already = found, true
		return res, nil
	}
	res.Key = a.Root + dir + a.objectName(dir, f.Name, sum, st.digest())
	res.Stored = st.n
	done, err := a.inTransfer(ctx, st.n)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := a.putFrom(ctx, res.Key, f.Name, st.n, st.WriteTo, false); err != nil {
		return nil, err
	}
	return res, nil
}

// sameFile reports whether the file (size bytes of src, whose digest is
// sum) is the one whose file digest is like: like's hash when it is not
// the archive's current one (SHA-256, of objects archived before XXH3).
func (a *Archive) sameFile(like string, src io.ReaderAt, size int64, sum string) bool {
	if !isSHA256(like) {
		return like == sum
	}
	s, err := digestAt(src, size, like)
	return err == nil && s == like
}

// readHead reads what push checks of a file before it archives it: a
// segment's first page header, or a small file whole.
func readHead(f walname.File, src io.ReaderAt, size int64) ([]byte, error) {
	n := size
	if hasHeader(f) {
		n = min(size, 64)
	} else if size > maxSmallFile {
		return nil, fmt.Errorf("it has %d bytes, more than any %s", size, map[walname.Kind]string{walname.History: "timeline history file", walname.Backup: "backup history file"}[f.Kind])
	}
	head := make([]byte, n)
	if _, err := src.ReadAt(head, 0); err != nil && !(errors.Is(err, io.EOF) && n == size) {
		return nil, err
	}
	return head, nil
}

// objectName is the base name of a file's object in folder dir: signed
// when the archive has a signing key.
func (a *Archive) objectName(dir, name, fileSum, storedSum string) string {
	if a.Sign != nil {
		return signedName(a.Sign, dir, name, fileSum, storedSum, a.ext())
	}
	return walname.ObjectName(name, fileSum, storedSum, a.ext())
}

// stands reports whether an archived object of the same content as a
// push's file stands for it: with a signing key, only an object signed
// with that key does (push stores a signed one beside another, so that a
// fetch that trusts the key finds one).
func (a *Archive) stands(o walname.Object, dir string) bool {
	if a.Sign == nil {
		return true
	}
	_, err := checkSignature(o, signing.Trust{a.Sign.Public()}, dir)
	return err == nil
}

// ClaimExt ends the key of a file's claim, <dir><name>.claim, which holds
// the file digest of the content archived under the name. A push creates
// it exclusively (sdk.Object.Exclusive) before it stores the file's
// object, so the store decides which of two pushes of different content
// archives its file, and an object is only ever stored for the content
// its name's claim holds. A claim without an object is a push that has
// not finished (or was killed before it stored the object: its retry
// stores it).
const ClaimExt = ".claim"

// claim looks for the file in the archive (its digest comes from sums)
// and, if nothing is archived under its name, claims the name for this
// content. It returns the key of the same content archived already, or ""
// once the name is claimed for this content and the object is to be
// stored; and the file's digest. Other content archived or claimed under
// the name is ErrConflict.
func (a *Archive) claim(ctx context.Context, dir, name string, sameAs func(like, sum string) bool, sums <-chan string) (found, sum string, err error) {
	// The listing from the start (while the file is encoded), the claim
	// as soon as the digest is known, without waiting for the listing.
	// The listing still decides for names archived before claims existed
	// (an object, no claim).
	type listing struct {
		objs []walname.Object
		keys []string
		err  error
	}
	listed := make(chan listing, 1)
	go func() {
		var l listing
		l.objs, l.keys, l.err = a.pushLists.findForPush(ctx, a, dir, name)
		listed <- l
	}()
	if sum = <-sums; sum == "" {
		return "", "", errors.New("the file could not be encoded") // push says why
	}
	key := a.Root + dir + name + ClaimExt
	claimErr := a.put(ctx, key, name+ClaimExt, []byte(sum+"\n"), true)
	l := <-listed
	if l.err != nil {
		return "", sum, fmt.Errorf("looking for %s in the archive: %w", name, l.err)
	}
	same := false
	for i, o := range l.objs {
		if sameAs(o.FileSum, sum) {
			if a.stands(o, dir) {
				return l.keys[i], sum, nil
			}
			same = true // unsigned, or not by this key: store a signed one
		}
	}
	if len(l.objs) > 0 && !same {
		if claimErr == nil {
			// An object archived before claims existed holds other
			// content: the claim just made names the wrong one.
			_ = a.Store.Remove(context.WithoutCancel(ctx), key)
		}
		return "", sum, a.conflict(name, dir, l.objs[0].FileSum, sum, "the archive keeps the original")
	}
	switch {
	case claimErr == nil:
		return "", sum, nil
	case !errors.Is(claimErr, sdk.ErrExists):
		return "", sum, fmt.Errorf("claiming %s in the archive: %w", name, claimErr)
	}
	// Claimed already: by an earlier push of this content that did not
	// store its object (killed, or the object's upload failed), by one
	// racing this one, or for other content.
	held, err := a.readClaim(ctx, key)
	if err != nil {
		return "", sum, err
	}
	if held != sum {
		return "", sum, a.conflict(name, dir, held, sum, "another push claimed the name first, for its content; the archive keeps that")
	}
	// This content: stored already if that push ended after the listing
	// (one of its group, from before: see findForPush).
	objs, keys, err := a.find(ctx, dir, name)
	if err != nil {
		return "", sum, fmt.Errorf("looking for %s in the archive: %w", name, err)
	}
	for i, o := range objs {
		if sameAs(o.FileSum, sum) && a.stands(o, dir) {
			return keys[i], sum, nil
		}
	}
	return "", sum, nil
}

// conflict is the error of a push of other content under an archived
// (or claimed) name.
func (a *Archive) conflict(name, dir, theirs, ours, kept string) error {
	return fmt.Errorf("%s: %w (its file digest %s, this file's %s); %s: is another cluster archiving to %s%s, or was a standby promoted without a new timeline?", name, ErrConflict, theirs, ours, kept, a.Root, dir)
}

// readClaim reads the file digest a claim holds.
func (a *Archive) readClaim(ctx context.Context, key string) (string, error) {
	rc, err := a.Store.Open(ctx, key)
	if err != nil {
		return "", fmt.Errorf("reading the claim %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<10))
	if err != nil {
		return "", fmt.Errorf("reading the claim %s: %w", key, err)
	}
	sum := strings.TrimSpace(string(b))
	if !claimRE.MatchString(sum) {
		return "", fmt.Errorf("the claim %s holds %q, not a file digest: the archive is damaged; remove the claim only if no object of its file is archived", key, sum)
	}
	return sum, nil
}

var claimRE = regexp.MustCompile(`^[0-9a-f]{32}$|^[0-9a-f]{64}$`)

// put writes one small object from memory (a claim); see putFrom.
func (a *Archive) put(ctx context.Context, key, stream string, b []byte, exclusive bool) error {
	return a.putFrom(ctx, key, stream, int64(len(b)), func(w io.Writer) (int64, error) {
		n, err := w.Write(b)
		return int64(n), err
	}, exclusive)
}

// putFrom writes one object of size bytes, which write writes, and makes
// it durable; exclusive, only if no object is at key (else an error
// wrapping sdk.ErrExists).
func (a *Archive) putFrom(ctx context.Context, key, stream string, size int64, write func(io.Writer) (int64, error), exclusive bool) error {
	w, err := a.Store.Create(ctx, sdk.Object{Key: key, Stream: stream, Size: size, MaxSize: size, Exclusive: exclusive})
	if err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	if _, err := write(w); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx)) // the write's error says what happened
		return fmt.Errorf("storing %s: %w", key, err)
	}
	if err := w.Commit(ctx); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return fmt.Errorf("committing %s: %w", key, err)
	}
	if fl, ok := a.Store.(sdk.Flusher); ok {
		if err := fl.Flush(ctx); err != nil {
			return fmt.Errorf("making %s durable: %w", key, err)
		}
	}
	return nil
}

// Fetch restores the archived file name to dest, atomically (a temporary
// file beside it, renamed). It checks the stored bytes' digest, decrypts,
// decompresses and checks the file's digest. A file the archive does not
// hold is ErrNotArchived.
//
// A file it does not find is not archived only if the store is there (an
// fs archive's folder exists) and, for a segment, the archive holds no
// later WAL of its timeline: a missing segment before archived ones is
// ErrHole, which recovery must stop at rather than end there.
func (a *Archive) Fetch(ctx context.Context, name, dest string) error {
	f, err := walname.ParseName(name)
	if err != nil {
		return err
	}
	id, err := a.FetchSystemID(ctx)
	if err != nil {
		return err
	}
	// Not fsynced: PostgreSQL reads it now, and after a crash recovery
	// asks for it again.
	err = a.fetchTo(ctx, id, name, dest, false)
	if !errors.Is(err, ErrNotArchived) {
		return err
	}
	if rerr := a.CheckRoot(ctx); rerr != nil {
		return rerr
	}
	if f.Kind == walname.Segment {
		if herr := a.hole(ctx, id, f); herr != nil {
			return herr
		}
	}
	return err
}

// ErrHole is returned by Fetch for a segment the archive lacks although it
// holds later WAL of the segment's timeline: a gap, not the end of the
// archive.
var ErrHole = errors.New("a gap in the archive")

// CheckRoot returns an error when the archive's store is not there (an fs
// archive's folder: a disk not mounted, a typo), which must not read as
// an empty archive.
func (a *Archive) CheckRoot(ctx context.Context) error {
	rc, ok := a.Store.(sdk.RootChecker)
	if !ok {
		return nil
	}
	if err := rc.CheckRoot(ctx, a.Root); err != nil {
		return fmt.Errorf("the archive's store cannot be read: %w", err)
	}
	return nil
}

// holePage is how many keys after a missing segment hole reads at once.
const holePage = 64

// hole returns ErrHole, naming the next archived file, when the archive
// holds WAL of f's timeline after segment f (a later segment, a .partial
// or a .backup file); nil when f would be the end of it.
func (a *Archive) hole(ctx context.Context, id uint64, f walname.File) error {
	n, err := walname.SegmentNumber(f.Name, a.SegmentSize)
	if err != nil {
		return err
	}
	prefix := a.Root + walname.Dir(id, f.Timeline)
	// "~" sorts after every character of an archived name: the keys
	// after it are of later files.
	after := prefix + f.Name + "~"
	for {
		infos, err := a.listAfter(ctx, prefix, after, holePage)
		if err != nil {
			return fmt.Errorf("%s is not in the archive, and looking for later WAL of its timeline failed: %w", f.Name, err)
		}
		for _, in := range infos {
			o, err := walname.ParseObject(path.Base(in.Key))
			if err != nil || o.Kind == walname.History {
				continue // a claim, or not archived WAL
			}
			if k, err := walname.SegmentNumber(o.Name[:24], a.SegmentSize); err == nil && k > n {
				return fmt.Errorf("%w: the segment is missing while the archive holds later WAL of timeline %d (%s, %s): recovery cannot pass it; bring the segment back (from the old server's pg_wal or another copy) with pipe wal push, or recover to a target before it",
					ErrHole, f.Timeline, o.Name, in.Key)
			}
		}
		if len(infos) < holePage {
			return nil
		}
		after = infos[len(infos)-1].Key
	}
}

// listAfter lists the keys under prefix after after, at most limit: in
// one request when the store can (sdk.AfterLister).
func (a *Archive) listAfter(ctx context.Context, prefix, after string, limit int) ([]sdk.ObjectInfo, error) {
	if al, ok := a.Store.(sdk.AfterLister); ok {
		return al.ListAfter(ctx, prefix, after, limit)
	}
	all, err := a.Store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	i := sort.Search(len(all), func(i int) bool { return all[i].Key > after })
	all = all[i:]
	return all[:min(len(all), limit)], nil
}

// fetchTo restores the archived file name of cluster id to dest:
// decoded as it is read straight into a temporary file beside it (no
// buffer of the file's size), renamed into place once both digests
// match, fsynced first if durable.
func (a *Archive) fetchTo(ctx context.Context, id uint64, name, dest string, durable bool) error {
	o, key, err := a.locate(ctx, id, name, nil)
	if err != nil {
		return err
	}
	if err := spool.WriteAtomicWith(dest, durable, func(w io.Writer) error { return a.read(ctx, o, key, w) }); err != nil {
		return fmt.Errorf("restoring %s to %s: %w", name, dest, err)
	}
	return nil
}

// locate finds the archived file name of cluster id: its object and key.
func (a *Archive) locate(ctx context.Context, id uint64, name string, lists *listCache) (walname.Object, string, error) {
	f, err := walname.ParseName(name)
	if err != nil {
		return walname.Object{}, "", err
	}
	objs, keys, err := lists.find(ctx, a, walname.Dir(id, f.Timeline), name)
	if err != nil {
		return walname.Object{}, "", fmt.Errorf("looking for %s in the archive: %w", name, err)
	}
	if len(objs) == 0 {
		return walname.Object{}, "", fmt.Errorf("%s: %w", name, ErrNotArchived)
	}
	if a.Trust != nil {
		if objs, keys, err = a.trusted(walname.Dir(id, f.Timeline), objs, keys); err != nil {
			return walname.Object{}, "", err
		}
	}
	for _, o := range objs[1:] {
		if o.FileSum != objs[0].FileSum {
			return walname.Object{}, "", fmt.Errorf("%s is archived twice with different content (%s, %s): the archive is damaged; recovery stops rather than guess", name, keys[0], keys[1])
		}
	}
	return objs[0], keys[0], nil
}

// trusted keeps, of a file's objects in folder dir, those whose names a
// trusted key signed. None is an error wrapping ErrUntrusted that names
// each object and why: recovery stops rather than replay WAL that the
// archive's writer may not have written.
func (a *Archive) trusted(dir string, objs []walname.Object, keys []string) ([]walname.Object, []string, error) {
	var good []walname.Object
	var goodKeys, why []string
	for i, o := range objs {
		if _, err := checkSignature(o, a.Trust, dir); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", keys[i], err))
			continue
		}
		good = append(good, o)
		goodKeys = append(goodKeys, keys[i])
	}
	if len(good) == 0 {
		return nil, nil, fmt.Errorf("%w: %s; recovery stops rather than replay WAL no trusted key signed (if it was archived before sign { key } was set, check it, and fetch it with an archive block without trust)",
			ErrUntrusted, strings.Join(why, "; "))
	}
	return good, goodKeys, nil
}

// read reads one object, checks it and decodes it into w as it reads:
// what w received is good only without an error.
func (a *Archive) read(ctx context.Context, o walname.Object, key string, w io.Writer) error {
	done, err := a.coding(ctx)
	if err != nil {
		return err
	}
	defer done()
	return a.readObject(ctx, o.Size, key, func(r io.Reader) error { return a.decodeFrom(ctx, o, key, r, w) })
}

// spoolTo restores the archived file name of cluster id to dest as
// fetchTo does, in two steps, for a prefetch of many files at once: the
// stored bytes to a temporary file beside dest (checked against the
// digest in the object's name), as many at once as are prefetched, each
// waiting only for the network; then decoded from there, as many at once
// as there are CPUs (Coders), each holding a codec's state.
// It looks name up through lists (nil: by name alone).
func (a *Archive) spoolTo(ctx context.Context, id uint64, name, dest string, durable bool, lists *listCache) error {
	o, key, err := a.locate(ctx, id, name, lists)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".pipe-tmp-"+filepath.Base(dest)+"-stored-")
	if err != nil {
		return err
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	err = a.readObject(ctx, o.Size, key, func(r io.Reader) error { return a.download(r, o, key, tmp) })
	if err != nil {
		return fmt.Errorf("restoring %s to %s: %w", name, dest, err)
	}
	done, err := a.coding(ctx)
	if err != nil {
		return err
	}
	defer done()
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := spool.WriteAtomicWith(dest, durable, func(w io.Writer) error { return a.decodeStream(ctx, o, key, tmp, w) }); err != nil {
		return fmt.Errorf("restoring %s to %s: %w", name, dest, err)
	}
	return nil
}

// download writes an object's stored bytes from r to f, then checks them
// against the digest in the object's name, read back from f. A store's
// reader that writes into a file at offsets (the object stores' ranged
// reader) does so through a small buffer, not one of the object's size.
func (a *Archive) download(r io.Reader, o walname.Object, key string, f *os.File) error {
	most := a.MaxObject()
	var err error
	if wa, ok := r.(interface {
		WriteAtTo(w io.WriterAt) (int64, error)
		Size() int64
	}); ok && wa.Size() <= most {
		_, err = wa.WriteAtTo(f)
	} else {
		buf := getBlock()
		_, err = io.CopyBuffer(f, io.LimitReader(r, most+1), *buf)
		putBlock(buf)
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	return a.newStoredReader(io.NewSectionReader(f, 0, most+1)).check(key, o.StoredSum)
}

// readObject opens an object of size bytes (0: unknown) once the objects
// in transfer leave room for it, and passes it to fn.
func (a *Archive) readObject(ctx context.Context, size int64, key string, fn func(r io.Reader) error) error {
	done, err := a.inTransfer(ctx, size)
	if err != nil {
		return err
	}
	defer done()
	rc, err := a.Store.Open(ctx, key)
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	defer rc.Close()
	return fn(rc)
}

// storedDigest reads an object and returns the SHA-256 of its bytes, as
// its name carries it.
func (a *Archive) storedDigest(ctx context.Context, o walname.Object, key string) (string, error) {
	var sum string
	err := a.readObject(ctx, o.Size, key, func(r io.Reader) (err error) {
		sum, err = a.newStoredReader(r).sum(key)
		return err
	})
	return sum, err
}

// FetchSystemID is the system identifier to fetch for: the configured
// one, pg_control's, or the archive's only one.
func (a *Archive) FetchSystemID(ctx context.Context) (uint64, error) {
	if a.SystemID != 0 {
		return a.SystemID, nil
	}
	b, err := a.control()
	if err == nil {
		var id uint64
		if id, err = walname.ControlSystemID(b); err == nil {
			return id, nil
		}
	}
	ids, lerr := a.SystemIDs(ctx)
	if lerr == nil && len(ids) == 1 {
		return ids[0], nil
	}
	if lerr == nil && len(ids) > 1 {
		return 0, fmt.Errorf("the archive holds the WAL of %d clusters (%v) and pg_control cannot be read (%v): set system_identifier in the archive", len(ids), ids, err)
	}
	return 0, fmt.Errorf("the cluster's system identifier: %w; run pipe in the data directory, or set system_identifier", err)
}

// SystemIDs lists the clusters whose WAL the archive holds.
func (a *Archive) SystemIDs(ctx context.Context) ([]uint64, error) {
	infos, err := a.Store.List(ctx, a.Root)
	if err != nil {
		return nil, err
	}
	seen := map[uint64]bool{}
	var out []uint64
	for _, in := range infos {
		first, _, _ := strings.Cut(strings.TrimPrefix(in.Key, a.Root), "/")
		if id, err := walname.ParseSystemID(first); err == nil && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}
