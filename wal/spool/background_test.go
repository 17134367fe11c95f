package spool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBackground(t *testing.T) {
	comm := filepath.Join(t.TempDir(), "comm")
	defer func(old string) { initComm = old }(initComm)
	initComm = comm
	for _, c := range []struct {
		pid1, mode string
		want       bool
		why        string
	}{
		{"systemd\n", BackgroundAuto, true, "PID 1 is systemd, an init"},
		{"tini\n", BackgroundAuto, true, "an init"},
		{"pause\n", BackgroundAuto, true, "an init"},
		{"postgres\n", BackgroundAuto, false, "PID 1 is postgres, not an init pipe knows"},
		{"docker-entrypoi\n", BackgroundAuto, false, "not an init"},
		{"postgres\n", BackgroundAlways, true, `"always"`},
		{"systemd\n", BackgroundNever, false, `"never"`},
		{"", BackgroundAuto, false, "cannot be read"},
	} {
		_ = os.Remove(comm)
		if c.pid1 != "" {
			if err := os.WriteFile(comm, []byte(c.pid1), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		got, why := Background(c.mode)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("PID 1 %q, %s: %v (%s), want %v (%s)", strings.TrimSpace(c.pid1), c.mode, got, why, c.want, c.why)
		}
	}
}
