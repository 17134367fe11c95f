// Package plugin turns a set of endpoint types into a pipe plugin process.
// A plugin's main registers its sources and sinks and calls Serve:
//
//	func main() {
//		plugin.Serve(sdk.Plugin{
//			Name:    "redis",
//			Version: "0.1.0",
//			Sources: map[string]sdk.SourceType{"redis": redisSource{}},
//		})
//	}
//
// Serve speaks pipe's versioned gRPC protocol through hashicorp/go-plugin:
// the handshake, the schema, configuration with diagnostics, streams of
// data both ways, and the caller's cancellation, which reaches the
// endpoint as the context of its calls. The process exits when pipe stops
// it, and also when pipe goes away without stopping it.
//
// It imports the SDK and the protocol, never the engine.
package plugin
