package sdk

import (
	"fmt"
	"time"
)

// Type is the type of a config attribute.
type Type int

const (
	// String is a Go string.
	String Type = iota + 1
	// Number is a Go int64 (config numbers are whole).
	Number
	// Bool is a Go bool.
	Bool
	// StringList is a Go []string.
	StringList
	// StringMap is a Go map[string]string.
	StringMap
	// Size is a byte size written like "64MiB"; the endpoint gets an int64
	// number of bytes.
	Size
	// Duration is a time span written like "30s"; the endpoint gets a
	// time.Duration.
	Duration
)

func (t Type) String() string {
	switch t {
	case String:
		return "string"
	case Number:
		return "number"
	case Bool:
		return "bool"
	case StringList:
		return "list(string)"
	case StringMap:
		return "map(string)"
	case Size:
		return "size"
	case Duration:
		return "duration"
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// FormatSize writes a byte count exactly, the way a pipeline file would,
// for messages about Size attributes and for settings pipe writes: "16MiB",
// "256KiB", "2GiB", or "1000 bytes" when no unit divides it. The host's
// pipefile.HumanSize is the rounded one for reading ("16 MiB", "1.5 GiB").
func FormatSize(n int64) string {
	const kib = 1 << 10
	for _, u := range []struct {
		n    int64
		name string
	}{{kib << 30, "TiB"}, {kib << 20, "GiB"}, {kib << 10, "MiB"}, {kib, "KiB"}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// Attribute declares one config attribute of an endpoint.
type Attribute struct {
	Name string
	Type Type
	// Required attributes must be set, and set to something: a required
	// string or list may not be empty.
	Required    bool
	Description string
	// Default is used when the attribute is absent. Its Go type is the one
	// Config delivers for Type (string, int64, bool, []string,
	// map[string]string, int64 for Size, time.Duration for Duration).
	Default any
	// Secret attributes are never printed: not in plans, logs, errors or
	// manifests. The host also scrubs their values from any error text.
	Secret bool
	// Key marks the string attribute that says where each object goes (a
	// sink's path or object key). The host renders it once per stream, with
	// ${stream.name} and ${stream.ext} known, and passes the result as
	// Object.Key; it is not part of the Config given to Configure. A sink
	// has at most one key attribute.
	Key bool
	// Profile names the profile setting that supplies the attribute's
	// value when the file does not set it: "part_size" (a Size) or
	// "concurrency" (a Number). It beats Default.
	Profile string
	// Public marks a value that becomes part of stream or object names
	// (a source's path or prefix, a database's name): names are printed
	// and stored, so pipe refuses a sensitive value in it.
	Public bool
	// StreamName marks a string attribute whose value is a stream's name
	// (an exec source's name): pipe checks it with CheckStreamName when it
	// loads the file. It implies Public.
	StreamName bool
	// Consumer marks a bool attribute of a storage sink that, set to true,
	// makes the sink a consumer of its streams instead (the fs sink's
	// untar extracts archives): it keeps nothing a restore reads back, so
	// pipe writes it no manifest and applies no retention.
	Consumer bool
	// Target marks a string attribute of a sink that holds the point the
	// restored data is recovered to: a time (RFC 3339, or PostgreSQL's
	// "2026-11-26 10:00:00+00") or a position in PostgreSQL's write-ahead
	// log ("0/3000060", see ParseLSN). A recovery goes forward from the
	// end of the run it restores, so pipe reads a run that ended before
	// it: unless the storage source names a run (run or before), the
	// newest such run; a run named that ended after it is refused.
	Target bool
}

// Schema declares an endpoint's configuration.
type Schema struct {
	Description string
	Attributes  []Attribute
	// Storage is true for sinks that keep objects which a later restore
	// reads back (files, buckets). The host writes the run's manifest to
	// storage sinks only; a sink that feeds a consumer (a command's stdin, a
	// database) gets no manifest. A source sets it when it reads what such
	// a sink wrote: a restore from a folder or prefix of it reads only runs
	// whose manifest it finds (see Selection).
	Storage bool
	// ExclusiveCreate is true for storage sinks that honour
	// Object.Exclusive: their Commit creates an object only if none exists
	// at its key, atomically. A WAL archive needs it, so that of two
	// servers archiving different files under one name exactly one wins.
	ExclusiveCreate bool
}

// Attribute returns the attribute called name, if declared.
func (s Schema) Attribute(name string) (Attribute, bool) {
	for _, a := range s.Attributes {
		if a.Name == name {
			return a, true
		}
	}
	return Attribute{}, false
}

// KeyAttribute returns the sink's key attribute, if it has one.
func (s Schema) KeyAttribute() (Attribute, bool) {
	for _, a := range s.Attributes {
		if a.Key {
			return a, true
		}
	}
	return Attribute{}, false
}

// Validate reports mistakes in the schema itself (for plugin authors' tests).
func (s Schema) Validate() error {
	seen := map[string]bool{}
	keys := 0
	for _, a := range s.Attributes {
		if a.Name == "" {
			return fmt.Errorf("attribute with empty name")
		}
		if seen[a.Name] {
			return fmt.Errorf("attribute %q declared twice", a.Name)
		}
		seen[a.Name] = true
		if a.Type < String || a.Type > Duration {
			return fmt.Errorf("attribute %q: unknown type %d", a.Name, a.Type)
		}
		if a.StreamName && a.Type != String {
			return fmt.Errorf("attribute %q: a stream name must be a string", a.Name)
		}
		if a.Target && a.Type != String {
			return fmt.Errorf("attribute %q: a point in time is a string", a.Name)
		}
		if a.Consumer && a.Type != Bool {
			return fmt.Errorf("attribute %q: a consumer switch must be a bool", a.Name)
		}
		if a.Key {
			keys++
			if a.Type != String {
				return fmt.Errorf("attribute %q: a key attribute must be a string", a.Name)
			}
		}
		switch a.Profile {
		case "":
		case "part_size":
			if a.Type != Size {
				return fmt.Errorf("attribute %q: the profile's part_size is a size", a.Name)
			}
		case "concurrency":
			if a.Type != Number {
				return fmt.Errorf("attribute %q: the profile's concurrency is a number", a.Name)
			}
		default:
			return fmt.Errorf("attribute %q: no profile setting %q (part_size, concurrency)", a.Name, a.Profile)
		}
		if a.Required && a.Default != nil {
			return fmt.Errorf("attribute %q: required attributes have no default", a.Name)
		}
		if a.Default != nil {
			if err := checkGoType(a.Type, a.Default); err != nil {
				return fmt.Errorf("attribute %q: default: %w", a.Name, err)
			}
		}
	}
	if keys > 1 {
		return fmt.Errorf("%d key attributes; at most one is allowed", keys)
	}
	return nil
}

func checkGoType(t Type, v any) error {
	ok := false
	switch t {
	case String:
		_, ok = v.(string)
	case Number, Size:
		_, ok = v.(int64)
	case Bool:
		_, ok = v.(bool)
	case StringList:
		_, ok = v.([]string)
	case StringMap:
		_, ok = v.(map[string]string)
	case Duration:
		_, ok = v.(time.Duration)
	}
	if !ok {
		return fmt.Errorf("a %s attribute needs a %s value, not %T", t, goTypeName(t), v)
	}
	return nil
}

func goTypeName(t Type) string {
	switch t {
	case String:
		return "string"
	case Number, Size:
		return "int64"
	case Bool:
		return "bool"
	case StringList:
		return "[]string"
	case StringMap:
		return "map[string]string"
	case Duration:
		return "time.Duration"
	}
	return "?"
}
