package encrypt

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/engine/stagetest"
)

const chunk = 32 << 10

func newKeys(t *testing.T) (recipients, identities Keys, secret string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParseRecipients([]string{"# public key\n" + id.Recipient().String() + "\n"})
	if err != nil {
		t.Fatal(err)
	}
	i, err := ParseIdentities([]string{id.String()})
	if err != nil {
		t.Fatal(err)
	}
	return r, i, id.String()
}

func data() map[string][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 10*chunk+3)
	for i := range big {
		big[i] = byte(rng.IntN(256))
	}
	return map[string][]byte{"empty": {}, "one": {1}, "chunk": big[:chunk], "big": big, "64k": big[:64<<10]}
}

func seal(t *testing.T, k Keys) map[string][]byte {
	t.Helper()
	out, _, err := stagetest.Run(t, []engine.Stage{Stage(k)}, chunk, data())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	r, i, _ := newKeys(t)
	sealed := seal(t, r)
	out, _, err := stagetest.Run(t, []engine.Stage{DecryptStage(i)}, chunk, sealed)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range data() {
		if !bytes.Equal(out[k], want) {
			t.Fatalf("%s: %d bytes, want %d", k, len(out[k]), len(want))
		}
		if bytes.Contains(sealed[k], want) && len(want) > 8 {
			t.Fatalf("%s: plaintext visible in the sealed stream", k)
		}
	}
	if r.Fingerprints[0] != i.Fingerprints[0] || !strings.HasPrefix(r.Fingerprints[0], "sha256:") {
		t.Fatalf("fingerprints %v %v", r.Fingerprints, i.Fingerprints)
	}
}

func TestAgeToolOpensOurFiles(t *testing.T) {
	bin, err := exec.LookPath("age")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("age is not installed; make test-deps installs it")
		}
		t.Skip("age is not installed")
	}
	r, _, secret := newKeys(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key.txt")
	os.WriteFile(keyFile, []byte(secret+"\n"), 0o600)
	for k, sealed := range seal(t, r) {
		f := filepath.Join(dir, k+Ext)
		os.WriteFile(f, sealed, 0o600)
		got, err := exec.Command(bin, "-d", "-i", keyFile, f).Output()
		if err != nil {
			t.Fatalf("age -d %s: %v", k, err)
		}
		if !bytes.Equal(got, data()[k]) {
			t.Fatalf("age -d %s: wrong plaintext", k)
		}
	}
}

func TestBadInputs(t *testing.T) {
	r, i, _ := newKeys(t)
	_, other, _ := newKeys(t)
	sealed := seal(t, r)["big"]
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-100] ^= 1
	cases := map[string]struct {
		in   []byte
		keys Keys
		want string
	}{
		"wrong identity": {sealed, other, "none of the identities opens this stream"},
		"tampered":       {flipped, i, "tampered"},
		"truncated":      {sealed[:len(sealed)-5000], i, "truncated"},
		"trailing data":  {append(bytes.Clone(sealed), "extra"...), i, "decrypt"},
		"not age":        {[]byte("hello"), i, "not a valid age file"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out, _, err := stagetest.Run(t, []engine.Stage{DecryptStage(tc.keys)}, chunk, map[string][]byte{"s": tc.in})
			if err == nil {
				t.Fatalf("no error, got %d bytes", len(out["s"]))
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "decrypt") {
				t.Fatalf("err = %v, want it to name decrypt and contain %q", err, tc.want)
			}
			if _, ok := out["s"]; ok {
				t.Fatal("committed despite the error")
			}
		})
	}
}

func TestSecretsStayOut(t *testing.T) {
	_, _, secret := newKeys(t)
	broken := secret[:len(secret)-3] + "!!!"
	_, err := ParseIdentities([]string{broken})
	if err == nil {
		t.Fatal("a malformed secret key parsed")
	}
	if strings.Contains(err.Error(), secret[:20]) {
		t.Fatalf("the error repeats the secret key: %v", err)
	}
	if _, err := ParseRecipients([]string{"age1notakey"}); err == nil {
		t.Fatal("a malformed recipient parsed")
	}
}

func TestPassphrase(t *testing.T) {
	k, err := Passphrase("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	in := map[string][]byte{"s": []byte("secret data")}
	sealed, _, err := stagetest.Run(t, []engine.Stage{Stage(k)}, chunk, in)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := stagetest.Run(t, []engine.Stage{DecryptStage(k)}, chunk, sealed)
	if err != nil || string(out["s"]) != "secret data" {
		t.Fatalf("%q %v", out["s"], err)
	}
	wrong, _ := Passphrase("wrong")
	if _, _, err := stagetest.Run(t, []engine.Stage{DecryptStage(wrong)}, chunk, sealed); err == nil {
		t.Fatal("wrong passphrase decrypted")
	}
	if _, err := Passphrase(""); err == nil {
		t.Fatal("empty passphrase accepted")
	}
}

// A passphrase costs each stream one scrypt derivation's memory, and the
// budget counts it; a restore refuses a header that asks for more.
func TestPassphraseMemory(t *testing.T) {
	k, err := Passphrase("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if m := Stage(k).Memory; m < 256<<20 {
		t.Errorf("encrypt with a passphrase counts %d bytes per stream, less than scrypt's 256 MiB", m)
	}
	if m := DecryptStage(k).Memory; m < 256<<20 {
		t.Errorf("decrypt with a passphrase counts %d bytes per stream", m)
	}
	if m := Stage(Keys{}).Memory; m >= 1<<20 {
		t.Errorf("encrypt to recipients counts %d bytes per stream", m)
	}
	// Encrypted with a higher work factor than the budget counts.
	r, _ := age.NewScryptRecipient("correct horse")
	r.SetWorkFactor(scryptLogN + 1)
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, r)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("data"))
	w.Close()
	if _, err := age.Decrypt(&buf, k.Identities...); err == nil {
		t.Error("a work factor above the limit was accepted")
	}
}

// NewWriter writes a standard age file as it goes, which NewReader reads
// back; a byte changed or a file cut short fails the read, saying the data
// is truncated or was tampered with, and other keys are named as such.
func TestStreamRoundTrip(t *testing.T) {
	r, i, _ := newKeys(t)
	plain := data()["big"]
	var sealed bytes.Buffer
	w, err := NewWriter(r, &sealed)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(plain); off += 10007 {
		if _, err := w.Write(plain[off:min(off+10007, len(plain))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	open := func(b []byte) ([]byte, error) {
		rd, err := NewReader(i, bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(rd)
	}
	got, err := open(sealed.Bytes())
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("opened %d bytes (%v), not the %d sealed", len(got), err, len(plain))
	}
	changed := bytes.Clone(sealed.Bytes())
	changed[len(changed)-100] ^= 1
	for what, b := range map[string][]byte{"a byte changed": changed, "cut short": sealed.Bytes()[:sealed.Len()-100]} {
		if _, err := open(b); err == nil || !strings.Contains(err.Error(), "truncated or was tampered with") {
			t.Errorf("%s: %v", what, err)
		}
	}
	_, other, _ := newKeys(t)
	if _, err := NewReader(other, bytes.NewReader(sealed.Bytes())); err == nil || !strings.Contains(err.Error(), "encrypted to other keys") {
		t.Errorf("another identity: %v", err)
	}
}
