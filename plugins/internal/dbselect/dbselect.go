// Package dbselect picks databases of a server by name and pattern, for
// the database plugins' cluster modes (databases = ["*"], exclude_databases).
package dbselect

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// IsPattern reports whether an entry is a pattern (*, ? or [...]) rather
// than a name.
func IsPattern(s string) bool { return strings.ContainsAny(s, "*?[") }

// Match matches a database name against a pattern: *, ? and [...] as in
// path.Match, where a slash is a character like any other.
func Match(pattern, name string) bool {
	ok, _ := path.Match(strings.ReplaceAll(pattern, "/", "\x00"), strings.ReplaceAll(name, "/", "\x00"))
	return ok
}

// Check refuses an empty entry or a malformed pattern.
func Check(entries []string) error {
	for _, p := range entries {
		if p == "" {
			return fmt.Errorf(`an empty database name: give database names or patterns ("*", "app_*")`)
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("%q: %v (patterns use *, ? and [...])", p, err)
		}
	}
	return nil
}

// Choose picks, in the order of all, the databases include names or
// matches, less those exclude names or matches. A pattern never picks a
// database for which skip reports true (a server's maintenance or system
// databases); a name picks any. A name all lacks is an error, as is a
// choice of nothing.
func Choose(all, include, exclude []string, skip func(string) bool) ([]string, error) {
	picks := func(pats []string, name string, patterns bool) bool {
		for _, p := range pats {
			if p == name || (patterns && IsPattern(p) && Match(p, name)) {
				return true
			}
		}
		return false
	}
	for _, p := range include {
		if !IsPattern(p) && !slices.Contains(all, p) {
			return nil, fmt.Errorf("databases: %q is not a database of the server that can be reached (it has: %s)", p, strings.Join(all, ", "))
		}
	}
	var out []string
	for _, name := range all {
		if picks(include, name, skip == nil || !skip(name)) && !picks(exclude, name, true) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("databases: %s (less exclude_databases) names none of the server's databases (%s)", strconv.Quote(strings.Join(include, `", "`)), strings.Join(all, ", "))
	}
	return out, nil
}
