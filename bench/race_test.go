package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// recorder is a fake tool: its runs take the next of its walls and note
// what happened, in order, in a log the race's contenders share.
type recorder struct {
	log   *[]string
	walls []time.Duration
	fail  map[string]error // "run 1", "check 0": that step fails
}

func (f *recorder) contender(label string) *contender {
	step := func(what string, rep int) error {
		*f.log = append(*f.log, fmt.Sprintf("%s %s %d", what, label, rep))
		return f.fail[fmt.Sprintf("%s %d", what, rep)]
	}
	return &contender{label: label,
		clean: func() { *f.log = append(*f.log, "clean "+label) },
		run: func(ctx context.Context, rep int) (measurement, error) {
			wall := f.walls[rep%len(f.walls)]
			m := measurement{wall: wall, cpu: wall / 2, maxRSS: int64(rep+1) << 20,
				summary: &pipelineRun{Bottleneck: fmt.Sprintf("%s run %d", label, rep)}}
			return m, step("run", rep)
		},
		check: func(ctx context.Context, rep int) error { return step("check", rep) },
	}
}

func TestRaceRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reps     int
		noWarmup bool
		fail     map[string]error // of the reference
		wantLog  []string
		wantErr  string
	}{
		{name: "a warm-up round, then round-robin", reps: 2, wantLog: []string{
			"clean pipe", "run pipe 0", "check pipe 0", "clean ref", "run ref 0", "check ref 0",
			"clean pipe", "run pipe 1", "check pipe 1", "clean ref", "run ref 1", "check ref 1",
			"clean pipe", "run pipe 2", "check pipe 2", "clean ref", "run ref 2", "check ref 2",
		}},
		{name: "no warm-up", reps: 1, noWarmup: true, wantLog: []string{
			"clean pipe", "run pipe 1", "check pipe 1", "clean ref", "run ref 1", "check ref 1",
		}},
		{name: "a failed run stops the race", reps: 2, fail: map[string]error{"run 1": errors.New("boom")},
			wantLog: []string{
				"clean pipe", "run pipe 0", "check pipe 0", "clean ref", "run ref 0", "check ref 0",
				"clean pipe", "run pipe 1", "check pipe 1", "clean ref", "run ref 1",
			}, wantErr: "a race, ref, run 1: boom"},
		{name: "a failed check stops it too", reps: 2, fail: map[string]error{"check 0": errors.New("differs")},
			wantLog: []string{"clean pipe", "run pipe 0", "check pipe 0", "clean ref", "run ref 0", "check ref 0"},
			wantErr: "a race, ref, run 0: differs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log []string
			pipe := (&recorder{log: &log, walls: msList(500, 100, 300)}).contender("pipe")
			ref := (&recorder{log: &log, walls: msList(600, 200, 400), fail: tc.fail}).contender("ref")
			r := &race{name: "a race", bytes: 1e6, pipe: pipe, refs: []*contender{ref}, noWarmup: tc.noWarmup, noSync: true}
			err := r.run(context.Background(), tc.reps)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("run = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(log, tc.wantLog) {
				t.Errorf("the race ran\n%s\nwant\n%s", strings.Join(log, "\n"), strings.Join(tc.wantLog, "\n"))
			}
		})
	}
}

// TestRaceRecords checks what a race keeps of its runs: the timed runs
// only, in order; pipe's summaries; the largest RSS, warm-up included.
func TestRaceRecords(t *testing.T) {
	var log []string
	pipe := (&recorder{log: &log, walls: msList(900, 100, 300)}).contender("pipe")
	ref := (&recorder{log: &log, walls: msList(900, 200, 400)}).contender("ref")
	r := &race{name: "a race", bytes: 1e6, pipe: pipe, refs: []*contender{ref}, noSync: true}
	if err := r.run(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if want := msList(100, 300); !slices.Equal(pipe.times, want) {
		t.Errorf("pipe's times %v, want %v (the warm-up left out)", pipe.times, want)
	}
	if want := msList(50, 150); !slices.Equal(pipe.cpu, want) {
		t.Errorf("pipe's CPU %v, want %v", pipe.cpu, want)
	}
	if pipe.median() != ms(200) || ref.median() != ms(300) || ref.medianCPU() != ms(150) {
		t.Errorf("medians %v and %v, CPU %v", pipe.median(), ref.median(), ref.medianCPU())
	}
	if want := []string{"pipe", "ref", "pipe", "ref"}; !slices.Equal(r.runOrder, want) {
		t.Errorf("run order %v, want %v", r.runOrder, want)
	}
	if want := msList(100, 200, 300, 400); !slices.Equal(r.runTimes, want) {
		t.Errorf("run times %v, want %v", r.runTimes, want)
	}
	var named []string
	for _, s := range r.pipeRuns {
		named = append(named, s.Bottleneck)
	}
	if want := []string{"pipe run 1", "pipe run 2"}; !slices.Equal(named, want) {
		t.Errorf("pipe's summaries %v, want %v (pipe's alone, no warm-up)", named, want)
	}
	if pipe.maxRSS != 3<<20 {
		t.Errorf("pipe's peak RSS %d, want %d", pipe.maxRSS, 3<<20)
	}
}

func TestRunsAndChecks(t *testing.T) {
	ctx := context.Background()
	m, err := commands([]string{"BENCH_TEST=x"}, []string{"sh", "-c", "printf %s $BENCH_TEST"}, []string{"echo", "y"})(ctx, 1)
	if err != nil || string(m.stdout) != "xy\n" || m.wall <= 0 {
		t.Errorf("commands: %q, %v, wall %v", m.stdout, err, m.wall)
	}
	if _, err := script("true | false", nil)(ctx, 1); err == nil {
		t.Error("a script whose pipeline fails succeeded")
	}

	dir := t.TempDir()
	orig, same, other := filepath.Join(dir, "orig"), filepath.Join(dir, "same"), filepath.Join(dir, "other")
	for p, text := range map[string]string{orig: "abcdef", same: "abcdef", other: "abcxyz"} {
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		check checkFunc
		rep   int
		ok    bool
	}{
		{"the size", sizeIs(same, 6), 1, true},
		{"a wrong size", sizeIs(same, 7), 1, false},
		{"any size", sizeIs(same, -1), 1, true},
		{"no file", sizeIs(filepath.Join(dir, "none"), -1), 1, false},
		{"the same bytes", sameAs(same, orig, 6), 0, true},
		{"other bytes, checked in full at rep 0", sameAs(other, orig, 6), 0, false},
		{"other bytes, by size after", sameAs(other, orig, 6), 1, true},
	} {
		if err := tc.check(ctx, tc.rep); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	removing(same)()
	if _, err := os.Stat(same); !os.IsNotExist(err) {
		t.Errorf("removing left %s: %v", same, err)
	}
}
