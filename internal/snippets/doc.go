// Package snippets holds no code: its tests compile every Go snippet of
// the README and docs/, so that a snippet a user copies builds against
// the API as it is.
//
// A snippet is a fragment (statements, or an expression), so it cannot
// be compiled where it stands. Each is written out, unchanged, inside a
// function of snippets_test.go that declares what the fragment takes
// from around it (ctx, a Redis client, the policies); TestSnippets checks
// that every ```go block of a Markdown file appears, line for line, in a
// _test.go file of the module, and the Go toolchain compiles that file
// with the rest of the tests. A snippet edited in a doc but not in the
// test, or an API change that breaks one, fails `make test`.
package snippets
