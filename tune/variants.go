package tune

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/synthetic"
)

// Variant is one configuration the bench tries.
type Variant struct {
	Name      string           `json:"name"`
	Profile   string           `json:"profile"`
	Overrides map[string]int64 `json:"overrides,omitempty"`
}

// Planned is a pipeline planned for one variant, with its file.
type Planned struct {
	*plan.Pipeline
	File *pipefile.File
}

// PickPipeline returns the named pipeline, or the file's only one.
func PickPipeline(f *pipefile.File, name string) (*pipefile.Pipeline, error) {
	var names []string
	for _, p := range f.Pipelines {
		if p.Name == name || (name == "" && len(f.Pipelines) == 1) {
			return p, nil
		}
		names = append(names, p.Name)
	}
	sort.Strings(names)
	switch {
	case len(names) == 0:
		return nil, errors.New("the file has no pipeline")
	case name == "":
		return nil, fmt.Errorf("the file has %d pipelines (%s): bench one at a time, named by --pipeline", len(names), strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("--pipeline %s: no such pipeline (the file has %s)", name, strings.Join(names, ", "))
}

// Synthesize makes def read generated data (package synthetic) instead of
// its source, keeping the source's place in the file for diagnostics, and
// returns memory with that source buffering nothing of its own.
func Synthesize(def *pipefile.Pipeline, memory func(kind, typ string, cfg sdk.Config, streams int) int64) func(kind, typ string, cfg sdk.Config, streams int) int64 {
	def.Source = &pipefile.Endpoint{Block: pipefile.Block{Type: synthetic.Type, Range: def.Source.Range, Values: map[string]any{}},
		Kind: "source", TypeRange: def.Source.TypeRange}
	return func(kind, typ string, cfg sdk.Config, streams int) int64 {
		if kind == "source" && typ == synthetic.Type {
			return 0
		}
		return memory(kind, typ, cfg, streams)
	}
}

// Benchable refuses pipelines a trial run must not run: restores (they
// overwrite what their sinks hold), and sinks that cannot take back what
// they receive (a database loads it, a command consumes it).
func Benchable(p *Planned) error {
	if p.Restores() {
		return fmt.Errorf("pipeline %q restores (it decodes stored data into its sinks); bench tries backups only, since a trial restore would overwrite what its sinks hold", p.Name)
	}
	for _, s := range p.Sinks {
		if !s.Schema.Storage {
			return fmt.Errorf("pipeline %q writes to sink %q, which cannot take back what it receives (a database loads it, a command consumes it); bench writes only to storage (fs, s3, gcs, azure), so point a copy of the pipeline at one", p.Name, s.Type)
		}
		// A key of its own per run: a real run writing the same key while
		// the bench runs would otherwise have its object taken back.
		if s.Key == nil || !s.Key.UsesRunID() {
			return fmt.Errorf("pipeline %q: sink %q's objects have no ${run.id} in their key, so a trial run could take back an object a real run writes to the same key meanwhile; put ${run.id} in the sink's path (e.g. \"backups/${pipeline.name}/${run.id}/\") for the benchmark", p.Name, s.Type)
		}
	}
	return nil
}

// Sweep is one --sweep flag: a setting (one of plan.Knobs) and the values
// to try, as given and as numbers.
type Sweep struct {
	Knob   string
	Values []int64
	Texts  []string
}

// ParseSweeps reads --sweep KNOB=V1,V2 flags.
func ParseSweeps(flags []string) ([]Sweep, error) {
	var out []Sweep
	seen := map[string]bool{}
	for _, f := range flags {
		knob, list, ok := strings.Cut(f, "=")
		knob = strings.TrimSpace(knob)
		if !ok || list == "" {
			return nil, fmt.Errorf("--sweep %q: write --sweep KNOB=V1,V2,… (e.g. workers=1,2,4)", f)
		}
		if !slices.Contains(plan.Knobs, knob) {
			return nil, fmt.Errorf("--sweep %s: no such setting; sweep one of %s", knob, strings.Join(plan.Knobs, ", "))
		}
		if seen[knob] {
			return nil, fmt.Errorf("--sweep %s is given twice: list every value in one flag", knob)
		}
		seen[knob] = true
		s := Sweep{Knob: knob}
		for _, t := range strings.Split(list, ",") {
			t = strings.TrimSpace(t)
			n, err := knobValue(knob, t)
			if err != nil {
				return nil, fmt.Errorf("--sweep %s=%s: %v", knob, t, err)
			}
			if slices.Contains(s.Values, n) {
				return nil, fmt.Errorf("--sweep %s: %s is listed twice", knob, t)
			}
			s.Values, s.Texts = append(s.Values, n), append(s.Texts, t)
		}
		out = append(out, s)
	}
	return out, nil
}

// knobValue parses and checks one value of a knob.
func knobValue(knob, t string) (int64, error) {
	switch knob {
	case "chunk_size", "part_size":
		n, _, err := hclvalue.ParseSize(t)
		if err != nil {
			return 0, err
		}
		if knob == "chunk_size" && (n < plan.MinChunk || n > plan.MaxChunk) {
			return 0, fmt.Errorf("a chunk size is between 4KiB and 1GiB")
		}
		if n < 1 {
			return 0, fmt.Errorf("give a positive size")
		}
		return n, nil
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", t)
	}
	switch knob {
	case "workers", "streams", "concurrency":
		if n < 1 || n > 1024 {
			return 0, fmt.Errorf("give between 1 and 1024")
		}
	}
	return n, nil
}

// knobPlace says where a knob is set in the pipeline, "" when nowhere:
// sweeping it would change nothing.
func knobPlace(p *Planned, knob string) string {
	switch knob {
	case "chunk_size", "streams":
		return "pipeline"
	case "workers", "level":
		// The first stage that takes it and runs: workers of a
		// chunk-parallel stage, compress's level.
		for _, s := range p.Stages {
			if _, takes := s.Kind().Attribute(knob); takes && !s.Idle() {
				return s.Type
			}
		}
	case "part_size", "concurrency":
		for _, e := range append([]*pipefile.Endpoint{p.Source}, p.Sinks...) {
			for _, at := range e.Schema.Attributes {
				if at.Profile == knob {
					return fmt.Sprintf("%s %q", e.Kind, e.Type)
				}
			}
		}
	}
	return ""
}

// CheckKnobs refuses sweeps of settings the pipeline does not have.
func CheckKnobs(p *Planned, sweeps []Sweep) error {
	for _, s := range sweeps {
		if knobPlace(p, s.Knob) != "" {
			continue
		}
		switch s.Knob {
		case "workers":
			return fmt.Errorf("--sweep workers: pipeline %q has no compress or decompress stage, whose workers it sets", p.Name)
		case "level":
			return fmt.Errorf("--sweep level: pipeline %q does not compress", p.Name)
		default:
			return fmt.Errorf("--sweep %s: none of pipeline %q's endpoints (%s) takes %s; object stores (s3, gcs, azure) do", s.Knob, p.Name, endpointTypes(p), s.Knob)
		}
	}
	return nil
}

func endpointTypes(p *Planned) string {
	types := []string{p.Source.Type}
	for _, s := range p.Sinks {
		types = append(types, s.Type)
	}
	return strings.Join(types, ", ")
}

// Variants is every profile × every combination of the sweeps' values.
// list is --profiles: the profiles to try, comma-separated; empty, it is
// the file's profile when something is swept, else every preset and auto.
func Variants(p *Planned, list string, sweeps []Sweep, h profiles.Host) ([]Variant, error) {
	var names []string
	switch {
	case list != "":
		for _, n := range strings.Split(list, ",") {
			n = strings.TrimSpace(n)
			if _, err := profiles.Resolve(n, h); err != nil {
				return nil, fmt.Errorf("--profiles: %v", err)
			}
			if slices.Contains(names, n) {
				return nil, fmt.Errorf("--profiles: %s is listed twice", n)
			}
			names = append(names, n)
		}
	case len(sweeps) > 0:
		names = []string{fileProfile(p)}
	default:
		for _, pr := range profiles.All(h) {
			names = append(names, pr.Name)
		}
		names = append(names, "auto")
	}
	var out []Variant
	for _, name := range names {
		combos := []Variant{{Name: name, Profile: name}}
		for _, s := range sweeps {
			var next []Variant
			for _, c := range combos {
				for i, val := range s.Values {
					ov := map[string]int64{s.Knob: val}
					for k, v := range c.Overrides {
						ov[k] = v
					}
					n := s.Knob + "=" + s.Texts[i]
					if len(names) > 1 || c.Overrides != nil {
						n = c.Name + " " + n
					}
					next = append(next, Variant{Name: n, Profile: name, Overrides: ov})
				}
			}
			combos = next
		}
		out = append(out, combos...)
	}
	return out, nil
}

// fileProfile is the profile the file names (as written: "auto" stays
// "auto"), or the default's name.
func fileProfile(p *Planned) string {
	if p.ProfileFrom == "file" {
		if s := p.Def.Attrs.String("profile"); s != "" {
			return s
		}
	}
	return p.Profile.Name
}
