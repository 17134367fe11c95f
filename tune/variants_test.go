package tune

import (
	"strings"
	"testing"

	"github.com/pipebackup/pipe/profiles"
)

func TestVariants(t *testing.T) {
	sweeps, err := ParseSweeps([]string{"workers=1,2", "chunk_size=64KiB, 1MiB"})
	if err != nil {
		t.Fatal(err)
	}
	if sweeps[1].Values[1] != 1<<20 {
		t.Fatalf("chunk_size values %v", sweeps[1].Values)
	}
	p := &Planned{}
	vs, err := Variants(p, "conservative,turbo", sweeps, profiles.Host{CPUs: 2, Memory: 8 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	want := "conservative workers=1 chunk_size=64KiB|conservative workers=1 chunk_size=1MiB|conservative workers=2 chunk_size=64KiB|conservative workers=2 chunk_size=1MiB|" +
		"turbo workers=1 chunk_size=64KiB|turbo workers=1 chunk_size=1MiB|turbo workers=2 chunk_size=64KiB|turbo workers=2 chunk_size=1MiB"
	if got := strings.Join(names, "|"); got != want {
		t.Fatalf("variants\n%s\nwant\n%s", got, want)
	}
	if ov := vs[3].Overrides; ov["workers"] != 2 || ov["chunk_size"] != 1<<20 || vs[3].Profile != "conservative" {
		t.Fatalf("variant %s: profile %s, overrides %v", vs[3].Name, vs[3].Profile, ov)
	}
	for _, bad := range [][]string{{"workers"}, {"workers=1", "workers=2"}, {"workers=1,1"}, {"level=x"}, {"part_size=0"}} {
		if _, err := ParseSweeps(bad); err == nil {
			t.Errorf("--sweep %v was accepted", bad)
		}
	}
}
