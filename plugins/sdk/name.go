package sdk

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLength bounds a stream's name in bytes.
const MaxNameLength = 1024

// CheckStreamName says why name cannot name a stream, or returns nil. A
// stream's name becomes part of object keys and file paths, so it must be a
// slash-separated relative path that stays inside its folder: not empty, no
// leading "/", no "", "." or ".." element, no NUL, newline or other control
// character, valid UTF-8, at most MaxNameLength bytes. pipe checks every name
// a source yields before a byte moves; sources can check theirs with it
// when they are configured.
func CheckStreamName(name string) error {
	switch {
	case name == "":
		return errors.New("a stream name cannot be empty")
	case len(name) > MaxNameLength:
		return fmt.Errorf("a stream name is at most %d bytes, this one has %d", MaxNameLength, len(name))
	case !utf8.ValidString(name):
		return fmt.Errorf("%q is not valid UTF-8", name)
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("%q is an absolute path; a stream name is relative to its folder", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q holds a control character (%U); a stream name holds printable characters only", name, r)
		}
	}
	for _, elem := range strings.Split(name, "/") {
		switch elem {
		case "..":
			return fmt.Errorf("%q climbs out of its folder with \"..\"", name)
		case "", ".":
			return fmt.Errorf("%q has an empty or \".\" path element", name)
		}
	}
	return nil
}
