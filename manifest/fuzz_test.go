package manifest

import (
	"path"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// FuzzParse feeds the decoder what a hostile store could hold. It must
// never panic, and whatever it accepts must be safe to use: stream names
// that stay inside a folder, a digest on every object, and a manifest that
// survives its own round trip.
func FuzzParse(f *testing.F) {
	m := valid()
	b, _ := m.Marshal()
	f.Add(b)
	f.Add([]byte(`{"format":"pipe-manifest/v1","run_id":"x","objects":[{"stream":"../a","key":"k"}]}`))
	f.Add([]byte(`{"format":"pipe-manifest/v1"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		if len(m.Objects) == 0 {
			t.Fatal("accepted a manifest without objects")
		}
		for _, o := range m.Objects {
			if err := sdk.CheckStreamName(o.Stream); err != nil {
				t.Fatalf("accepted stream %q: %v", o.Stream, err)
			}
			if o.Digest == "" || strings.HasPrefix(o.Key, "/") {
				t.Fatalf("accepted object %+v", o)
			}
			if strings.ContainsAny(path.Join("run", o.Stream), "\x00\n") {
				t.Fatalf("accepted a control character in %q", o.Stream)
			}
		}
		if strings.ContainsAny(m.RunID, "/\x00\n") || strings.Contains(m.RunID, "..") {
			t.Fatalf("accepted run id %q", m.RunID)
		}
		again, err := m.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(again); err != nil {
			t.Fatalf("a manifest it accepted does not parse after Marshal: %v", err)
		}
	})
}
