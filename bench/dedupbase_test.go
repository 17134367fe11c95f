package main

import (
	"os"
	"path/filepath"
	"testing"
)

// pagesDiffer counts a changed page, the pages only the newer file has
// (a partial last one too), and none of two equal files.
func TestPagesDiffer(t *testing.T) {
	d := t.TempDir()
	newer := make([]byte, 8192*3+100)
	newer[8192+5] = 1
	older := make([]byte, 8192*2)
	for name, b := range map[string][]byte{"newer": newer, "older": older} {
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		a, b           string
		pages, changed int64
	}{
		{"newer", "older", 4, 3},
		{"newer", "absent", 4, 4},
		{"older", "older", 2, 0},
	} {
		pages, changed, err := pagesDiffer(filepath.Join(d, c.a), filepath.Join(d, c.b))
		if err != nil || pages != c.pages || changed != c.changed {
			t.Errorf("%s against %s: %d pages, %d changed (%v), want %d and %d", c.a, c.b, pages, changed, err, c.pages, c.changed)
		}
	}
}
