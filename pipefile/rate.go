package pipefile

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// rateAttr is pipe's own attribute of a pipeline and of every sink: a
// bandwidth cap for the whole scope, however many streams and parts run.
var rateAttr = sdk.Attribute{Name: "rate_limit", Type: sdk.String,
	Description: `Most bytes per second for the whole scope, shared by all its streams, workers and parts ("200MiB/s"); a pipeline's limit counts what the source yields, a sink's what it is given.`}

// ParseRate reads a bandwidth such as "200MiB/s" or "1GiB/s" into bytes
// per second.
func ParseRate(s string) (int64, error) {
	t := strings.TrimSpace(s)
	size, ok := strings.CutSuffix(t, "/s")
	if !ok {
		return 0, fmt.Errorf("%q is not a rate: write a size per second, e.g. \"200MiB/s\"", s)
	}
	n, _, err := hclvalue.ParseSize(size)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate: write a size per second, e.g. \"200MiB/s\"", s)
	}
	if n < 1024 {
		return 0, fmt.Errorf("%q is below 1 KiB/s", s)
	}
	return n, nil
}

// takeRate moves rate_limit out of b's values into *out: it is pipe's,
// not a plugin's.
func (b *Block) takeRate(out *int64) hcl.Diagnostics {
	s, ok := b.Values[rateAttr.Name].(string)
	delete(b.Values, rateAttr.Name)
	if !ok {
		return nil
	}
	n, err := ParseRate(s)
	if err != nil {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid rate_limit",
			Detail: err.Error() + ".", Subject: b.AttrRange(rateAttr.Name).Ptr()}}
	}
	*out = n
	return nil
}
