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
		if p, _ := Resolve("auto", tc.h); p.Name != "auto" || p.Base != tc.want || p.Rule == "" {
			t.Errorf("auto resolved to %s from %s (%q)", p.Name, p.Base, p.Rule)
		}
	}
	if h := ThisHost(); h.CPUs < 1 || h.Memory <= 0 {
		t.Errorf("this host: %+v", h)
	}
}

// TestAutoAdapts: every CPU gets one single-threaded encoder; one stream
// gets all of them, several streams share them.
func TestAutoAdapts(t *testing.T) {
	for _, tc := range []struct {
		h                     Host
		streams               int
		workers, concurrently int
		base                  string
	}{
		{Host{CPUs: 2, Memory: 24 << 30}, 1, 2, 1, "balanced"}, // balanced alone has 1 worker
		{Host{CPUs: 2, Memory: 24 << 30}, 0, 2, 2, "balanced"}, // not known: the preset's streams
		{Host{CPUs: 2, Memory: 24 << 30}, 8, 2, 2, "balanced"}, // 8 streams share 2 encoders
		{Host{CPUs: 16, Memory: 64 << 30}, 1, 16, 1, "max-performance"},
		{Host{CPUs: 16, Memory: 64 << 30}, 0, 16, 16, "max-performance"},
		{Host{CPUs: 16, Memory: 64 << 30}, 4, 16, 4, "max-performance"},
		{Host{CPUs: 16, Memory: 64 << 30}, 64, 16, 16, "max-performance"},
		{Host{CPUs: 16, Memory: 1 << 30}, 8, 1, 1, "conservative"}, // little memory: as is
	} {
		p := AutoFor(tc.h, tc.streams)
		if p.Workers != tc.workers || p.Streams != tc.concurrently || p.Base != tc.base {
			t.Errorf("%d CPUs, %d streams: %d workers, %d streams from %s; want %d, %d from %s", tc.h.CPUs, tc.streams, p.Workers, p.Streams, p.Base, tc.workers, tc.concurrently, tc.base)
		}
		base, _ := Resolve(tc.base, tc.h)
		if p.ChunkSize != base.ChunkSize || p.PartSize != base.PartSize || p.Levels["zstd"] != base.Levels["zstd"] {
			t.Errorf("%d CPUs, %d streams: chunk, part size or level differ from %s", tc.h.CPUs, tc.streams, tc.base)
		}
		if p2, _ := ResolveFor("auto", tc.h, tc.streams); p2.Rule != p.Rule {
			t.Errorf("ResolveFor and AutoFor disagree")
		}
	}
}
