// Package layering holds the test that proves pipe's import rules with `go
// list -deps`: the engine never imports the CLI, a stage or a plugin; the
// plugin SDK never imports the engine; a stage never imports a plugin; the
// file loader never imports the engine or a stage (only the table of stage
// kinds); one built-in plugin never imports another. It has no code of its
// own.
package layering
