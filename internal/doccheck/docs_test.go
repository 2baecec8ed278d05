package doccheck

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nornlabs/norn/cli"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// docFiles are the Markdown files the checks cover, relative to root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rel)
	}
	return out
}

func readDoc(t *testing.T, rel string) Doc {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return Parse(string(src))
}

// TestLinks checks that every relative link in README.md and docs/*.md
// names an existing file, and its #anchor an existing heading.
func TestLinks(t *testing.T) {
	t.Parallel()
	for _, rel := range docFiles(t) {
		d := readDoc(t, rel)
		links := d.Links()
		if rel == "README.md" && len(links) == 0 {
			t.Errorf("README.md has no links: the parser is broken")
		}
		for _, l := range links {
			if strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(l.Target, "#")
			target := rel
			if path != "" {
				target = filepath.Join(filepath.Dir(rel), path)
			}
			if _, err := os.Stat(filepath.Join(root, target)); err != nil {
				t.Errorf("%s:%d: link %s: %v", rel, l.Line, l.Target, err)
				continue
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %s: an anchor into a file that is not Markdown", rel, l.Line, l.Target)
				continue
			}
			if !readDoc(t, target).Anchors()[anchor] {
				t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", rel, l.Line, l.Target, target, anchor)
			}
		}
	}
}

var (
	dotPathRE  = regexp.MustCompile(`(?:^|[\s(=])(\./[\w./-]+)`)
	repoPathRE = regexp.MustCompile(`^[\w.-]+(/[\w.-]+)*/?$`)
)

// TestPaths checks that the repository paths the docs name exist: ./dir
// in commands and code spans, and code spans such as persistence/step.go
// whose first element is a directory at the root.
// generatedDir is where the examples write their stores: the docs name it,
// and it exists only once an example has run.
const generatedDir = "norn-data"

func TestPaths(t *testing.T) {
	t.Parallel()
	for _, rel := range docFiles(t) {
		d := readDoc(t, rel)
		var texts []string
		for _, b := range d.Blocks {
			// getting-started.md runs its commands in a module of its own (its
			// test runs them); every other command runs in the repository.
			if b.Lang == "sh" && rel != filepath.Join("docs", "getting-started.md") {
				texts = append(texts, b.Text)
			}
		}
		spans := d.CodeSpans()
		texts = append(texts, spans...)
		for _, text := range texts {
			for _, m := range dotPathRE.FindAllStringSubmatch(text, -1) {
				p := strings.TrimRight(m[1], ".")
				if p == "./..." || strings.HasSuffix(p, "/...") {
					p = strings.TrimSuffix(p, "/...")
				}
				if p == "./"+generatedDir || strings.HasPrefix(p, "./"+generatedDir+"/") {
					continue // made by the examples when they run, not in a clone
				}
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s names %s, which does not exist in the repository", rel, m[1])
				}
			}
		}
		for _, s := range spans {
			if !repoPathRE.MatchString(s) || !strings.Contains(s, "/") {
				continue
			}
			first, _, _ := strings.Cut(strings.TrimPrefix(s, "./"), "/")
			if first == generatedDir {
				continue
			}
			if fi, err := os.Stat(filepath.Join(root, first)); err != nil || !fi.IsDir() {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, s)); err != nil {
				t.Errorf("%s names `%s`, which does not exist in the repository", rel, s)
			}
		}
	}
}

