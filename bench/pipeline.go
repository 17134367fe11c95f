package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hclString quotes s as an HCL string literal: JSON escapes plus HCL's
// template sequences.
func hclString(s string) string {
	b, _ := json.Marshal(s)
	q := string(b)
	q = strings.ReplaceAll(q, "${", "$${")
	q = strings.ReplaceAll(q, "%{", "%%{")
	return q
}

func hclList(items ...string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = hclString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// writePipeline writes a one-pipeline file called name.hcl into dir,
// declaring secrets as sensitive variables (given as PIPE_VAR_<name>).
func writePipeline(dir, name, body string, secrets ...string) (string, error) {
	path := filepath.Join(dir, name+".hcl")
	var vars strings.Builder
	for _, v := range secrets {
		fmt.Fprintf(&vars, "variable %s {\n  sensitive = true\n}\n\n", hclString(v))
	}
	text := fmt.Sprintf("# Written by go run ./bench.\n%spipeline %s {\n%s}\n", vars.String(), hclString(name), body)
	return path, os.WriteFile(path, []byte(text), 0o644)
}

// runSummary is the part of `pipe run --json` the benchmark reads.
type runSummary struct {
	OK        bool          `json:"ok"`
	Pipelines []pipelineRun `json:"pipelines"`
}

type pipelineRun struct {
	Pipeline     string       `json:"pipeline"`
	OK           bool         `json:"ok"`
	Error        string       `json:"error"`
	Seconds      float64      `json:"duration_seconds"`
	BytesRead    int64        `json:"bytes_read"`
	BytesWritten int64        `json:"bytes_written"`
	Bottleneck   string       `json:"bottleneck"`
	Stages       []stageMeter `json:"stages"`
	Memory       struct {
		Budget      int64 `json:"budget_bytes"`
		Buffers     int   `json:"buffers"`
		PeakBuffers int   `json:"peak_buffers"`
	} `json:"memory"`
}

type stageMeter struct {
	Name        string  `json:"name"`
	Label       string  `json:"label"`
	Workers     int     `json:"workers"`
	BytesIn     int64   `json:"bytes_in"`
	BytesOut    int64   `json:"bytes_out"`
	BusyNS      int64   `json:"busy_ns"`
	WaitInNS    int64   `json:"wait_input_ns"`
	BlockedNS   int64   `json:"blocked_output_ns"`
	Utilization float64 `json:"utilization"`
	Throughput  float64 `json:"throughput_bytes_per_sec"`
}

// runPipe runs `pipe run FILE --json --progress never` as a user would and
// checks that the run succeeded and read want bytes (want < 0: any); the
// measurement holds pipe's summary of the run.
func runPipe(ctx context.Context, pipe, file string, want int64, env ...string) (measurement, error) {
	return runPipeWith(ctx, timeCommand, pipe, file, want, env...)
}

// runPipeRSS is runPipe that also follows the memory of pipe and its
// plugin processes (treeRSS).
func runPipeRSS(ctx context.Context, pipe, file string, want int64, env ...string) (measurement, error) {
	return runPipeWith(ctx, timeCommandRSS, pipe, file, want, env...)
}

func runPipeWith(ctx context.Context, measure func(context.Context, []string, ...string) (measurement, error), pipe, file string, want int64, env ...string) (measurement, error) {
	m, err := measure(ctx, []string{pipe, "run", file, "--json", "--progress", "never"}, env...)
	if err != nil {
		return m, err
	}
	var s runSummary
	if err := json.Unmarshal(m.stdout, &s); err != nil {
		return m, fmt.Errorf("pipe run %s: reading its JSON summary: %w", file, err)
	}
	if !s.OK || len(s.Pipelines) != 1 || !s.Pipelines[0].OK {
		return m, fmt.Errorf("pipe run %s did not succeed: %s", file, m.stdout)
	}
	m.summary = &s.Pipelines[0]
	if want >= 0 && m.summary.BytesRead != want {
		return m, fmt.Errorf("pipe run %s read %d bytes, want %d", file, m.summary.BytesRead, want)
	}
	return m, nil
}

// planBudget returns the memory budget `pipe plan --json` gives the file's
// only pipeline.
func planBudget(ctx context.Context, pipe, file string) (int64, error) {
	return planBudgetIn(ctx, "", pipe, file)
}

// planBudgetIn is planBudget with pipe plan run in dir, where the
// file's relative paths start.
func planBudgetIn(ctx context.Context, dir, pipe, file string) (int64, error) {
	m, err := runCommandIn(ctx, dir, []string{pipe, "plan", file, "--json"}, false)
	if err != nil {
		return 0, err
	}
	var p struct {
		Pipelines []struct {
			Memory struct {
				Budget int64 `json:"budget"`
			} `json:"memory_bytes"`
		} `json:"pipelines"`
	}
	if err := json.Unmarshal(m.stdout, &p); err != nil {
		return 0, fmt.Errorf("pipe plan %s --json: %w", file, err)
	}
	if len(p.Pipelines) != 1 || p.Pipelines[0].Memory.Budget <= 0 {
		return 0, fmt.Errorf("pipe plan %s --json gave no memory budget: %s", file, m.stdout)
	}
	return p.Pipelines[0].Memory.Budget, nil
}
