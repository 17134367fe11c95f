package plugin

import (
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/pipebackup/pipe/plugins/internal/wire"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Serve runs the plugin process for p. It returns only when pipe stops the
// plugin. Run by hand (not by pipe), it explains and exits.
func Serve(p sdk.Plugin) {
	if os.Getenv(wire.Handshake.MagicCookieKey) != wire.Handshake.MagicCookieValue {
		fmt.Fprintf(os.Stderr, "%s is a pipe plugin: pipe starts it when a pipeline uses its endpoints (%s).\n", os.Args[0], typeList(p))
		os.Exit(1)
	}
	srv, err := newServer(p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "plugin %s: %v\n", p.Name, err)
		os.Exit(1)
	}
	watchParent()
	sdk.SetLog(processLog(os.Stderr))
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.Plugins(srv),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, wire.ServerOptions()...)...)
		},
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr, JSONFormat: true}),
	})
}

func typeList(p sdk.Plugin) string {
	s := ""
	for n := range p.Sources {
		s += " source " + n
	}
	for n := range p.Sinks {
		s += " sink " + n
	}
	if s == "" {
		return "no endpoints"
	}
	return s[1:]
}

// watchParent ends the process when pipe goes away without stopping it
// (killed, say): the kernel sends SIGKILL when the parent dies, and, should
// that be missed, a poll notices the new parent.
func watchParent() {
	ppid := os.Getppid()
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	if os.Getppid() != ppid {
		os.Exit(1)
	}
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != ppid {
				os.Exit(1)
			}
		}
	}()
}
