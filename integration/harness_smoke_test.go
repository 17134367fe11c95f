package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
)

// The harness starts every server and reaches MinIO through Toxiproxy,
// with a latency toxic that the request must feel.
func TestHarness(t *testing.T) {
	m := startMinIO(t)
	resp, err := http.Get(m.Endpoint + "/minio/health/live")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("minio health: %v %v", resp, err)
	}
	resp.Body.Close()
	p := startToxiproxy(t, m.IP+":9000")
	if _, err := p.AddToxic("lat", "latency", "downstream", 1, toxiclient.Attributes{"latency": 300}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err = http.Get("http://" + p.HostPort + "/minio/health/live")
	if err != nil || resp.StatusCode != 200 || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("through toxiproxy: %v %v after %s", resp, err, time.Since(start))
	}
	resp.Body.Close()
	gcs, _ := startFakeGCS(t)
	resp, err = http.Get(gcs + "/storage/v1/b")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("fake-gcs: %v %v", resp, err)
	}
	resp.Body.Close()
	cs, _ := startAzurite(t)
	if !strings.Contains(cs, "BlobEndpoint=http://") {
		t.Fatalf("azurite connection string %q", cs)
	}
	if r := mustPipe(t, t.TempDir(), nil, "--version"); !strings.Contains(r.Stdout, "pipe version") {
		t.Fatalf("pipe --version: %q", r.Stdout)
	}
}
