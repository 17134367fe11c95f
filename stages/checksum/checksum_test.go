package checksum

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/engine/stagetest"
)

func TestDigest(t *testing.T) {
	data := map[string][]byte{"a": []byte("hello"), "empty": {}, "big": make([]byte, 100_000)}
	out, res, err := stagetest.Run(t, []engine.Stage{Stage()}, 4096, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Streams {
		sum := sha256.Sum256(data[s.Name])
		if want := "sha256:" + hex.EncodeToString(sum[:]); s.Observed["checksum"] != want {
			t.Fatalf("%s: %s, want %s", s.Name, s.Observed["checksum"], want)
		}
		if string(out[s.Name]) != string(data[s.Name]) {
			t.Fatalf("%s: checksum changed the data", s.Name)
		}
	}
}

func TestVerify(t *testing.T) {
	sum := sha256.Sum256([]byte("hello"))
	good := "sha256:" + hex.EncodeToString(sum[:])
	o, err := Verify(good, `object "a.zst"`)
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("hel"))
	o.Write([]byte("lo"))
	if _, err := o.Finish(); err != nil {
		t.Fatal(err)
	}
	o, _ = Verify(good, `object "a.zst"`)
	o.Write([]byte("hellO"))
	if _, err := o.Finish(); err == nil || !strings.Contains(err.Error(), `object "a.zst" does not match its recorded digest`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := Verify("md5:abc", "x"); err == nil {
		t.Fatal("md5 accepted")
	}
}
