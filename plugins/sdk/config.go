package sdk

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// Config holds an endpoint's settings as the host decoded them against the
// endpoint's Schema: every declared attribute that was set or has a default,
// with the Go type its Type delivers.
type Config struct {
	values map[string]any
}

// NewConfig returns a Config holding values. The host builds it; tests of
// endpoints use it too.
func NewConfig(values map[string]any) Config {
	return Config{values: values}
}

// Get returns the value of attribute name and whether it is set.
func (c Config) Get(name string) (any, bool) {
	v, ok := c.values[name]
	return v, ok
}

// Values returns a copy of all values by attribute name.
func (c Config) Values() map[string]any {
	out := make(map[string]any, len(c.values))
	for k, v := range c.values {
		out[k] = v
	}
	return out
}

// Decode copies the values into the fields of the struct dst points to. A
// field receives the attribute named by its `pipe:"name"` tag; the field's
// type must be the Go type of the attribute's Type. Fields of embedded
// structs are filled too, so settings shared by several endpoint types can
// live in one struct. Attributes without a field are ignored; fields
// without a value keep what they hold.
//
//	type config struct {
//		Path string `pipe:"path"`
//		Tar  bool   `pipe:"tar"`
//	}
func (c Config) Decode(dst any) error {
	rv := reflect.ValueOf(dst)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("sdk: Decode needs a pointer to a struct, not %T", dst)
	}
	return c.decodeStruct(rv.Elem())
}

func (c Config) decodeStruct(rv reflect.Value) error {
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		name := f.Tag.Get("pipe")
		if name == "" && f.Anonymous {
			fv := rv.Field(i)
			if f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct {
				if fv.IsNil() {
					if !f.IsExported() {
						continue
					}
					fv.Set(reflect.New(f.Type.Elem()))
				}
				fv = fv.Elem()
			}
			if fv.Kind() == reflect.Struct {
				if err := c.decodeStruct(fv); err != nil {
					return err
				}
			}
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		v, ok := c.values[name]
		if !ok || v == nil {
			continue
		}
		val := reflect.ValueOf(v)
		fv := rv.Field(i)
		switch {
		case val.Type().AssignableTo(f.Type):
			fv.Set(val)
		case f.Type.Kind() == reflect.Int && val.Kind() == reflect.Int64:
			fv.SetInt(val.Int())
		case f.Type == reflect.TypeOf(time.Duration(0)) && val.Kind() == reflect.Int64:
			fv.SetInt(val.Int())
		default:
			return fmt.Errorf("sdk: attribute %q holds a %T; field %s is a %s", name, v, f.Name, f.Type)
		}
	}
	return nil
}

// SecretStrings returns the strings of a secret attribute's value (a
// string, or each of a list's or a map's), for the host and the plugin
// server to scrub from messages. Values under 4 bytes are left out: they
// would scrub ordinary words and digits, not secrets.
func SecretStrings(v any) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 4 {
			out = append(out, s)
		}
	}
	switch x := v.(type) {
	case string:
		add(x)
	case []string:
		for _, s := range x {
			add(s)
		}
	case map[string]string:
		for _, s := range x {
			add(s)
		}
	}
	return out
}

// Redacted stands where a secret was, in every message pipe and its
// plugins print.
const Redacted = "(sensitive)"

// Scrub replaces every secret in msg with Redacted: the longest first, so
// that a secret holding another is replaced whole. An empty secret is
// none; callers that leave short ones alone pick them with SecretStrings.
func Scrub(msg string, secrets ...string) string {
	if len(secrets) > 1 {
		secrets = slices.Clone(secrets)
		sort.SliceStable(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	}
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, Redacted)
		}
	}
	return msg
}
