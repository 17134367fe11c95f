package runner

import (
	"context"
	"fmt"

	"github.com/pipebackup/pipe/binlog"
	"github.com/pipebackup/pipe/stages/dedup"

	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/wal"
)

// archiveStore is a WAL archive's storage sink, opened: a wal.Store.
type archiveStore struct {
	sdk.Sink
	sdk.Storage
}

// Flush makes the objects committed so far durable, when the sink batches
// that work.
func (s *archiveStore) Flush(ctx context.Context) error {
	if fl, ok := s.Sink.(sdk.Flusher); ok {
		return fl.Flush(ctx)
	}
	return nil
}

// ObjectLock says how the store locks the object at key (sdk.Locker):
// WAL retention stops at the first file still locked.
func (s *archiveStore) ObjectLock(ctx context.Context, key string) (sdk.Lock, error) {
	if l, ok := s.Sink.(sdk.Locker); ok {
		return l.ObjectLock(ctx, key)
	}
	return sdk.Lock{}, nil
}

// CheckRoot reports a store folder that does not exist, when the sink
// can tell (sdk.RootChecker).
func (s *archiveStore) CheckRoot(ctx context.Context, prefix string) error {
	if rc, ok := s.Sink.(sdk.RootChecker); ok {
		return rc.CheckRoot(ctx, prefix)
	}
	return nil
}

// ListAfter lists from a key on: in one request when the sink can
// (sdk.AfterLister), else by filtering the whole listing.
func (s *archiveStore) ListAfter(ctx context.Context, prefix, after string, limit int) ([]sdk.ObjectInfo, error) {
	if al, ok := s.Sink.(sdk.AfterLister); ok {
		return al.ListAfter(ctx, prefix, after, limit)
	}
	all, err := s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []sdk.ObjectInfo
	for _, in := range all {
		if in.Key > after && len(out) < limit {
			out = append(out, in)
		}
	}
	return out, nil
}

// OpenArchive opens the store of a WAL archive and returns the archive,
// ready to push and fetch, and a function that lets go of the store.
// dataDir is where pg_control is read from ("" the working directory).
func OpenArchive(ctx context.Context, a *plan.Archive, reg *host.Registry, dataDir string) (*wal.Archive, func(), error) {
	st, root, done, err := openArchiveStore(ctx, a, reg)
	if err != nil {
		return nil, nil, err
	}
	w := &wal.Archive{
		Store: st, Root: root,
		Codec: a.Codec, Level: a.Level, Encrypt: a.Encrypt, Decrypt: a.Decrypt,
		SegmentSize: uint32(a.SegmentSize), DataDir: dataDir, SystemID: a.SystemID,
		Exclusive: a.Def.Store.Schema.ExclusiveCreate, Sign: a.Sign, Trust: a.Trust,
	}
	return w, done, nil
}

// OpenBinlogArchive opens the store of a MariaDB binlog archive (an
// archive block with a binlog block) and returns the archive and a
// function that lets go of the store.
func OpenBinlogArchive(ctx context.Context, a *plan.Archive, reg *host.Registry) (*binlog.Archive, func(), error) {
	if a.Binlog == nil {
		return nil, nil, fmt.Errorf("archive %q has no binlog block: it is a PostgreSQL WAL archive (pipe wal); a binlog archive says binlog { path = \"/var/lib/mysql/mysql-bin\" }", a.Name)
	}
	st, root, done, err := openArchiveStore(ctx, a, reg)
	if err != nil {
		return nil, nil, err
	}
	seal := dedup.Format{Codec: a.Codec, Level: a.Level}
	open := seal
	if a.Encrypt != nil {
		seal.Keys = *a.Encrypt
	}
	if a.Decrypt != nil {
		open.Keys = *a.Decrypt
	}
	return &binlog.Archive{Store: st, Root: root, Seal: seal, Open: open, Ext: a.Ext(), Exclusive: a.Def.Store.Schema.ExclusiveCreate}, done, nil
}

// openArchiveStore opens an archive's store and renders its folder.
func openArchiveStore(ctx context.Context, a *plan.Archive, reg *host.Registry) (*archiveStore, string, func(), error) {
	def := a.Def.Store
	ep, diags, err := configureOne(ctx, def, reg, "store "+def.Type)
	if err != nil {
		return nil, "", nil, fmt.Errorf("archive %q: %w", a.Name, err)
	}
	done := func() { closeAll(nil, []*endpoint{ep}) }
	if diags.HasErrors() {
		done()
		return nil, "", nil, &DiagError{diags}
	}
	st, ok := ep.sink.(sdk.Storage)
	if !ok {
		done()
		return nil, "", nil, fmt.Errorf("archive %q: store %s cannot list or read back its objects", a.Name, def.Type)
	}
	root := ""
	if def.Key != nil {
		if root, err = def.Key.Render("", ""); err != nil {
			done()
			return nil, "", nil, fmt.Errorf("archive %q: %w", a.Name, err)
		}
	}
	return &archiveStore{Sink: ep.sink, Storage: st}, root, done, nil
}

// ArchiveListing returns a function that lists WAL archive a the first
// time it is called and then returns that listing (VerifyOptions.WAL):
// verify opens the archive only for a run that needs its WAL. A failed
// listing is tried again at the next call.
func ArchiveListing(a *plan.Archive, reg *host.Registry) func(context.Context) (*wal.Listing, error) {
	var listing *wal.Listing
	return func(ctx context.Context) (*wal.Listing, error) {
		if listing != nil {
			return listing, nil
		}
		ar, done, err := OpenArchive(ctx, a, reg, "")
		if err != nil {
			return nil, err
		}
		defer done()
		listing, err = ar.List(ctx)
		return listing, err
	}
}
