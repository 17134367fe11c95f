// Package promtest reads, for tests, the Prometheus metrics pipe exposes:
// the text exposition it serves (--metrics-addr) or writes
// (--metrics-textfile), or decoded families (a Pushgateway's body), as
// series by metric name and labels; and the address `pipe run` tells it
// serves them on.
package promtest

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Series is one metric's value by its labels, rendered name="value",… in
// the exposition's order (sorted by name).
type Series map[string]float64

// Parse reads a text exposition into series by metric name.
func Parse(r io.Reader) (map[string]Series, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	return Families(mfs), nil
}

// Families turns decoded metric families into series by metric name.
func Families(mfs map[string]*dto.MetricFamily) map[string]Series {
	out := map[string]Series{}
	for name, mf := range mfs {
		out[name] = Series{}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			out[name][strings.Join(ls, ",")] = v
		}
	}
	return out
}

// Find returns the value of the last series of name whose labels hold
// every one of want (each name="value"), and how many series matched.
func Find(ms map[string]Series, name string, want ...string) (float64, int) {
	var v float64
	n := 0
	for labels, x := range ms[name] {
		ok := true
		for _, w := range want {
			if !strings.Contains(","+labels+",", ","+w+",") {
				ok = false
			}
		}
		if ok {
			v, n = x, n+1
		}
	}
	return v, n
}

var served = regexp.MustCompile(`Serving metrics on (http://127\.0\.0\.1:(\d+)/metrics)`)

// ServedAt finds, in what `pipe run --metrics-addr 127.0.0.1:PORT` printed
// on stderr, the address it serves its metrics on, and the port.
func ServedAt(stderr string) (url, port string, ok bool) {
	m := served.FindStringSubmatch(stderr)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}
