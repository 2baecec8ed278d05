// Package doccheck holds the tests that keep README.md and docs/ true to the
// code: the README's example is examples/hello verbatim and runs, relative
// links and anchors resolve, the paths and identifiers the docs name exist,
// and the getting-started guide's commands work as written. It has no API;
// markdown.go is the small Markdown reader those tests share.
package doccheck
