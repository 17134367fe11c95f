package drill

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Check is a check block of a drill: a query whose result must be Expect,
// or whose first value must be at least AtLeast.
type Check struct {
	Name     string
	Database string
	Query    string
	// Expect is the whole result: rows on lines, columns separated by |.
	Expect    string
	HasExpect bool
	// AtLeast bounds the first column of the first row, a number (a row
	// count).
	AtLeast    float64
	HasAtLeast bool
}

// Result is what a check found.
type Result struct {
	Check   string  `json:"check"`
	OK      bool    `json:"ok"`
	Got     string  `json:"got,omitempty"`
	Want    string  `json:"want,omitempty"`
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Run runs the check on s.
func (c *Check) Run(ctx context.Context, s *Server) Result {
	start := time.Now()
	r := Result{Check: c.Name}
	got, err := s.Query(ctx, c.Database, c.Query)
	r.Seconds = time.Since(start).Seconds()
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Got = cut(got)
	switch {
	case c.HasExpect:
		r.Want = cut(c.Expect)
		r.OK = strings.TrimSpace(got) == strings.TrimSpace(c.Expect)
	case c.HasAtLeast:
		r.Want = "at least " + strconv.FormatFloat(c.AtLeast, 'f', -1, 64)
		first, _, _ := strings.Cut(strings.TrimSpace(got), "\n")
		first, _, _ = strings.Cut(first, "|")
		n, perr := strconv.ParseFloat(strings.TrimSpace(first), 64)
		if perr != nil {
			r.Error = fmt.Sprintf("the first value, %q, is not a number", first)
			return r
		}
		r.OK = n >= c.AtLeast
	default:
		r.OK = true // the query ran
	}
	return r
}

// cut keeps results short in reports.
func cut(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
