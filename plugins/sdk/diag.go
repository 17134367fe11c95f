package sdk

import (
	"fmt"
	"strings"
)

// Severity says whether a diagnostic stops a run.
type Severity int

const (
	// Error diagnostics stop the run before any byte moves.
	Error Severity = iota
	// Warning diagnostics are printed and the run goes on.
	Warning
)

// Diagnostic is a problem an endpoint found in its configuration.
type Diagnostic struct {
	Severity Severity
	Summary  string
	Detail   string
	// Attribute is the name of the attribute the problem is about, or ""
	// for the block as a whole. The host turns it into a file position.
	Attribute string
}

// Diagnostics is a list of diagnostics.
type Diagnostics []Diagnostic

// HasErrors reports whether any diagnostic is an error.
func (d Diagnostics) HasErrors() bool {
	for _, x := range d {
		if x.Severity == Error {
			return true
		}
	}
	return false
}

// Err returns the errors among d as one error, or nil when there are none.
func (d Diagnostics) Err() error {
	var msgs []string
	for _, x := range d {
		if x.Severity != Error {
			continue
		}
		m := x.Summary
		if x.Attribute != "" {
			m = x.Attribute + ": " + m
		}
		if x.Detail != "" {
			m += ": " + x.Detail
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// AttrError returns a one-element Diagnostics with an error about attr.
func AttrError(attr, summary, detail string) Diagnostics {
	return Diagnostics{{Severity: Error, Attribute: attr, Summary: summary, Detail: detail}}
}
