package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/profiles"
)

func TestRecommend(t *testing.T) {
	const mib = 1 << 20
	row := func(name string, rate float64, budget int64, stored int64) benchRow {
		return benchRow{variant: variant{Name: name}, ReadPerSec: rate, Budget: budget, ReadBytes: 400 * mib, StoredBytes: stored}
	}
	for _, tc := range []struct {
		name   string
		rows   []benchRow
		want   string
		reason string
	}{
		{"fastest", []benchRow{row("a", 100, 100, 100*mib), row("b", 200, 300, 100*mib), row("c", 150, 50, 100*mib)},
			"b", "the fastest (200 B/s), 33% ahead of c"},
		{"within 5% and smaller", []benchRow{row("a", 100, 100, 100*mib), row("b", 200, 300, 100*mib), row("c", 192, 200, 100*mib)},
			"c", "within 5% of the fastest, b (192 B/s against 200 B/s), with a memory budget of 200 B instead of 300 B"},
		{"tie on budget: the faster", []benchRow{row("a", 199, 100, 100*mib), row("b", 200, 100, 100*mib)},
			"b", "the fastest (200 B/s), 1% ahead of a"},
		{"worse ratio is said", []benchRow{row("level3", 100, 100, 100*mib), row("level1", 200, 100, 150*mib)},
			"level1", "it stores 50% more than level3 (2.67× against 4.00×)"},
		{"one", []benchRow{row("only", 10, 1, 1)}, "only", "the only variant tried"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, reason := recommend(tc.rows)
			if tc.rows[i].Name != tc.want || !strings.Contains(reason, tc.reason) {
				t.Fatalf("recommend = %s, %q; want %s, %q", tc.rows[i].Name, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestWriteProfileRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(src string) (string, error) {
		p := filepath.Join(dir, "p.hcl")
		os.WriteFile(p, []byte(src), 0o640)
		err := writeProfile(p, "p", "turbo")
		b, _ := os.ReadFile(p)
		return string(b), err
	}
	const byVar = "variable \"prof\" { default = \"balanced\" }\npipeline \"p\" {\n  profile = var.prof\n}\n"
	if got, err := write(byVar); err == nil || !strings.Contains(err.Error(), "is an expression") || got != byVar {
		t.Errorf("a profile set by a variable: err %v, file %q", err, got)
	}
	const oneLine = "pipeline \"p\" { streams = 2 }\n"
	if got, err := write(oneLine); err == nil || !strings.Contains(err.Error(), "one line") || got != oneLine {
		t.Errorf("a pipeline on one line: err %v, file %q", err, got)
	}
	if _, err := write("pipeline \"q\" {\n}\n"); err == nil || !strings.Contains(err.Error(), `no pipeline "p"`) {
		t.Errorf("no such pipeline: err %v", err)
	}
	got, err := write("pipeline \"p\" {\n}\n")
	if err != nil || got != "pipeline \"p\" {\n  profile = \"turbo\"\n}\n" {
		t.Errorf("an empty block: err %v, file %q", err, got)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "p.hcl")); fi.Mode().Perm() != 0o640 {
		t.Errorf("the file's mode changed to %v", fi.Mode().Perm())
	}
}

func TestBenchVariants(t *testing.T) {
	sweeps, err := parseSweeps([]string{"workers=1,2", "chunk_size=64KiB, 1MiB"})
	if err != nil {
		t.Fatal(err)
	}
	if sweeps[1].values[1] != 1<<20 {
		t.Fatalf("chunk_size values %v", sweeps[1].values)
	}
	p := &benchPlanned{}
	vs, err := benchVariants(p, "conservative,turbo", sweeps, profiles.Host{CPUs: 2, Memory: 8 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	want := "conservative workers=1 chunk_size=64KiB|conservative workers=1 chunk_size=1MiB|conservative workers=2 chunk_size=64KiB|conservative workers=2 chunk_size=1MiB|" +
		"turbo workers=1 chunk_size=64KiB|turbo workers=1 chunk_size=1MiB|turbo workers=2 chunk_size=64KiB|turbo workers=2 chunk_size=1MiB"
	if got := strings.Join(names, "|"); got != want {
		t.Fatalf("variants\n%s\nwant\n%s", got, want)
	}
	if ov := vs[3].Overrides; ov["workers"] != 2 || ov["chunk_size"] != 1<<20 || vs[3].Profile != "conservative" {
		t.Fatalf("variant %s: profile %s, overrides %v", vs[3].Name, vs[3].Profile, ov)
	}
	for _, bad := range [][]string{{"workers"}, {"workers=1", "workers=2"}, {"workers=1,1"}, {"level=x"}, {"part_size=0"}} {
		if _, err := parseSweeps(bad); err == nil {
			t.Errorf("--sweep %v was accepted", bad)
		}
	}
}

// A variant's runs add up: bytes over the total time, busy time over the
// total time × workers.
func TestMeasureRuns(t *testing.T) {
	run := func(read, stored int64, busy time.Duration) benchRun {
		return benchRun{wall: time.Second, res: &engine.Result{Meters: []engine.MeterReport{
			{Name: "source", Workers: 1, BytesOut: read, Busy: busy / 4},
			{Name: "compress", Workers: 2, BytesIn: read, BytesOut: stored, Busy: busy},
			{Name: "sink fs", Workers: 1, BytesIn: stored, Busy: busy / 8},
		}}}
	}
	row := measure(variant{Name: "v"}, 1<<20, []benchRun{run(300, 100, 2*time.Second), run(100, 50, time.Second)}, false)
	if row.Runs != 2 || row.Seconds != 2 || row.ReadBytes != 400 || row.StoredBytes != 150 || row.ReadPerSec != 200 || row.StoredPerSec != 75 {
		t.Fatalf("row %+v", row)
	}
	if c := row.Stages[1]; c.Utilization != 0.75 || row.Bottleneck != "compress" {
		t.Fatalf("compress utilization %v (want 3s busy / (2s × 2) = 0.75), bottleneck %s", c.Utilization, row.Bottleneck)
	}
}
