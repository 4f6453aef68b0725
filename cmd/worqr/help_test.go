package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The environment block (every WORQR_* variable) is printed once, by
// worqr --help; every other command's --help points there instead of
// repeating its 20 lines.
func TestEnvironmentBlockOnlyInRootHelp(t *testing.T) {
	b := setup(t)
	const marker = "WORQR_TLS_CA_FILE" // a line of the block only
	if out := b.ok("", "--help"); strings.Count(out, marker) != 1 || !strings.Contains(out, "Environment") {
		t.Errorf("worqr --help: want the environment block once, got:\n%s", out)
	}
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			p := append(append([]string(nil), path...), sub.Name())
			paths = append(paths, p)
			walk(sub, p)
		}
	}
	walk(newRoot(newEnv()), nil)
	if len(paths) < 30 {
		t.Fatalf("found only %d commands: %v", len(paths), paths)
	}
	for _, p := range paths {
		out := b.ok("", append(p, "--help")...)
		if strings.Contains(out, marker) {
			t.Errorf("worqr %s --help repeats the environment block", strings.Join(p, " "))
		}
		if p[0] != "version" && p[0] != "completion" && !strings.Contains(out, "'worqr --help' lists them") {
			t.Errorf("worqr %s --help does not point at worqr --help for the environment:\n%s", strings.Join(p, " "), out)
		}
	}
}
