package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// A scenario is one part of the benchmark, in a file of its own: it sets
// up what it needs (data, containers), builds its contenders, runs its
// races (race.go) and returns its results. Its results are either rows of
// the shared Throughput table (the local scenarios: a race per row group)
// or a section of the report of their own (a type with markdown and races
// methods). To add one: write the file, add a line to scenarios below and
// a case to report_test.go's fake report.

// scenario is one entry of the registry: the name -only knows it by, and
// what runs it and puts its results into the report.
type scenario struct {
	name string
	run  func(b *bench, ctx context.Context, rep *report) error
}

// scenarios are every scenario, in the order they run.
var scenarios = []scenario{
	rows("copy", (*bench).copyScenario),
	rows("compress", (*bench).compressScenario),
	rows("decompress", (*bench).decompressScenario),
	{"plugins", (*bench).pluginScenarios}, // two rows and the start-up cost
	own("s3", (*bench).s3Scenario),
	rows("decode", (*bench).decodeScenarios),
	own("catalog", (*bench).catalogScenario),
	own("postgres", (*bench).pgScenario),
	own("pgcluster", (*bench).pgClusterScenario),
	own("mysqlcluster", (*bench).mysqlClusterScenario),
	own("mariaphysical", (*bench).mariaPhysicalScenario),
	own("wal", (*bench).walScenario),
	own("basebackup", (*bench).baseBackupScenario),
	own("incremental", (*bench).incrementalScenario),
	own("dedup", (*bench).dedupScenario),
	own("dedupbase", (*bench).dedupBaseScenario),
	own("memory", (*bench).memoryScenario),
}

// scenarioNames are the names -only takes, as its help lists them.
func scenarioNames() []string {
	var names []string
	for _, s := range scenarios {
		if s.name != "memory" {
			names = append(names, s.name)
		}
	}
	return names
}

// runs reports whether the flags ask for the named scenario: -only names
// it, or is empty. The memory scenario runs unless -skip-memory, whatever
// -only says, so that `-only memory` (no other scenario) runs it alone.
func (c config) runs(name string) bool {
	if name == "memory" {
		return !c.skipMem
	}
	return c.only == "" || strings.Contains(","+c.only+",", ","+name+",")
}

// checkOnly fails on a name in -only that no scenario has.
func checkOnly(only string) error {
	if only == "" {
		return nil
	}
	for _, name := range strings.Split(only, ",") {
		if name != "" && name != "memory" && !slices.Contains(scenarioNames(), name) {
			return fmt.Errorf("-only: no scenario %q; the scenarios: %s (and memory)", name, strings.Join(scenarioNames(), ", "))
		}
	}
	return nil
}

// rows registers a scenario whose races are rows of the Throughput table.
func rows(name string, f func(*bench, context.Context) ([]*race, error)) scenario {
	return scenario{name, func(b *bench, ctx context.Context, rep *report) error {
		rs, err := f(b, ctx)
		if err != nil {
			return err
		}
		rep.throughput = append(rep.throughput, rs...)
		return nil
	}}
}

// own registers a scenario with a section of its own.
func own[S section](name string, f func(*bench, context.Context) (S, error)) scenario {
	return scenario{name, func(b *bench, ctx context.Context, rep *report) error {
		s, err := f(b, ctx)
		if err != nil {
			return err
		}
		rep.add(name, s)
		return nil
	}}
}

// bench holds what the scenarios share.
type bench struct {
	cfg  config
	data string // the data set
	size int64  // its size, the basis of every throughput
	work string // outputs go here
	hcl  string // pipeline files go here

	zst string // pipe's compressed data set, kept for the decompress scenario
}

// dataLabel is the data set, as the Throughput table's data column says it.
func (b *bench) dataLabel() string {
	return fmt.Sprintf("pg_dump text, %s", mb(b.size))
}