var (
	qualifiedRE = regexp.MustCompile(`\b([a-z]+)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)
	methodRE    = regexp.MustCompile(`^(ctx|sys)\.([A-Z]\w*)`)
	// bareTypes are the types the docs name without their package, as in
	// `Config.LeaseTTL`.
	bareTypes  = map[string]string{"Config": "actor", "ListQuery": "actor", "InstancePage": "actor", "Spawned": "actor", "Sent": "actor", "RelayerConfig": "events"}
	bareTypeRE = regexp.MustCompile(`^(Config|ListQuery|InstancePage|Spawned|Sent|RelayerConfig)\.([A-Z]\w*)`)
)

// TestIdentifiers checks that every identifier of a Norn package the docs
// name exists: pkg.Name and pkg.Type.Member in code spans and code blocks,
// and ctx.Method / sys.Method in code spans (methods of actor.Context and
// actor.System).
func TestIdentifiers(t *testing.T) {
	t.Parallel()
	apis := map[string]api{}
	for name, dir := range packages {
		apis[name] = loadAPI(t, filepath.Join(root, dir))
	}
	checked := 0
	for _, rel := range docFiles(t) {
		d := readDoc(t, rel)
		texts := d.CodeSpans()
		for _, b := range d.Blocks {
			if b.Lang == "go" || b.Lang == "sh" {
				texts = append(texts, b.Text)
			}
		}
		for _, text := range texts {
			for _, m := range qualifiedRE.FindAllStringSubmatch(text, -1) {
				a, ok := apis[m[1]]
				if !ok {
					continue
				}
				checked++
				if !a.has(m[2], m[3]) {
					t.Errorf("%s names %s, which package %s does not export", rel, m[0], m[1])
				}
			}
		}
		for _, s := range d.CodeSpans() {
			if m := bareTypeRE.FindStringSubmatch(s); m != nil {
				pkg := bareTypes[m[1]]
				checked++
				if !apis[pkg].has(m[1], m[2]) {
					t.Errorf("%s names `%s`, but %s.%s has no %s", rel, s, pkg, m[1], m[2])
				}
			}
			m := methodRE.FindStringSubmatch(s)
			if m == nil {
				continue
			}
			typ := map[string]string{"ctx": "Context", "sys": "System"}[m[1]]
			checked++
			if !apis["actor"].has(typ, m[2]) {
				t.Errorf("%s names `%s`, but actor.%s has no method %s", rel, s, typ, m[2])
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d identifiers checked: the docs or the parser changed", checked)
	}
}

// TestREADMEExample checks that the README's example is examples/hello
// verbatim (so it compiles: the build and vet of ./... compile it) and that
// the program runs and prints what the workflow returns.
func TestREADMEExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(root, "examples", "hello", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range readDoc(t, "README.md").Blocks {
		if b.Lang == "go" && b.Text == string(src) {
			found = true
		}
	}
	if !found {
		t.Fatal("README.md has no go block equal to examples/hello/main.go: copy the file into the README again")
	}
	if testing.Short() {
		t.Skip("builds and runs examples/hello")
	}
	bin := filepath.Join(t.TempDir(), "hello")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/hello")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/hello: %v\n%s", err, out)
	}
	run := exec.CommandContext(ctx, bin)
	run.Dir = t.TempDir() // it writes norn-data/norn.db under its working directory
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("examples/hello: %v\n%s", err, stderr.String())
	}
	if got, want := stdout.String(), "hello, ann, approved by bob <nil>\n"; got != want {
		t.Errorf("examples/hello printed %q, want %q", got, want)
	}
	// The README's next command: norn ls on the store it wrote (run in
	// process: cmd/norn's main is cli.Main).
	var ls bytes.Buffer
	args := []string{"--store", filepath.Join(run.Dir, "norn-data", "norn.db"), "ls"}
	if code := cli.Run(ctx, args, cli.Options{Stdout: &ls, Stderr: &ls, Getenv: func(string) string { return "" }}); code != cli.ExitOK {
		t.Fatalf("norn ls: exit %d\n%s", code, ls.String())
	}
	if !regexp.MustCompile(`(?m)^hello-\S+ +hello +completed `).MatchString(ls.String()) {
		t.Errorf("norn ls shows no completed hello instance:\n%s", ls.String())
	}
}

var workloadRE = regexp.MustCompile(`-workload ([a-z]+)`)

// TestBenchWorkloads checks that the bench workloads the docs name exist.
func TestBenchWorkloads(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join(root, "bench", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, rel := range docFiles(t) {
		text, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range workloadRE.FindAllStringSubmatch(string(text), -1) {
			checked++
			if m[1] != "all" && !strings.Contains(string(src), `{"`+m[1]+`", `) {
				t.Errorf("%s: %q: bench has no workload %q", rel, m[0], m[1])
			}
		}
	}
	if checked == 0 {
		t.Error("no bench workload named in the docs: the parser is broken")
	}
}
