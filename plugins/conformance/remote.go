package conformance

import (
	"os"
	"os/exec"
	"testing"

	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/plugin"
)

const serveEnv = "PIPE_CONFORMANCE_SERVE"

// ServeIfAsked turns the test binary into a plugin process serving p when
// Remote started it as one; call it first thing in TestMain.
func ServeIfAsked(p sdk.Plugin) {
	if os.Getenv(serveEnv) == "1" {
		plugin.Serve(p)
		os.Exit(0)
	}
}

// Remote returns a registry whose endpoint types are p's, served by a child
// process (this test binary, see ServeIfAsked) through the plugin protocol.
func Remote(t testing.TB, p sdk.Plugin) *host.Registry {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := host.New(host.Options{Builtin: p, BuiltinCmd: func() *exec.Cmd {
		cmd := exec.Command(self)
		cmd.Env = []string{serveEnv + "=1"}
		return cmd
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	return reg
}
