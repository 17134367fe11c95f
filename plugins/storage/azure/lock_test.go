package azure

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// object_lock_days commits each blob with an immutability policy, in the
// request that commits it (Put Blob, Put Block List), and never the
// store's index.
func TestAzureImmutabilityPolicy(t *testing.T) {
	f := newFake(t)
	// A container without version-level immutability cannot take them:
	// refused before any block is sent.
	if _, d := (SinkType{}).Configure(ctx, sdk.NewConfig(f.config(map[string]any{"object_lock_days": int64(3)}))); !d.HasErrors() || !strings.Contains(d.Err().Error(), "version-level immutability") {
		t.Fatalf("a lock on a container without immutability support: %v", d)
	}
	if n := len(f.requests); n > 1 {
		t.Errorf("%d requests before the refusal, want only the container's properties", n)
	}
	f.immutable = true
	var mu sync.Mutex
	sent := map[string]http.Header{} // blob name → the commit's headers
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "PUT blocklist" || kind == "PUT " {
			mu.Lock()
			sent[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]] = r.Header.Clone()
			mu.Unlock()
		}
		return false
	})
	for _, c := range []struct {
		mode, want string
	}{{"compliance", "Locked"}, {"governance", "Unlocked"}} {
		s := newTestSink(t, f, map[string]any{"object_lock_days": int64(3), "object_lock_mode": c.mode, "max_single_put_size": int64(64 * kib)})
		for name, size := range map[string]int{c.mode + "-small": 1000, c.mode + "-large": 300 * 1024, "pipe-index.json": 10} {
			w, err := s.Create(ctx, sdk.Object{Key: name, Size: int64(size), Replace: name == "pipe-index.json"})
			if err != nil {
				t.Fatal(err)
			}
			writeAll(t, w, make([]byte, size), 7000)
			if err := w.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{c.mode + "-small", c.mode + "-large"} {
			h := sent[name]
			if h == nil {
				t.Fatalf("no commit of %s seen", name)
			}
			if got := h.Get("x-ms-immutability-policy-mode"); got != c.want {
				t.Errorf("%s: x-ms-immutability-policy-mode %q, want %q", name, got, c.want)
			}
			until, err := time.Parse(time.RFC1123, h.Get("x-ms-immutability-policy-until-date"))
			if err != nil || time.Until(until) < 71*time.Hour || time.Until(until) > 73*time.Hour {
				t.Errorf("%s: x-ms-immutability-policy-until-date %q, want three days from now", name, h.Get("x-ms-immutability-policy-until-date"))
			}
		}
		if h := sent["pipe-index.json"]; h == nil || h.Get("x-ms-immutability-policy-mode") != "" {
			t.Errorf("the index was committed with an immutability policy (or not at all): %v", h)
		}
	}
}
