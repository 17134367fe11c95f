// Package layering holds the test that proves pipe's import rules with `go
// list -deps`: the engine never imports the CLI, a stage or a plugin; the
// plugin SDK never imports the engine; a stage never imports a plugin; one
// built-in plugin never imports another. It has no code of its own.
package layering
