package pipefile

import (
	"github.com/dustin/go-humanize"
)

// HumanSize is n rounded for a person to read, as plans, reports and
// tables print sizes and rates: "8.0 MiB", "1.5 GiB", "977 KiB". It is
// not a value to write into a pipeline file: sdk.FormatSize writes the
// exact one ("8MiB", "1000000 bytes").
func HumanSize(n int64) string { return humanize.IBytes(uint64(n)) }
