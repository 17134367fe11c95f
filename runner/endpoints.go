package runner

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
)

type endpoint struct {
	def    *pipefile.Endpoint
	name   string
	source sdk.Source
	sink   sdk.Sink
}

// configure starts every endpoint with its decoded settings; an endpoint's
// complaint points at the attribute it is about.
func configure(ctx context.Context, p *plan.Pipeline, reg *host.Registry, override sdk.Source) (*endpoint, []*endpoint, error) {
	var diags hcl.Diagnostics
	src := &endpoint{def: p.Source, name: p.Source.Type, source: override}
	if override == nil {
		ep, d, err := configureOne(ctx, p.Source, reg, p.Source.Type)
		if err != nil {
			return nil, nil, err
		}
		diags = append(diags, d...)
		src = ep
	}
	var sinks []*endpoint
	for i, def := range p.Sinks {
		name := def.Type
		if len(p.Sinks) > 1 {
			name = fmt.Sprintf("%s#%d", def.Type, i+1)
		}
		ep, d, err := configureOne(ctx, def, reg, name)
		if err != nil {
			closeAll(src, sinks)
			return nil, nil, err
		}
		diags = append(diags, d...)
		sinks = append(sinks, ep)
	}
	if diags.HasErrors() {
		closeAll(src, sinks)
		return nil, nil, &DiagError{diags}
	}
	return src, sinks, nil
}

// configureOne starts one endpoint with its decoded settings; its
// complaints point at the attributes they are about.
func configureOne(ctx context.Context, e *pipefile.Endpoint, reg *host.Registry, name string) (*endpoint, hcl.Diagnostics, error) {
	var diags hcl.Diagnostics
	vals := map[string]any{}
	for k, v := range e.Values {
		vals[k] = v
	}
	cfg := sdk.NewConfig(vals)
	ep := &endpoint{def: e, name: name}
	var ds sdk.Diagnostics
	if e.Kind == "source" {
		st, err := reg.Source(e.Type)
		if st == nil {
			return nil, nil, fmt.Errorf("source %s: %w", e.Type, errors.Join(err, errors.New("no such type")))
		}
		ep.source, ds = st.Configure(ctx, cfg)
	} else {
		kt, err := reg.Sink(e.Type)
		if kt == nil {
			return nil, nil, fmt.Errorf("sink %s: %w", e.Type, errors.Join(err, errors.New("no such type")))
		}
		ep.sink, ds = kt.Configure(ctx, cfg)
	}
	for _, d := range ds {
		sev := hcl.DiagError
		if d.Severity == sdk.Warning {
			sev = hcl.DiagWarning
		}
		rng := e.Range
		if d.Attribute != "" {
			rng = e.AttrRange(d.Attribute)
		}
		diags = append(diags, &hcl.Diagnostic{Severity: sev, Summary: fmt.Sprintf("%s %q: %s", e.Kind, e.Type, d.Summary), Detail: d.Detail, Subject: rng.Ptr()})
	}
	return ep, diags, nil
}

func closeAll(src *endpoint, sinks []*endpoint) {
	if src != nil {
		if c, ok := src.source.(io.Closer); ok {
			c.Close()
		}
	}
	for _, s := range sinks {
		if c, ok := s.sink.(io.Closer); ok {
			c.Close()
		}
	}
}

// where names the attribute that says what a source reads, as written.
func where(src *endpoint) string {
	if src.def == nil {
		return "settings"
	}
	for _, a := range []string{"path", "prefix", "key", "command", "database"} {
		if v := src.def.Source(a); v != "" {
			return a + " = " + v
		}
	}
	return "settings"
}

// sourceFacts is what a manifest records about the source: its type and
// the facts it described.
func sourceFacts(src *endpoint, described map[string]string) map[string]string {
	facts := map[string]string{}
	for k, v := range described {
		facts[k] = v
	}
	facts["type"] = src.def.Type
	return facts
}

// joinFacts is a source's facts with more of them; more wins.
func joinFacts(facts, more map[string]string) map[string]string {
	out := make(map[string]string, len(facts)+len(more))
	for k, v := range facts {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

// describe asks the source what it reads (a server's version, its
// databases), for the manifest; a source may check there that what it
// will read exists.
func (r *run) describe(ctx context.Context) (map[string]string, error) {
	facts := map[string]string{}
	if d, ok := r.src.source.(sdk.Describer); ok {
		var err error
		if facts, err = d.Describe(ctx); err != nil {
			return nil, fmt.Errorf("source %s: describing what it reads: %w", r.src.name, err)
		}
	}
	return facts, nil
}

// conclude adds to facts what the source learned by reading (see
// sdk.Concluder). Damage it found goes to the report instead: the run is
// stored all the same, and named (see sdk.FactDamage).
func (r *run) conclude(ctx context.Context, facts map[string]string) (map[string]string, error) {
	c, ok := r.src.source.(sdk.Concluder)
	if !ok {
		return facts, nil
	}
	more, err := c.Conclude(ctx)
	if err != nil {
		return nil, fmt.Errorf("source %s: concluding what it read: %w", r.src.name, err)
	}
	if d := more[sdk.FactDamage]; d != "" {
		if r.o.Scrub != nil {
			d = r.o.Scrub(d)
		}
		r.rep.Damage = oneLine(d)
		delete(more, sdk.FactDamage)
	}
	return joinFacts(facts, more), nil
}
