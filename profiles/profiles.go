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

	"github.com/dustin/go-humanize"
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
	// Base and Rule are set for "auto": the preset it started from and
	// how it adapted it to the host and the streams.
	Base string `json:"base,omitempty"`
	Rule string `json:"rule,omitempty"`
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

// Resolve returns the named profile for host h. "auto" adapts to h, the
// streams not known (see AutoFor).
func Resolve(name string, h Host) (Profile, error) {
	return ResolveFor(name, h, 0)
}

// ResolveFor is Resolve for a pipeline expected to move streams streams
// at once (0: not known), which only "auto" adapts to.
func ResolveFor(name string, h Host, streams int) (Profile, error) {
	if name == "auto" {
		return AutoFor(h, streams), nil
	}
	return preset(name, h)
}

func preset(name string, h Host) (Profile, error) {
	h.CPUs = max(1, h.CPUs)
	for _, p := range presets {
		if p.name == name {
			r := p.resolve(h)
			r.Name, r.Description = p.name, p.desc
			return r, nil
		}
	}
	return Profile{}, fmt.Errorf("unknown profile %q; profiles are %s", name, strings.Join(Names(), ", "))
}

// AutoRule says, in a line, how "auto" chooses.
const AutoRule = "start from a preset by the host (under 2 GiB of memory conservative, as is; up to 2 CPUs balanced; up to 8 performance; more max-performance), then give every CPU an encoder: one stream gets them all (multithreaded compression of the one stream), several streams share them (one single-threaded encoder per CPU, never streams × CPUs threads); streams not known beforehand move as many at once as the preset says"

// AutoFor is the "auto" profile for host h and a pipeline expected to
// move streams streams at once (0: not known before the source lists
// them): the preset Auto picks, with workers and streams adapted. Chunk-parallel stages run a pool of
// single-threaded encoders shared by every stream of a run, so every CPU
// gets one: all of them work on the chunks of one big stream, and many
// streams share them instead of each starting a multithreaded encoder
// that would oversubscribe the CPUs.
func AutoFor(h Host, streams int) Profile {
	cpus := max(1, h.CPUs)
	base := Auto(h)
	p, _ := preset(base, h)
	p.Base = base
	switch {
	case base == "conservative":
		p.Rule = fmt.Sprintf("%s of memory: conservative, unchanged", humanize.IBytes(uint64(h.Memory)))
	case streams <= 0:
		// One big dump or a folder of many files: the preset's streams,
		// every CPU encoding whichever of them run.
		p.Workers, p.Depth = cpus, max(p.Depth, 2)
		p.Rule = fmt.Sprintf("streams not known until the source lists them: %s from %s, %d single-threaded encoders shared by up to %d streams at once (one stream gets them all)", base, cpuWord(cpus), cpus, p.Streams)
	case streams == 1:
		p.Streams, p.Workers, p.Depth = 1, cpus, max(p.Depth, 2)
		p.Rule = fmt.Sprintf("one stream at a time: %s from %s, all %d CPUs encode its chunks", base, cpuWord(cpus), cpus)
	default:
		p.Streams, p.Workers = min(streams, max(2, cpus)), cpus
		p.Rule = fmt.Sprintf("%d streams at a time: %s from %s, %d single-threaded encoders shared by %d streams at once", streams, base, cpuWord(cpus), cpus, p.Streams)
	}
	p.Name = "auto"
	p.Description = "adapts a preset to this host and to the streams that move at once"
	return p
}

func cpuWord(n int) string {
	if n == 1 {
		return "1 CPU"
	}
	return fmt.Sprintf("%d CPUs", n)
}

// Auto picks the preset "auto" starts from: under 2 GiB of memory,
// conservative; up to 2 CPUs, balanced; up to 8 CPUs, performance; more,
// max-performance.
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
