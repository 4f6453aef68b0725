package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// completion prints each shell's script; bash's, sourced into a real bash,
// completes a command and a flag by asking the binary.
func TestCompletionScripts(t *testing.T) {
	b := setup(t)
	for shell, marker := range map[string]string{
		"bash": "complete -o default -F __start_worqr worqr",
		"zsh":  "#compdef worqr",
		"fish": "complete -c worqr",
	} {
		r := b.runEnv(nil, "", "completion", shell) // no Redis needed
		if r.code != 0 || !strings.Contains(r.out, marker) {
			t.Errorf("completion %s: exit %d, stderr %q, no %q in the script", shell, r.code, r.err, marker)
		}
	}
	if r := b.run("", "completion", "powershell"); r.code != exitUsage || !strings.Contains(r.err, `<shell> "powershell": want one of bash, zsh, fish`) {
		t.Errorf("completion powershell: exit %d, stderr %q; want 2 naming the shells", r.code, r.err)
	}

	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash not found: install it to test the completion script")
	}
	// The script wants bash-completion's _get_comp_words_by_ref: the
	// package's when installed, else a stand-in that does its job.
	script := `
if [ -f /usr/share/bash-completion/bash_completion ]; then
  . /usr/share/bash-completion/bash_completion
else
  _get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }
fi
source <(worqr completion bash)
complete_line() {
  COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
  COMPREPLY=(); __start_worqr 2>/dev/null
  echo "${COMPREPLY[*]}"
}
complete_line worqr dead re
complete_line worqr enqueue emails x --pri
complete_line worqr completion z
`
	cmd := exec.Command(bash, "-c", script)
	cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(binPath)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bash: %v\n%s", err, errb.String())
	}
	want := []string{"retry", "--priority", "zsh"}
	got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("bash completed %q, want %q (stderr %s)", got, want, errb.String())
	}
	for i := range want {
		if strings.TrimSpace(got[i]) != want[i] {
			t.Errorf("completion %d: got %q, want %q", i, got[i], want[i])
		}
	}
}
