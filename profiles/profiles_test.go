package profiles

import (
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	h := Host{CPUs: 8, Memory: 32 << 30}
	prev := int64(0)
	for _, p := range All(h) {
		if p.ChunkSize < prev {
			t.Errorf("%s: chunk size shrinks along the presets", p.Name)
		}
		prev = p.ChunkSize
		if p.Workers < 1 || p.Streams < 1 || p.Depth < 1 || p.Levels["zstd"] < 1 || p.PartSize < 5<<20 || p.Concurrency < 1 {
			t.Errorf("%s: %+v", p.Name, p)
		}
	}
	b, _ := Resolve("balanced", h)
	if b.Workers != 4 {
		t.Errorf("balanced on 8 CPUs: %d workers, want 4", b.Workers)
	}
	one, _ := Resolve("balanced", Host{CPUs: 1})
	if one.Workers != 1 {
		t.Errorf("balanced on 1 CPU: %d workers", one.Workers)
	}
	if _, err := Resolve("fast", h); err == nil || !strings.Contains(err.Error(), "conservative, balanced, performance, max-performance, turbo, auto") {
		t.Errorf("err = %v", err)
	}
}

func TestAuto(t *testing.T) {
	for _, tc := range []struct {
		h    Host
		want string
	}{
		{Host{CPUs: 16, Memory: 1 << 30}, "conservative"},
		{Host{CPUs: 2, Memory: 24 << 30}, "balanced"},
		{Host{CPUs: 4, Memory: 8 << 30}, "performance"},
		{Host{CPUs: 32, Memory: 64 << 30}, "max-performance"},
	} {
		if got := Auto(tc.h); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.h, got, tc.want)
		}
		if p, _ := Resolve("auto", tc.h); p.Name != tc.want {
			t.Errorf("auto resolved to %s", p.Name)
		}
	}
	if h := ThisHost(); h.CPUs < 1 || h.Memory <= 0 {
		t.Errorf("this host: %+v", h)
	}
}
