package doccheck

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/nornlabs/norn/cli"
)

// nornHelp runs "norn help [command]" in process and returns its output.
func nornHelp(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	code := cli.Run(context.Background(), append([]string{"help"}, args...), cli.Options{
		Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" },
	})
	if code != cli.ExitOK {
		t.Fatalf("norn help %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
	}
	return out.String()
}

var (
	nornCmdRE  = regexp.MustCompile(`\bnorn(?: --?[a-z-]+(?:[ =][^\s-][^\s]*)?)* ([a-z]+)([^\n|]*)`)
	nornFlagRE = regexp.MustCompile(`(?:^|\s)--?([a-z][a-z-]*)`)
	helpCmdRE  = regexp.MustCompile(`(?m)^  ([a-z]+) `)
)

// TestNornCommands checks that every norn command the docs show exists,
// and that the flags given with it are the command's (or global) flags.
func TestNornCommands(t *testing.T) {
	t.Parallel()
	commands := map[string]bool{}
	for _, m := range helpCmdRE.FindAllStringSubmatch(nornHelp(t), -1) {
		commands[m[1]] = true
	}
	if !commands["ls"] || !commands["viewer"] {
		t.Fatalf("norn help lists %v: the parser is broken", commands)
	}
	help := map[string]string{}
	checked := 0
	for _, rel := range docFiles(t) {
		d := readDoc(t, rel)
		texts := d.CodeSpans()
		for _, b := range d.Blocks {
			if b.Lang == "sh" {
				texts = append(texts, strings.Split(b.Text, "\n")...)
			}
		}
		for _, text := range texts {
			text, _, _ = strings.Cut(text, "#") // a shell comment
			for _, m := range nornCmdRE.FindAllStringSubmatch(text, -1) {
				cmd := m[1]
				if !commands[cmd] {
					t.Errorf("%s: %q: norn has no command %q", rel, m[0], cmd)
					continue
				}
				checked++
				if cmd == "help" {
					continue
				}
				if help[cmd] == "" {
					help[cmd] = nornHelp(t, cmd)
				}
				for _, f := range nornFlagRE.FindAllStringSubmatch(m[0], -1) {
					if !strings.Contains(help[cmd], "  -"+f[1]+" ") && !strings.Contains(help[cmd], "  -"+f[1]+"\n") {
						t.Errorf("%s: %q: norn %s has no flag --%s", rel, m[0], cmd, f[1])
					}
				}
			}
		}
	}
	if checked < 15 {
		t.Errorf("only %d norn commands checked: the docs or the parser changed", checked)
	}
}
