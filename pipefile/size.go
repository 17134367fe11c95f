package pipefile

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/dustin/go-humanize"
)

// ParseSize reads a byte size such as "8MiB", "512KiB" or "1GiB". SI units
// ("8MB" = 8,000,000 bytes) are accepted with a warning, since chunk and
// part sizes are almost always meant in binary units.
func ParseSize(s string) (n int64, warning string, err error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, "", fmt.Errorf("empty size")
	}
	if !unicode.IsDigit(rune(t[0])) {
		return 0, "", fmt.Errorf("%q is not a size: write a number and a unit, e.g. \"8MiB\"", s)
	}
	v, err := humanize.ParseBytes(t)
	if err != nil {
		return 0, "", fmt.Errorf("%q is not a size: write a number and a unit, e.g. \"8MiB\" (units: B, KiB, MiB, GiB, TiB)", s)
	}
	if v > 1<<50 {
		return 0, "", fmt.Errorf("%q is larger than 1 PiB", s)
	}
	num := strings.TrimRight(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
	unit := strings.ToLower(strings.TrimSpace(t[len(num):]))
	if unit != "" && unit != "b" && !strings.Contains(unit, "i") {
		bin := strings.ToUpper(unit[:1]) + "iB"
		warning = fmt.Sprintf("%q means %s bytes (SI units, powers of 1000); if you meant binary units write %q", s, humanize.Comma(int64(v)), num+bin)
	}
	return int64(v), warning, nil
}

// HumanSize is n rounded for a person to read, as plans, reports and
// tables print sizes and rates: "8.0 MiB", "1.5 GiB", "977 KiB". It is
// not a value to write into a pipeline file: sdk.FormatSize writes the
// exact one ("8MiB", "1000000 bytes").
func HumanSize(n int64) string { return humanize.IBytes(uint64(n)) }
