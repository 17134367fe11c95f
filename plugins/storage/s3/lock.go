package s3

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/objlock"
)

// Object lock and versions. A sink with object_lock_days sets S3 Object
// Lock on every object it writes, in the request that writes it (the
// x-amz-object-lock-mode and -retain-until-date headers of PutObject and
// CreateMultipartUpload): no extra request, and no moment at which the
// object exists unlocked. The one object pipe rewrites, a store's index
// (sdk.IndexName), is written unlocked, and so are pins (a run's
// <manifest>.pin), which pipe backups unpin removes.
//
// A locked bucket keeps versions, and whoever holds the writer's
// credentials can still write over an object (a new version) or put a
// delete marker on it. pipe writes every object once, so in a versioned
// store (versioned, implied by the lock) it reads each object as it first
// wrote it: listings list every version, and each key stands for its
// oldest version, which is what reads fetch (GET ?versionId). The index
// stands for its newest. Deleting removes every version of the key and its
// delete markers; a version still locked refuses, which retention asks
// about first (sdk.Locker).

// lockAttrs are the sink's object lock attributes.
var lockAttrs = objlock.Attributes("S3 Object Lock", "the bucket must have been created with object lock")

// versionedAttr is the attribute of the source and the sink that reads a
// versioned bucket as pipe wrote it.
var versionedAttr = sdk.Attribute{Name: "versioned", Type: sdk.Bool, Default: false, Description: "The bucket keeps versions (S3 Versioning, which object lock needs): pipe reads each object as it first wrote it, whatever was written over it or delete markers put on it since (pipe writes every object once, its index aside), and deleting removes every version. Implied by object_lock_days; set it on the restore's source and the archive's store of a locked bucket."}

// checkLock validates the lock; the sink's checksum must be on, since
// S3 refuses a locked upload without one.
func checkLock(c objlock.Config, checksum string) sdk.Diagnostics {
	d := c.Check()
	if c.On() && strings.EqualFold(checksum, "none") {
		d = append(d, sdk.AttrError("checksum", "object lock needs a checksum", `S3 refuses a locked upload without an integrity checksum: use "crc32c", "crc32" or "sha256"`)...)
	}
	return d
}

// lock sets the lock headers of a request that writes key.
func (s *Sink) lock(key string, mode *types.ObjectLockMode, until **time.Time) {
	if !s.lk.Locks(key) {
		return
	}
	*mode = types.ObjectLockModeGovernance
	if s.lk.Compliance() {
		*mode = types.ObjectLockModeCompliance
	}
	*until = aws.Time(s.lk.Until(time.Now()))
}

// replaceable reports whether pipe writes key more than once: a store's
// index, which reads take at its newest version.
func replaceable(key string) bool { return path.Base(key) == sdk.IndexName }

// versions remembers, in a versioned store, the version each key stands
// for, as listings found them.
type versions struct {
	mu sync.Mutex
	id map[string]string
}

func (v *versions) get(key string) (string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	id, ok := v.id[key]
	return id, ok
}

func (v *versions) forget(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.id, key)
}

func (v *versions) set(key, id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.id == nil {
		v.id = map[string]string{}
	}
	v.id[key] = id
}

// keyVersions is what a listing of versions found for one key.
type keyVersions struct {
	all     []types.ObjectVersion // newest first, as S3 lists them
	markers []types.DeleteMarkerEntry
}

// chosen is the version the key stands for (see the top of this file),
// and whether there is one.
func (k *keyVersions) chosen(key string) (types.ObjectVersion, bool) {
	if len(k.all) == 0 {
		return types.ObjectVersion{}, false
	}
	if replaceable(key) {
		for _, m := range k.markers {
			if aws.ToBool(m.IsLatest) {
				return types.ObjectVersion{}, false // deleted
			}
		}
		return k.all[0], true
	}
	return k.all[len(k.all)-1], true
}

// listVersions lists every version under prefix, from the key after
// after on (exclusive, "" for all), up to limit keys (0: all), by key in
// order.
func (s *store) listVersions(ctx context.Context, prefix, after string, limit int) ([]string, map[string]*keyVersions, error) {
	in := &s3.ListObjectVersionsInput{Bucket: &s.bucket, Prefix: aws.String(prefix)}
	if after != "" {
		in.KeyMarker = aws.String(after)
	}
	byKey := map[string]*keyVersions{}
	var keys []string
	entry := func(k string) *keyVersions {
		e, ok := byKey[k]
		if !ok {
			e = &keyVersions{}
			byKey[k] = e
			keys = append(keys, k)
		}
		return e
	}
	p := s3.NewListObjectVersionsPaginator(s.client, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, nil, s.fail("listing the versions of", prefix, err)
		}
		for _, v := range page.Versions {
			if k := aws.ToString(v.Key); k > after {
				e := entry(k)
				e.all = append(e.all, v)
			}
		}
		for _, m := range page.DeleteMarkers {
			if k := aws.ToString(m.Key); k > after {
				e := entry(k)
				e.markers = append(e.markers, m)
			}
		}
		if limit > 0 && withVersions(byKey) > limit {
			break // the last key may have more versions on the next page
		}
	}
	sort.Strings(keys)
	return keys, byKey, nil
}

