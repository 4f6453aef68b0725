package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
)

// shells are the shells completion writes a script for.
var shells = []string{"bash", "zsh", "fish"}

func (a *app) completionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "print the shell completion script of worqr for bash, zsh or fish",
		Long: `Prints a script that makes the shell complete worqr's commands and flags.
It runs no query: the script asks the worqr binary on the PATH as you type.

bash (needs the bash-completion package for the best results):
  source <(worqr completion bash)                       # this shell
  worqr completion bash > /etc/bash_completion.d/worqr  # every new one
zsh (compinit must be enabled):
  worqr completion zsh > "${fpath[1]}/_worqr"
fish:
  worqr completion fish > ~/.config/fish/completions/worqr.fish`,
		Example:   "  source <(worqr completion bash)",
		Args:      args("shell"),
		ValidArgs: shells,
	}
	cmd.RunE = a.body(true, func(_ context.Context, cmd *cobra.Command, args []string) error {
		out, root := a.env.out, cmd.Root()
		switch args[0] {
		case "bash":
			return root.GenBashCompletionV2(out, true)
		case "zsh":
			return root.GenZshCompletion(out)
		case "fish":
			return root.GenFishCompletion(out, true)
		}
		return usagef("<shell> %q: want one of %s", args[0], strings.Join(shells, ", "))
	})
	return cmd
}
