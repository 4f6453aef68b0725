package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build information is shown.
var version = ""

func (a *app) versionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "print the CLI's version, the worqr library's version and Go's",
		Example: "  worqr version",
		Args:    args(),
	}
	cmd.RunE = a.body(true, func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		cli, lib := version, "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			if cli == "" {
				cli = bi.Main.Version
			}
			for _, d := range bi.Deps {
				if d.Path == "github.com/worqr/worqr-go" {
					lib = d.Version
					if d.Replace != nil {
						lib = "built from the source tree " + d.Replace.Path
					}
				}
			}
		}
		if cli == "" {
			cli = "(devel)"
		}
		_, err := fmt.Fprintf(a.env.out, "worqr %s (library %s, %s %s/%s)\n", cli, lib, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return err
	})
	return cmd
}
