package wal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/wal/walname"
)

func signingKey(t *testing.T) *signing.PrivateKey {
	t.Helper()
	k, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A signed name parses (and an unsigned one still does), fits the fs
// store's temporary name in one path component, and verifies with the
// key, for the folder it was signed for, and with no other key, folder or
// name.
func TestSignedNames(t *testing.T) {
	k := signingKey(t)
	dir := walname.Dir(testSysID, 1)
	fileSum, storedSum := strings.Repeat("a", 32), strings.Repeat("b", 64)
	longest := "000000010000000000000003.00000028.backup"
	for _, n := range []string{name(1, 3), "00000001.history", longest, name(1, 3) + ".partial"} {
		for _, ext := range []string{"", ".zst", ".zst.age", ".lz4.age"} {
			base := signedName(k, dir, n, fileSum, storedSum, ext)
			if tmp := ".pipe-tmp-" + base + "-917f1d8dfa81"; len(tmp) > 255 || !strings.HasSuffix(base, ext) {
				t.Fatalf("%s: %d bytes, as the fs store's temporary file %d", base, len(base), len(tmp))
			}
			o, err := walname.ParseObject(base)
			if err != nil {
				t.Fatalf("ParseObject(%s): %v", base, err)
			}
			if o.Name != n || o.FileSum != fileSum || o.StoredSum != storedSum || o.Ext != ext || len(o.Sig) != walname.SigLen || sigEncoding.EncodedLen(64) != walname.SigLen {
				t.Fatalf("ParseObject(%s) = %+v", base, o)
			}
			if o.Unsigned() != walname.ObjectName(n, fileSum, storedSum, ext) {
				t.Fatalf("Unsigned() = %s", o.Unsigned())
			}
			if fp, err := checkSignature(o, signing.Trust{k.Public()}, dir); err != nil || fp != k.Fingerprint() {
				t.Fatalf("checkSignature: %s, %v", fp, err)
			}
		}
	}
	base := signedName(k, dir, name(1, 3), fileSum, storedSum, ".zst.age")
	o, _ := walname.ParseObject(base)
	for what, check := range map[string]func() error{
		"another key": func() error {
			_, err := checkSignature(o, signing.Trust{signingKey(t).Public()}, dir)
			return err
		},
		"another cluster's folder": func() error {
			_, err := checkSignature(o, signing.Trust{k.Public()}, walname.Dir(testSysID+1, 1))
			return err
		},
		"another stored digest": func() error {
			o2 := o
			o2.StoredSum = strings.Repeat("c", 64)
			_, err := checkSignature(o2, signing.Trust{k.Public()}, dir)
			return err
		},
		"another extension": func() error {
			o2 := o
			o2.Ext = ".zst"
			_, err := checkSignature(o2, signing.Trust{k.Public()}, dir)
			return err
		},
		"unsigned": func() error {
			o2 := o
			o2.Sig = ""
			_, err := checkSignature(o2, signing.Trust{k.Public()}, dir)
			return err
		},
	} {
		if err := check(); err == nil {
			t.Errorf("%s: the signature verifies", what)
		}
	}
	// Every character of the signature matters (the last one's low bits,
	// which base64 leaves zero, too).
	for i := range o.Sig {
		o2 := o
		c := byte('A')
		if o.Sig[i] == 'A' {
			c = 'B'
		}
		o2.Sig = o.Sig[:i] + string(c) + o.Sig[i+1:]
		if _, err := checkSignature(o2, signing.Trust{k.Public()}, dir); err == nil {
			t.Fatalf("signature character %d changed, and it still verifies", i)
		}
	}
}

// A signed push fetches where its key is trusted; an object no trusted key
// signed is refused (a failure that stops recovery, not a file that is not
// archived), even with the right content; list and verify report it.
func TestSignedPushFetch(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	root := filepath.Join(t.TempDir(), "wal")
	k := signingKey(t)
	trust := signing.Trust{k.Public()}
	signer := newArchive(t, root, c)
	signer.Sign = k
	seg1, seg2 := segment(testSysID, 1, 1), segment(testSysID, 1, 2)
	r, err := signer.Push(ctx, c.write(t, name(1, 1), seg1))
	if err != nil {
		t.Fatal(err)
	}
	o, err := walname.ParseObject(path.Base(r.Key))
	if err != nil || o.Sig == "" {
		t.Fatalf("pushed %s: %+v %v", r.Key, o, err)
	}
	if again, err := signer.Push(ctx, c.write(t, name(1, 1), seg1)); err != nil || !again.Already || again.Key != r.Key {
		t.Fatalf("the same file again: %+v %v", again, err)
	}
	// Segment 2, pushed without the key.
	plain := newArchive(t, root, c)
	r2, err := plain.Push(ctx, c.write(t, name(1, 2), seg2))
	if err != nil {
		t.Fatal(err)
	}

	fetcher := newArchive(t, root, c)
	fetcher.Trust = trust
	dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
	must(t, fetcher.Fetch(ctx, name(1, 1), dest))
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, seg1) {
		t.Fatal("the fetched segment is not the one pushed")
	}
	err = fetcher.Fetch(ctx, name(1, 2), dest)
	if !errors.Is(err, ErrUntrusted) || errors.Is(err, ErrNotArchived) || !strings.Contains(err.Error(), r2.Key) || !strings.Contains(err.Error(), "carries no signature") || !strings.Contains(err.Error(), "recovery stops") {
		t.Fatalf("Fetch of an unsigned segment: %v", err)
	}
	// Without trust, the archive reads as it always did.
	must(t, plain.Fetch(ctx, name(1, 2), dest))

	// A forged object: the right name, other content, a signature made
	// with another key.
	seg3 := segment(testSysID, 1, 3)
	forger := newArchive(t, root, c)
	forger.Sign = signingKey(t)
	r3, err := forger.Push(ctx, c.write(t, name(1, 3), seg3))
	if err != nil {
		t.Fatal(err)
	}
	err = fetcher.Fetch(ctx, name(1, 3), dest)
	if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), r3.Key) || !strings.Contains(err.Error(), "verifies with none of the trusted keys ("+k.Fingerprint()+")") {
		t.Fatalf("Fetch of a forged segment: %v", err)
	}
	// The signer pushes the same file: its object is stored beside the
	// one it does not stand for, and fetch takes the trusted one.
	r4, err := signer.Push(ctx, c.write(t, name(1, 2), seg2))
	if err != nil || r4.Already || r4.Key == r2.Key {
		t.Fatalf("a signed push of a file archived unsigned: %+v %v", r4, err)
	}
	must(t, fetcher.Fetch(ctx, name(1, 2), dest))
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, seg2) {
		t.Fatal("the fetched segment is not the one pushed")
	}

	// List and verify: the unsigned and the forged objects are
	// untrusted, their files missing unless a trusted object holds them.
	l, err := fetcher.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !l.SignaturesChecked || len(l.Untrusted) != 2 || len(l.Timelines) != 1 || l.Timelines[0].Segments != 2 || l.Timelines[0].Last != name(1, 2) {
		t.Fatalf("listing: %+v, untrusted %+v, timelines %+v", l, l.Untrusted, l.Timelines[0])
	}
	rep, err := fetcher.Verify(ctx, l, false, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Objects != 4 || len(rep.Bad) != 2 || !strings.Contains(rep.Bad[0].Error+rep.Bad[1].Error, "carries no signature") || !strings.Contains(rep.Bad[0].Error+rep.Bad[1].Error, "verifies with none") {
		t.Fatalf("verify: %+v", rep)
	}
	// Untrusted objects still go with retention.
	if before := l.Before(testSysID, 4, testSegSize); len(before) != 4 {
		t.Fatalf("Before lists %d objects, want every one of the 4", len(before))
	}
	// Without trust, list sees every object, the forged one included;
	// the second object of segment 2 counts once, and retention still
	// sees it (else it would stay forever, its name's claim gone).
	l, err = plain.List(ctx)
	if err != nil || l.SignaturesChecked || len(l.Untrusted) != 0 || l.Timelines[0].Segments != 3 {
		t.Fatalf("listing without trust: %+v %v", l, err)
	}
	if before := l.Before(testSysID, 4, testSegSize); len(before) != 4 {
		t.Fatalf("Before without trust lists %d objects, want every one of the 4", len(before))
	}
}
