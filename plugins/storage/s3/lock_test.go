package s3

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/pipebackup/pipe/plugins/storage/internal/objlock"
)

func TestLockConfig(t *testing.T) {
	for _, c := range []struct {
		cfg      objlock.Config
		checksum string
		err      string
		mode     types.ObjectLockMode
	}{
		{objlock.Config{Days: 0, Mode: "compliance"}, "crc32c", "", ""},
		{objlock.Config{Days: 35, Mode: "compliance"}, "crc32c", "", types.ObjectLockModeCompliance},
		{objlock.Config{Days: 7, Mode: "Governance"}, "sha256", "", types.ObjectLockModeGovernance},
		{objlock.Config{Days: 7, Mode: "forever"}, "crc32c", "unknown object lock mode", ""},
		{objlock.Config{Days: -1, Mode: "compliance"}, "crc32c", "invalid object lock", ""},
		{objlock.Config{Days: 7, Mode: "compliance"}, "none", "object lock needs a checksum", ""},
	} {
		d := checkLock(c.cfg, c.checksum)
		var mode types.ObjectLockMode
		var until *time.Time
		(&Sink{lk: c.cfg}).lock("r1/a.zst", &mode, &until)
		switch {
		case c.err == "" && d.HasErrors():
			t.Errorf("%+v: %v", c.cfg, d)
		case c.err != "" && (!d.HasErrors() || !strings.Contains(d[0].Summary, c.err)):
			t.Errorf("%+v: %v, want %q", c.cfg, d, c.err)
		case c.err == "" && mode != c.mode:
			t.Errorf("%+v: mode %q, want %q", c.cfg, mode, c.mode)
		}
	}
}

// The index and pins are never locked; everything else is, until the
// configured days from now.
func TestLockHeaders(t *testing.T) {
	s := &Sink{lk: objlock.Config{Days: 2, Mode: "compliance"}}
	for key, want := range map[string]bool{"base/r1/base.tar.zst": true, "base/r1/pipe-manifest.json": true,
		"archive/1/00000001/000000010000000000000001.claim": true, "base/pipe-index.json": false, "base/r1/pipe-manifest.json.pin": false} {
		var mode types.ObjectLockMode
		var until *time.Time
		s.lock(key, &mode, &until)
		if (mode != "") != want {
			t.Errorf("%s: mode %q, want locked %v", key, mode, want)
		}
		if want && (until == nil || time.Until(*until) < 47*time.Hour || time.Until(*until) > 49*time.Hour) {
			t.Errorf("%s: locked until %v, want two days from now", key, until)
		}
	}
}

// A key stands for the version pipe wrote (its oldest), whatever was
// written over it or marked deleted since; the index for its newest.
func TestChosenVersion(t *testing.T) {
	v := func(id string) types.ObjectVersion { return types.ObjectVersion{VersionId: aws.String(id)} }
	marker := types.DeleteMarkerEntry{IsLatest: aws.Bool(true), VersionId: aws.String("m")}
	k := &keyVersions{all: []types.ObjectVersion{v("attacker"), v("pipe")}, markers: []types.DeleteMarkerEntry{marker}}
	if got, ok := k.chosen("r1/a.zst"); !ok || *got.VersionId != "pipe" {
		t.Errorf("an object written over and deleted stands for %v %v, want pipe's version", got.VersionId, ok)
	}
	ix := &keyVersions{all: []types.ObjectVersion{v("new"), v("old")}}
	if got, ok := ix.chosen("pipe-index.json"); !ok || *got.VersionId != "new" {
		t.Errorf("the index stands for %v, want its newest", got.VersionId)
	}
	ix.markers = []types.DeleteMarkerEntry{marker}
	if _, ok := ix.chosen("pipe-index.json"); ok {
		t.Error("a deleted index still stands")
	}
	if _, ok := (&keyVersions{markers: []types.DeleteMarkerEntry{marker}}).chosen("r1/a.zst"); ok {
		t.Error("a key with only a delete marker stands for an object")
	}
}
