package worqr

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// An error's text is cut to maxErrorLen bytes where it is stored and
// published: a cut inside a character left bytes that are not UTF-8 (the
// dashboard and a JSON follower then show a replacement character), found
// by the review of the session's changes.
func TestClipCutsAtACharacter(t *testing.T) {
	msg := "a" + strings.Repeat("é", maxErrorLen) // 2 bytes each: a cut at maxErrorLen splits one
	got := clip(msg)
	if !utf8.ValidString(got) {
		t.Fatalf("clip left %d bytes that are not valid UTF-8 (ending %q)", len(got), got[len(got)-3:])
	}
	if len(got) > maxErrorLen || len(got) < maxErrorLen-3 {
		t.Errorf("clip kept %d bytes, want at most %d and at least %d", len(got), maxErrorLen, maxErrorLen-3)
	}
	if short := "short é"; clip(short) != short {
		t.Errorf("clip(%q) = %q", short, clip(short))
	}
}
