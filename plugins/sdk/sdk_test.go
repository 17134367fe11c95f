package sdk

import (
	"strings"
	"testing"
	"time"
)

func TestConfigDecode(t *testing.T) {
	var c struct {
		Path    string            `pipe:"path"`
		Jobs    int               `pipe:"jobs"`
		Big     int64             `pipe:"big"`
		Tar     bool              `pipe:"tar"`
		Args    []string          `pipe:"args"`
		Env     map[string]string `pipe:"env"`
		Timeout time.Duration     `pipe:"timeout"`
		Other   string
	}
	cfg := NewConfig(map[string]any{"path": "p", "jobs": int64(4), "big": int64(1 << 40), "tar": true,
		"args": []string{"a"}, "env": map[string]string{"K": "V"}, "timeout": 3 * time.Second, "ignored": 1})
	if err := cfg.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Path != "p" || c.Jobs != 4 || c.Big != 1<<40 || !c.Tar || c.Args[0] != "a" || c.Env["K"] != "V" || c.Timeout != 3*time.Second {
		t.Fatalf("%+v", c)
	}
	if err := NewConfig(map[string]any{"path": 3}).Decode(&c); err == nil || !strings.Contains(err.Error(), `"path" holds a int`) {
		t.Fatalf("err = %v", err)
	}
	if err := cfg.Decode(c); err == nil {
		t.Fatal("decoded into a non-pointer")
	}
}

type sharedConn struct {
	Endpoint string `pipe:"endpoint"`
	Retries  int    `pipe:"retries"`
}

type SharedAuth struct {
	Token string `pipe:"token"`
}

// Settings shared by several endpoint types live in embedded structs.
func TestConfigDecodeEmbedded(t *testing.T) {
	var c struct {
		sharedConn
		*SharedAuth
		Key string `pipe:"key"`
	}
	cfg := NewConfig(map[string]any{"endpoint": "http://x", "retries": int64(3), "token": "t", "key": "k"})
	if err := cfg.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "http://x" || c.Retries != 3 || c.SharedAuth == nil || c.Token != "t" || c.Key != "k" {
		t.Fatalf("%+v %+v", c, c.SharedAuth)
	}
	if err := NewConfig(map[string]any{"retries": "many"}).Decode(&c); err == nil || !strings.Contains(err.Error(), `"retries" holds a string`) {
		t.Fatalf("err = %v", err)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{16 << 20: "16MiB", 256 << 10: "256KiB", 2 << 30: "2GiB", 5 << 40: "5TiB",
		1000: "1000 bytes", 0: "0 bytes", 1<<20 + 1: "1048577 bytes", 1536 << 10: "1536KiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSchemaValidate(t *testing.T) {
	for _, tc := range []struct {
		s    Schema
		want string
	}{
		{Schema{Attributes: []Attribute{{Name: "a", Type: String}, {Name: "a", Type: String}}}, "declared twice"},
		{Schema{Attributes: []Attribute{{Name: "k", Type: Number, Key: true}}}, "must be a string"},
		{Schema{Attributes: []Attribute{{Name: "k", Type: String, Key: true}, {Name: "j", Type: String, Key: true}}}, "at most one"},
		{Schema{Attributes: []Attribute{{Name: "n", Type: Number, Default: 3}}}, "needs a int64"},
		{Schema{Attributes: []Attribute{{Name: "r", Type: String, Required: true, Default: "x"}}}, "no default"},
		{Schema{Attributes: []Attribute{{Name: "t", Type: Type(99)}}}, "unknown type"},
	} {
		if err := tc.s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.s, err, tc.want)
		}
	}
	ok := Schema{Attributes: []Attribute{{Name: "path", Type: String, Required: true, Key: true}, {Name: "n", Type: Size, Default: int64(1)}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if a, found := ok.KeyAttribute(); !found || a.Name != "path" {
		t.Fatal("KeyAttribute")
	}
}

func TestDiagnostics(t *testing.T) {
	d := Diagnostics{{Severity: Warning, Summary: "w"}}
	if d.HasErrors() || d.Err() != nil {
		t.Fatal("a warning is not an error")
	}
	d = append(d, AttrError("path", "bad path", "no such file")...)
	if !d.HasErrors() || d.Err().Error() != "path: bad path: no such file" {
		t.Fatalf("%v", d.Err())
	}
}

func TestSecretStrings(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{"hunter22", "hunter22"},
		{"abc", ""}, // too short to scrub
		{[]string{"token-1", "x", "token-2"}, "token-1,token-2"},
		{map[string]string{"PGPASSWORD": "s3cret!"}, "s3cret!"},
		{int64(123456), ""},
		{nil, ""},
	} {
		if got := strings.Join(SecretStrings(tc.v), ","); got != tc.want {
			t.Errorf("SecretStrings(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// A secret that holds another is replaced whole, whatever the order the
// secrets come in; an empty one replaces nothing.
func TestScrub(t *testing.T) {
	msg := "dsn postgres://u:hunter2hunter2@db: token hunter2"
	want := "dsn postgres://u:(sensitive)@db: token (sensitive)"
	for _, secrets := range [][]string{{"hunter2", "hunter2hunter2", ""}, {"hunter2hunter2", "hunter2"}} {
		if got := Scrub(msg, secrets...); got != want {
			t.Errorf("Scrub(%v) = %q, want %q", secrets, got, want)
		}
	}
}
