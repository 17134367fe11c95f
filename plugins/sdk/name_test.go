package sdk

import (
	"strings"
	"testing"
)

func TestCheckStreamName(t *testing.T) {
	for _, ok := range []string{"a", "shop.dump", "data/public/events.copy", "ünïcode/ok", "with space", "..a", "a..b"} {
		if err := CheckStreamName(ok); err != nil {
			t.Errorf("CheckStreamName(%q) = %v, want nil", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                        "empty",
		"../../ESC":               `".."`,
		"a/../../b":               `".."`,
		"..":                      `".."`,
		"/etc/passwd":             "absolute",
		"a//b":                    "empty",
		"a/./b":                   "empty",
		"a/":                      "empty",
		"nul\x00byte":             "control character",
		"new\nline":               "control character",
		"tab\tchar":               "control character",
		"del\x7f":                 "control character",
		"bad\xff":                 "UTF-8",
		strings.Repeat("x", 1025): "at most 1024",
	} {
		err := CheckStreamName(name)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckStreamName(%q) = %v, want an error with %q", name, err, want)
		}
	}
}
