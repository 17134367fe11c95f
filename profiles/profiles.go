// Package profiles holds the resource presets a pipeline starts from
// (conservative, balanced, performance, max-performance, turbo) and the
// rule by which "auto" picks one for a host. A preset resolves to concrete
// numbers for a given host; explicit settings in a pipeline file beat it.
//
// It must not import the engine, a stage or a plugin.
package profiles

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// Profile is a preset resolved for one host.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// ChunkSize is the size of the chunks the source reads, and the default
	// frame size of compress.
	ChunkSize int64 `json:"chunk_size"`
	// Workers is the default number of workers of each chunk-parallel stage.
	Workers int `json:"workers"`
	// Streams is how many streams move at once.
	Streams int `json:"streams"`
	// Depth is how many chunks queue per stream at each position.
	Depth int `json:"depth"`
	// Levels are the default compression levels by codec.
	Levels map[string]int `json:"levels"`
	// PartSize is the default part (block, chunk) size of object stores'
	// uploads and ranged downloads; Concurrency how many are in flight per
	// object.
	PartSize    int64 `json:"part_size"`
	Concurrency int   `json:"concurrency"`
}

// Host is what a profile adapts to.
type Host struct {
	CPUs   int
	Memory int64 // bytes of RAM
}

// ThisHost describes the machine pipe runs on (CPUs usable by this process,
// physical memory).
func ThisHost() Host {
	return Host{CPUs: runtime.GOMAXPROCS(0), Memory: memTotal()}
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

var presets = []struct {
	name, desc string
	resolve    func(h Host) Profile
}{
	{"conservative", "leaves the host to the database: one worker, one stream, small chunks", func(h Host) Profile {
		return Profile{ChunkSize: 1 * mib, Workers: 1, Streams: 1, Depth: 1, Levels: levels(3, 6, 1), PartSize: 8 * mib, Concurrency: 2}
	}},
	{"balanced", "half the CPUs, two streams; the default", func(h Host) Profile {
		return Profile{ChunkSize: 4 * mib, Workers: max(1, h.CPUs/2), Streams: 2, Depth: 1, Levels: levels(3, 6, 1), PartSize: 64 * mib, Concurrency: 4}
	}},
	{"performance", "every CPU, two streams, deeper queues", func(h Host) Profile {
		return Profile{ChunkSize: 8 * mib, Workers: h.CPUs, Streams: 2, Depth: 2, Levels: levels(3, 6, 1), PartSize: 64 * mib, Concurrency: 8}
	}},
	{"max-performance", "every CPU, a stream per CPU, large chunks", func(h Host) Profile {
		return Profile{ChunkSize: 16 * mib, Workers: h.CPUs, Streams: max(2, h.CPUs), Depth: 2, Levels: levels(3, 6, 1), PartSize: 64 * mib, Concurrency: 16}
	}},
	{"turbo", "every CPU, fastest compression levels, large chunks and queues", func(h Host) Profile {
		return Profile{ChunkSize: 16 * mib, Workers: h.CPUs, Streams: max(2, h.CPUs), Depth: 4, Levels: levels(1, 1, 1), PartSize: 64 * mib, Concurrency: 16}
	}},
}

func levels(zstd, gzip, lz4 int) map[string]int {
	return map[string]int{"zstd": zstd, "gzip": gzip, "lz4": lz4}
}

// Names lists the presets and "auto".
func Names() []string {
	names := make([]string, 0, len(presets)+1)
	for _, p := range presets {
		names = append(names, p.name)
	}
	return append(names, "auto")
}

// Default is the profile a pipeline without one uses.
const Default = "balanced"

// Resolve returns the named profile for host h. "auto" picks one by the
// rule of Auto.
func Resolve(name string, h Host) (Profile, error) {
	h.CPUs = max(1, h.CPUs)
	if name == "auto" {
		name = Auto(h)
	}
	for _, p := range presets {
		if p.name == name {
			r := p.resolve(h)
			r.Name, r.Description = p.name, p.desc
			return r, nil
		}
	}
	return Profile{}, fmt.Errorf("unknown profile %q; profiles are %s", name, strings.Join(Names(), ", "))
}

// Auto picks a preset from the host: under 2 GiB of memory, conservative;
// up to 2 CPUs, balanced; up to 8 CPUs, performance; more, max-performance.
func Auto(h Host) string {
	switch {
	case h.Memory > 0 && h.Memory < 2*gib:
		return "conservative"
	case h.CPUs <= 2:
		return "balanced"
	case h.CPUs <= 8:
		return "performance"
	}
	return "max-performance"
}

// All resolves every preset for h, in order from the lightest.
func All(h Host) []Profile {
	var out []Profile
	for _, p := range presets {
		r, _ := Resolve(p.name, h)
		out = append(out, r)
	}
	return out
}

// LevelNames lists the codecs a profile sets levels for.
func (p Profile) LevelNames() []string {
	names := make([]string, 0, len(p.Levels))
	for k := range p.Levels {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * kib
		}
	}
	return 0
}
