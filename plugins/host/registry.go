// Package host is the side of the plugin system that pipe itself runs: the
// registry of endpoint types a pipeline file may name, gathered from plugin
// sets. It knows endpoints only through the SDK's interfaces.
package host

import (
	"fmt"
	"sort"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Registry holds the endpoint types of one or more plugins.
type Registry struct {
	sources map[string]entry[sdk.SourceType]
	sinks   map[string]entry[sdk.SinkType]
	plugins []sdk.Plugin
}

type entry[T any] struct {
	t      T
	plugin string
}

// NewRegistry gathers the endpoint types of plugins. Two plugins may not
// provide the same type.
func NewRegistry(plugins ...sdk.Plugin) (*Registry, error) {
	r := &Registry{sources: map[string]entry[sdk.SourceType]{}, sinks: map[string]entry[sdk.SinkType]{}}
	for _, p := range plugins {
		for name, t := range p.Sources {
			if prev, ok := r.sources[name]; ok {
				return nil, fmt.Errorf("plugins %s and %s both provide source %q", prev.plugin, p.Name, name)
			}
			if err := t.Schema().Validate(); err != nil {
				return nil, fmt.Errorf("plugin %s: source %q: %w", p.Name, name, err)
			}
			r.sources[name] = entry[sdk.SourceType]{t, p.Name}
		}
		for name, t := range p.Sinks {
			if prev, ok := r.sinks[name]; ok {
				return nil, fmt.Errorf("plugins %s and %s both provide sink %q", prev.plugin, p.Name, name)
			}
			if err := t.Schema().Validate(); err != nil {
				return nil, fmt.Errorf("plugin %s: sink %q: %w", p.Name, name, err)
			}
			r.sinks[name] = entry[sdk.SinkType]{t, p.Name}
		}
		r.plugins = append(r.plugins, p)
	}
	return r, nil
}

// Source returns the source type called name.
func (r *Registry) Source(name string) (sdk.SourceType, bool) {
	e, ok := r.sources[name]
	return e.t, ok
}

// Sink returns the sink type called name.
func (r *Registry) Sink(name string) (sdk.SinkType, bool) {
	e, ok := r.sinks[name]
	return e.t, ok
}

// SourceSchema implements pipefile.Schemas.
func (r *Registry) SourceSchema(name string) (sdk.Schema, bool) {
	e, ok := r.sources[name]
	if !ok {
		return sdk.Schema{}, false
	}
	return e.t.Schema(), true
}

// SinkSchema implements pipefile.Schemas.
func (r *Registry) SinkSchema(name string) (sdk.Schema, bool) {
	e, ok := r.sinks[name]
	if !ok {
		return sdk.Schema{}, false
	}
	return e.t.Schema(), true
}

// SourceTypes lists the source types, sorted.
func (r *Registry) SourceTypes() []string { return keys(r.sources) }

// SinkTypes lists the sink types, sorted.
func (r *Registry) SinkTypes() []string { return keys(r.sinks) }

// Plugins lists the plugin sets in the registry.
func (r *Registry) Plugins() []sdk.Plugin { return r.plugins }

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
