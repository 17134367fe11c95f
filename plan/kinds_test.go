package plan

import (
	"testing"

	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// Every kind has its ops, with what its direction needs: a new row in
// stagekind without its ops here fails this.
func TestKindOps(t *testing.T) {
	for _, k := range stagekind.All {
		o, ok := kindOps[k]
		switch {
		case !ok:
			t.Errorf("%s: no ops", k.Name)
			continue
		case o.resolve == nil || o.stage == nil || o.describe == nil:
			t.Errorf("%s: resolve, stage and describe are needed", k.Name)
		case k.Encodes() && (o.ext == nil || o.maxOut == nil):
			t.Errorf("%s encodes: ext and maxOut are needed", k.Name)
		case k.Decodes() && o.strip == nil:
			t.Errorf("%s decodes: strip is needed", k.Name)
		}
	}
	if len(kindOps) != len(stagekind.All) {
		t.Errorf("%d ops for %d kinds", len(kindOps), len(stagekind.All))
	}
}

// What each kind does to a stream's name and size.
func TestStageNamesAndSizes(t *testing.T) {
	const n = 10 << 20
	stage := func(k *stagekind.Kind, codec string) *Stage {
		return &Stage{Type: k.Name, Codec: codec, ChunkSize: 1 << 20}
	}
	for _, tc := range []struct {
		s     *Stage
		ext   string
		max   int64
		keeps bool
	}{
		{stage(stagekind.Compress, "zstd"), ".zst", compress.MaxStored(n, 1<<20), false},
		{stage(stagekind.Compress, "none"), "", n, true},
		{stage(stagekind.Encrypt, ""), encrypt.Ext, encrypt.MaxStored(n), false},
		{stage(stagekind.Checksum, ""), "", n, true},
		{stage(stagekind.Decompress, "auto"), "", -1, false},
		{stage(stagekind.Decompress, "none"), "", -1, true},
		{stage(stagekind.Decrypt, ""), "", -1, false},
	} {
		if ext, max, keeps := tc.s.Ext(), tc.s.MaxOut(n), tc.s.KeepsSize(); ext != tc.ext || max != tc.max || keeps != tc.keeps {
			t.Errorf("%s %s: ext %q, max %d, keeps size %v; want %q, %d, %v", tc.s.Type, tc.s.Codec, ext, max, keeps, tc.ext, tc.max, tc.keeps)
		}
	}
	for _, tc := range []struct {
		s          *Stage
		name, rest string
		codec      string
		err        bool
	}{
		{stage(stagekind.Decrypt, ""), "db.sql.zst.age", "db.sql.zst", "", false},
		{stage(stagekind.Decompress, "auto"), "db.sql.zst", "db.sql", "zstd", false},
		{stage(stagekind.Decompress, "gzip"), "db.sql.gz", "db.sql", "", false},
		{stage(stagekind.Decompress, "none"), "db.sql.zst", "db.sql.zst", "", false},
		{stage(stagekind.Decompress, "auto"), "db.sql", "", "", true},
		{stage(stagekind.Compress, "zstd"), "db.sql", "db.sql", "", false},
	} {
		rest, codec, err := tc.s.Strip(tc.name, "src/"+tc.name)
		if rest != tc.rest || codec != tc.codec || (err != nil) != tc.err {
			t.Errorf("%s %s strips %q to %q, codec %q, err %v", tc.s.Type, tc.s.Codec, tc.name, rest, codec, err)
		}
	}
}
