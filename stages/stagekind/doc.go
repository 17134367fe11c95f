// Package stagekind is the table of pipe's stage kinds (compress, decompress,
// encrypt, decrypt, checksum): for each, the block name a pipeline file
// gives it, whether it encodes a stored form, decodes one or only observes
// the bytes, which kind a decoder undoes, whether its workers share chunks,
// and the attributes its block takes. Everyone who needs to know a kind
// asks here instead of spelling its name.
//
// It holds facts only and imports nothing of pipe but plugins/sdk (for the
// attributes' schema), so the file loader (pipefile) reads it without the
// engine. What plan does with each kind (resolving its block, building its
// engine stage, the extension it adds or takes off, the most it outputs)
// is registered beside it in plan (kinds.go), which calls into the stage's
// own package (stages/compress, stages/encrypt, stages/checksum), where the
// work is done. A new kind is a row here, its ops there, and its package.
package stagekind
