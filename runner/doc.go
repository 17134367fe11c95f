// Package runner executes one resolved pipeline: it configures the
// endpoints (their errors point at the file), lists the streams, reads the
// newest manifest when a restore's source holds one, names every object,
// runs the engine and, when all streams committed, writes the manifest
// last.
//
// It knows endpoints through the SDK and the host registry only; it must
// not import a concrete plugin or the CLI.
package runner
