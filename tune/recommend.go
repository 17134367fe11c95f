package tune

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Recommend picks the fastest variant or, among those within 5% of it,
// the one with the smallest memory budget (the faster on a tie), and says
// why in a line; the line adds what the pick costs in storage when another
// variant's ratio is more than 5% better. rows must not be empty.
func Recommend(rows []Row) (int, string) {
	fastest := 0
	for i, r := range rows {
		if r.ReadPerSec > rows[fastest].ReadPerSec {
			fastest = i
		}
	}
	pick := fastest
	for i, r := range rows {
		if r.ReadPerSec >= 0.95*rows[fastest].ReadPerSec && (r.Budget < rows[pick].Budget || r.Budget == rows[pick].Budget && r.ReadPerSec > rows[pick].ReadPerSec) {
			pick = i
		}
	}
	rate := func(r Row) string { return pipefile.HumanSize(int64(r.ReadPerSec)) + "/s" }
	var reason string
	switch {
	case len(rows) == 1:
		reason = fmt.Sprintf("the only variant tried (%s)", rate(rows[0]))
	case pick == fastest:
		second := -1
		for i, r := range rows {
			if i != fastest && (second < 0 || r.ReadPerSec > rows[second].ReadPerSec) {
				second = i
			}
		}
		reason = fmt.Sprintf("the fastest (%s)", rate(rows[fastest]))
		if s := rows[second]; s.ReadPerSec > 0 {
			reason += fmt.Sprintf(", %.0f%% ahead of %s", 100*(rows[fastest].ReadPerSec/s.ReadPerSec-1), s.Name)
		}
	default:
		reason = fmt.Sprintf("within 5%% of the fastest, %s (%s against %s), with a memory budget of %s instead of %s",
			rows[fastest].Name, rate(rows[pick]), rate(rows[fastest]), pipefile.HumanSize(rows[pick].Budget), pipefile.HumanSize(rows[fastest].Budget))
	}
	// Speed bought with a worse ratio (a lower compression level) costs
	// storage: say so.
	bestRatio := pick
	for i, r := range rows {
		if r.StoredBytes > 0 && ratio(r) > ratio(rows[bestRatio]) {
			bestRatio = i
		}
	}
	if rp, rb := ratio(rows[pick]), ratio(rows[bestRatio]); rp > 0 && rb > rp*1.05 {
		reason += fmt.Sprintf("; it stores %.0f%% more than %s (%.2f× against %.2f×)", 100*(rb/rp-1), rows[bestRatio].Name, rp, rb)
	}
	return pick, reason
}

// ratio is how much smaller the stored bytes are than the bytes read.
func ratio(r Row) float64 {
	if r.StoredBytes == 0 {
		return 0
	}
	return float64(r.ReadBytes) / float64(r.StoredBytes)
}

// SettingLines are the lines that make the file run as variant v.
func SettingLines(p *Planned, v Variant) []string {
	var out []string
	if v.Profile != fileProfile(p) {
		out = append(out, fmt.Sprintf("pipeline %q { profile = %q }", p.Name, v.Profile))
	}
	for _, k := range slices.Sorted(maps.Keys(v.Overrides)) {
		val := strconv.FormatInt(v.Overrides[k], 10)
		if k == "chunk_size" || k == "part_size" {
			// Exact, as a file says it ("1MiB"; "1000" when no unit divides it).
			val = strconv.Quote(strings.TrimSuffix(sdk.FormatSize(v.Overrides[k]), " bytes"))
		}
		if k == "part_size" || k == "concurrency" {
			for _, e := range append([]*pipefile.Endpoint{p.Source}, p.Sinks...) {
				for _, at := range e.Schema.Attributes {
					if at.Profile == k {
						out = append(out, fmt.Sprintf("%s %q { %s = %s }", e.Kind, e.Type, at.Name, val))
					}
				}
			}
			continue
		}
		switch place := knobPlace(p, k); place {
		case "pipeline":
			out = append(out, fmt.Sprintf("pipeline %q { %s = %s }", p.Name, k, val))
		default:
			out = append(out, fmt.Sprintf("%s { %s = %s }", place, k, val))
		}
		if k == "chunk_size" {
			for _, s := range p.Stages {
				if s.Explicit["chunk_size"] {
					out = append(out, fmt.Sprintf("%s { chunk_size = %s }", s.Type, val))
				}
			}
		}
	}
	return out
}

// WriteRecommendation puts the recommended profile into the file
// (pipefile.SetProfile), or says why it did not; synthetic says the
// variants read generated data.
func WriteRecommendation(p *Planned, v Variant, synthetic bool) string {
	if len(v.Overrides) > 0 {
		return "nothing written: the recommendation sets " + strings.Join(slices.Sorted(maps.Keys(v.Overrides)), ", ") + ", not only a profile; add the settings above yourself"
	}
	if p.ProfileFrom == "file" && fileProfile(p) == v.Profile {
		return fmt.Sprintf("nothing written: pipeline %q already has profile = %q", p.Name, v.Profile)
	}
	file := p.Def.Range.Filename
	if err := pipefile.SetProfile(file, p.Name, v.Profile); err != nil {
		return "nothing written: " + err.Error()
	}
	msg := fmt.Sprintf("wrote profile = %q into pipeline %q of %s", v.Profile, p.Name, file)
	if synthetic {
		msg += " (measured on synthetic data)"
	}
	return msg
}