// withVersions counts the keys that have a version (not only delete
// markers).
func withVersions(byKey map[string]*keyVersions) int {
	n := 0
	for _, e := range byKey {
		if len(e.all) > 0 {
			n++
		}
	}
	return n
}

// listChosen is list for a versioned store: every key that has a version,
// as the version it stands for, remembered for reads.
func (s *store) listChosen(ctx context.Context, prefix, after string, limit int) ([]sdk.ObjectInfo, error) {
	keys, byKey, err := s.listVersions(ctx, prefix, after, limit)
	if err != nil {
		return nil, err
	}
	var out []sdk.ObjectInfo
	for _, k := range keys {
		v, ok := byKey[k].chosen(k)
		if !ok {
			continue
		}
		s.versions.set(k, aws.ToString(v.VersionId))
		out = append(out, sdk.ObjectInfo{Key: k, Size: aws.ToInt64(v.Size), Modified: aws.ToTime(v.LastModified)})
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// version is the version id a read of key fetches: "" (the newest) in a
// store without versions and for the index, else the one key stands for.
// A key no listing showed is looked up.
func (s *store) version(ctx context.Context, key string) (string, error) {
	if !s.cfg.Versioned || replaceable(key) {
		return "", nil
	}
	if id, ok := s.versions.get(key); ok {
		return id, nil
	}
	_, byKey, err := s.listVersions(ctx, key, "", 0)
	if err != nil {
		return "", err
	}
	e, ok := byKey[key]
	if !ok {
		return "", s.fail("reading", key, &notFoundError{})
	}
	v, ok := e.chosen(key)
	if !ok {
		return "", s.fail("reading", key, &notFoundError{})
	}
	s.versions.set(key, aws.ToString(v.VersionId))
	return aws.ToString(v.VersionId), nil
}

// notFoundError is a key without any version.
type notFoundError struct{}

func (*notFoundError) Error() string                 { return "no such object (no version of it)" }
func (*notFoundError) ErrorCode() string             { return "NoSuchKey" }
func (*notFoundError) ErrorMessage() string          { return "" }
func (*notFoundError) ErrorFault() smithy.ErrorFault { return smithy.FaultClient }

var _ sdk.Locker = (*Sink)(nil)

// ObjectLock says how the object at key, as pipe wrote it, is locked.
func (s *Sink) ObjectLock(ctx context.Context, key string) (sdk.Lock, error) {
	id, err := s.st.version(ctx, key)
	if err != nil {
		return sdk.Lock{}, err
	}
	l, err := s.lockOf(ctx, key, id)
	if err != nil {
		return sdk.Lock{}, s.st.fail("looking up the lock of", key, err)
	}
	return l, nil
}

// removeVersions deletes every version of key and its delete markers.
// A version still locked refuses, and the error says until when.
func (s *Sink) removeVersions(ctx context.Context, key string) error {
	_, byKey, err := s.st.listVersions(ctx, key, "", 0)
	if err != nil {
		return err
	}
	e, ok := byKey[key]
	if !ok {
		return nil
	}
	var ids []string
	for _, v := range e.all {
		ids = append(ids, aws.ToString(v.VersionId))
	}
	for _, m := range e.markers {
		ids = append(ids, aws.ToString(m.VersionId))
	}
	for _, id := range ids {
		_, err := s.st.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.st.bucket, Key: &key, VersionId: aws.String(id)})
		if err == nil || isNotFound(err) {
			continue
		}
		if l, lerr := s.lockOf(ctx, key, id); lerr == nil && l.Held(time.Now()) {
			return fmt.Errorf("removing %s: %w", s.st.url(key), &LockedError{Lock: l})
		}
		return s.st.fail("removing", key, err)
	}
	s.st.versions.forget(key)
	return nil
}

// lockOf is the lock of one version of key ("" the newest).
func (s *Sink) lockOf(ctx context.Context, key, id string) (sdk.Lock, error) {
	in := &s3.HeadObjectInput{Bucket: &s.st.bucket, Key: &key}
	if id != "" {
		in.VersionId = aws.String(id)
	}
	out, err := s.st.client.HeadObject(ctx, in)
	if err != nil {
		return sdk.Lock{}, err
	}
	l := sdk.Lock{Mode: string(out.ObjectLockMode), LegalHold: out.ObjectLockLegalHoldStatus == types.ObjectLockLegalHoldStatusOn}
	if l.Mode != "" {
		l.Until = aws.ToTime(out.ObjectLockRetainUntilDate)
	}
	return l, nil
}

// LockedError is a delete the store refused because the object is
// locked.
type LockedError struct{ Lock sdk.Lock }

func (e *LockedError) Error() string {
	if e.Lock.LegalHold {
		return "the object is under a legal hold: it can be deleted once the hold is lifted"
	}
	return fmt.Sprintf("the object is locked (%s) until %s: it can be deleted after that", e.Lock.Mode, e.Lock.Until.UTC().Format(time.RFC3339))
}

// lockMissing explains a locked upload to a bucket without object lock.
func lockMissing(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "object lock") || strings.Contains(m, "objectlock") || strings.Contains(m, "worm")
}
