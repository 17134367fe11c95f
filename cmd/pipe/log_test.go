package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/profiles"
)

func TestTextHandler(t *testing.T) {
	var buf bytes.Buffer
	f := logFlags{format: "text", level: "debug"}
	l, err := f.newLogger(&buf, newRedactor())
	if err != nil {
		t.Fatal(err)
	}
	l.Warn("disk almost full", "free", "3 GiB", "n", 2)
	l.With("plugin", "s3").Error("gave up", "error", errors.New("timeout"))
	l.WithGroup("g").Debug("detail", "k", "v")
	l.Info("plain")
	want := `Warning: disk almost full free="3 GiB" n=2
Error: plugin s3: gave up error=timeout
debug: detail g.k=v
plain
`
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestLogFlagErrors(t *testing.T) {
	for _, f := range []logFlags{{format: "yaml"}, {format: "text", level: "loud"}} {
		if _, err := f.newLogger(&bytes.Buffer{}, newRedactor()); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}

// TestRedactBySchema: once a file is loaded, the values of its secret
// attributes never print, in messages, attributes, lists or groups, and
// an attribute named like a secret one prints as (sensitive).
func TestRedactBySchema(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.hcl")
	os.WriteFile(path, []byte(`pipeline "p" {
  source "fs" { path = "in" }
  compress {}
  encrypt { passphrase = "correct-horse-battery" }
  sink "fs" { path = "out/" }
}
`), 0o644)
	reg, err := newRegistry(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	file, diags := pipefile.Load(path, pipefile.Options{Schemas: reg})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	p, diags := plan.New(file, plan.Options{Host: profiles.Host{CPUs: 2, Memory: 8 << 30}})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		r := newRedactor()
		f := logFlags{format: format, level: "debug"}
		l, _ := f.newLogger(&buf, r)
		r.learn(p)
		l.Warn("opening with correct-horse-battery failed", "error", errors.New("bad key correct-horse-battery"),
			"list", []string{"a", "xcorrect-horse-batteryx"}, slog.Group("g", "inner", "correct-horse-battery"), "passphrase", "anything")
		l.With("plugin", "x", "dsn", "correct-horse-battery").Info("bound")
		out := buf.String()
		if strings.Contains(out, "correct-horse-battery") || strings.Contains(out, "anything") {
			t.Errorf("%s: a secret printed:\n%s", format, out)
		}
		if strings.Count(out, "(sensitive)") < 5 {
			t.Errorf("%s: expected the secrets replaced:\n%s", format, out)
		}
	}
}

// TestRetryTap: records with event = "retry" reach the hook with the
// plugin's name even when the level printed is above them.
func TestRetryTap(t *testing.T) {
	var buf bytes.Buffer
	f := logFlags{format: "text", level: "error"}
	l, _ := f.newLogger(&buf, newRedactor())
	var got []string
	f.onRetryDo(func(endpoint string) { got = append(got, endpoint) })
	l.Warn("retrying", "event", "retry", "plugin", "builtin")
	l.With("plugin", "mine").Warn("retrying", "event", "retry")
	l.Warn("retrying", "event", "retry", "plugin", "builtin", "endpoint", "s3")
	l.With("plugin", "builtin", "endpoint", "gcs").Warn("retrying", "event", "retry")
	l.Warn("not a retry", "plugin", "builtin")
	l.Warn("retrying", "event", "retry", "plugin", "x", "endpoint", "https://user:pw@host/bucket")
	l.Warn("retrying", "event", "retry", "plugin", "https://user:pw@host", "endpoint", "")
	if strings.Join(got, ",") != "builtin,mine,s3,gcs,x,unknown" {
		t.Fatalf("retries seen: %v", got)
	}
	if buf.Len() != 0 {
		t.Fatalf("warnings printed at --log-level error: %q", buf.String())
	}
}

// TestJSONLogs runs a backup with --log-format json: stderr is JSON lines
// only, among them the plugin process's record (with the plugin's name)
// and the pipeline's end with the bytes moved; no secret anywhere.
func TestJSONLogs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	data := bytes.Repeat([]byte("pipe logs\n"), 50_000)
	os.WriteFile("in", data, 0o644)
	os.WriteFile("p.hcl", []byte(`pipeline "p" {
  source "exec" { command = ["cat", "in"] }
  compress {}
  encrypt { passphrase = "correct-horse-battery" }
  sink "fs" { path = "st/" }
}
`), 0o644)
	var stdout, stderr bytes.Buffer
	if code := execute(&stdout, &stderr, []string{"run", "p.hcl", "--log-format", "json"}); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "correct-horse-battery") {
		t.Fatal("the passphrase printed")
	}
	var msgs []string
	var finished map[string]any
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		msgs = append(msgs, rec["msg"].(string))
		switch rec["msg"] {
		case "program started":
			if rec["plugin"] != "builtin" || rec["program"] != "cat" || rec["level"] != "INFO" {
				t.Errorf("the plugin's record: %v", rec)
			}
		case "pipeline finished":
			finished = rec
		}
	}
	if !strings.Contains(strings.Join(msgs, "|"), "pipeline started|program started|") || finished == nil {
		t.Fatalf("records: %v", msgs)
	}
	if finished["bytes_read"] != float64(len(data)) || finished["ok"] != true || finished["pipeline"] != "p" {
		t.Fatalf("pipeline finished: %v", finished)
	}
}

// TestPluginLogLevel: the plugin process's records below the level pipe
// prints are dropped; at debug they show.
func TestPluginLogLevel(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	os.WriteFile("p.hcl", []byte(`pipeline "p" {
  source "exec" { command = ["echo", "hi"] }
  sink "fs" {
    path      = "st/"
    overwrite = true # every level runs the same backup
  }
}
`), 0o644)
	for _, tc := range []struct {
		level string
		want  bool
	}{{"warn", false}, {"debug", true}} {
		var stdout, stderr bytes.Buffer
		if code := execute(&stdout, &stderr, []string{"run", "p.hcl", "--log-level", tc.level}); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		got := false
		for _, line := range strings.Split(stderr.String(), "\n") {
			got = got || strings.HasPrefix(line, "debug: plugin builtin: program ended") && strings.Contains(line, " program=echo") && strings.Contains(line, " status=0")
		}
		if got != tc.want {
			t.Errorf("--log-level %s: the plugin's debug record shown = %v:\n%s", tc.level, got, stderr.String())
		}
	}
}
