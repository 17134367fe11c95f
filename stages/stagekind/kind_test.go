package stagekind

import "testing"

// Names are unique, every kind is found by its name, and a decoder undoes
// an encoder.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range All {
		if k.Name == "" || seen[k.Name] {
			t.Errorf("kind %q: empty or repeated name", k.Name)
		}
		seen[k.Name] = true
		if Lookup(k.Name) != k {
			t.Errorf("Lookup(%q) is not the kind", k.Name)
		}
		if k.Decodes() != (k.Undoes != nil) || k.Undoes != nil && !k.Undoes.Encodes() {
			t.Errorf("%s: a decoding kind names the encoding kind it undoes, and only it", k.Name)
		}
		if _, ok := k.Attribute("workers"); ok != k.ChunkParallel {
			t.Errorf("%s: takes workers %v, chunk-parallel %v", k.Name, ok, k.ChunkParallel)
		}
	}
	if Lookup("sink") != nil {
		t.Error("Lookup of a non-kind found one")
	}
}
