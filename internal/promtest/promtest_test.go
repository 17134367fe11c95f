package promtest

import (
	"strings"
	"testing"
)

func TestParseAndFind(t *testing.T) {
	ms, err := Parse(strings.NewReader(`# TYPE pipe_stage_bytes_total counter
pipe_stage_bytes_total{direction="in",stage="sink s3"} 42
pipe_stage_bytes_total{direction="out",stage="source"} 7
# TYPE pipe_up gauge
pipe_up 1
`))
	if err != nil {
		t.Fatal(err)
	}
	if v, n := Find(ms, "pipe_stage_bytes_total", `stage="sink s3"`, `direction="in"`); n != 1 || v != 42 {
		t.Errorf("sink s3 in: %v (%d series)", v, n)
	}
	if _, n := Find(ms, "pipe_stage_bytes_total", `stage="sink"`); n != 0 {
		t.Errorf("a label value matched by prefix: %d series", n)
	}
	if _, n := Find(ms, "pipe_stage_bytes_total"); n != 2 {
		t.Errorf("%d series without labels to match, want 2", n)
	}
	if v, n := Find(ms, "pipe_up"); n != 1 || v != 1 {
		t.Errorf("pipe_up: %v (%d)", v, n)
	}
	if _, err := Parse(strings.NewReader("pipe_up{ 1\n")); err == nil {
		t.Error("a broken exposition parsed")
	}
}

func TestServedAt(t *testing.T) {
	url, port, ok := ServedAt("Warning: x\nServing metrics on http://127.0.0.1:40123/metrics while the run goes on\n")
	if !ok || url != "http://127.0.0.1:40123/metrics" || port != "40123" {
		t.Errorf("%q %q %v", url, port, ok)
	}
	if _, _, ok := ServedAt("pipeline \"x\" ok\n"); ok {
		t.Error("found an address in output without one")
	}
}
