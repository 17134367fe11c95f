package walname

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// objectRE is what ParseObject accepts, as a regular expression: the
// reference it is checked against (ParseObject parses by hand, since
// compiling this takes half a millisecond of every pipe-wal start).
var objectRE = regexp.MustCompile(`^([0-9A-F]{8}(?:\.history|[0-9A-F]{16}(?:\.[0-9A-F]{8}\.backup|\.partial)?))-([0-9a-f]{32}|[0-9a-f]{64})-([0-9a-f]{64})([A-Za-z0-9_-]{86})?((?:\.[a-z0-9]+)*)$`)

// ParseObject accepts exactly the names objectRE matches, and splits them
// the same way: checked on real names and on many mutations of them.
func TestParseObjectLikeRE(t *testing.T) {
	sig := strings.Repeat("aZ0_-", 17) + "x"
	hex64, hex32 := strings.Repeat("0123456789abcdef", 4), strings.Repeat("fedcba9876543210", 2)
	var names []string
	for _, file := range []string{"000000010000000000000003", "00000002.history", "000000010000000000000003.00000028.backup", "000000020000000000000004.partial", "000000000000000000000001"} {
		for _, fileSum := range []string{hex64, hex32} {
			for _, s := range []string{"", sig} {
				for _, ext := range []string{"", ".zst", ".zst.age", ".gz"} {
					names = append(names, file+"-"+fileSum+"-"+hex64+s+ext)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := "0123456789abcdefABCDEF-_.xZ"
	check := func(n string) {
		m := objectRE.FindStringSubmatch(n)
		o, err := ParseObject(n)
		if m != nil {
			if _, nerr := ParseName(m[1]); nerr != nil {
				m = nil // the name's timeline 0: refused both ways
			}
		}
		switch {
		case m == nil && err == nil:
			t.Errorf("ParseObject(%q) accepted what the expression refuses: %+v", n, o)
		case m != nil && err != nil:
			t.Errorf("ParseObject(%q): %v; the expression accepts it", n, err)
		case m != nil && (o.Name != m[1] || o.FileSum != m[2] || o.StoredSum != m[3] || o.Sig != m[4] || o.Ext != m[5]):
			t.Errorf("ParseObject(%q) = %+v, want %q", n, o, m[1:])
		}
	}
	for _, n := range names {
		check(n)
		for range 200 {
			b := []byte(n)
			switch i := rng.IntN(len(b)); rng.IntN(3) {
			case 0: // replace a byte
				b[i] = alphabet[rng.IntN(len(alphabet))]
			case 1: // drop one
				b = append(b[:i], b[i+1:]...)
			default: // insert one
				b = append(b[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[i:]...)...)
			}
			check(string(b))
		}
	}
}
