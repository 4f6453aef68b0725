package engine

import "testing"

func TestUnsure(t *testing.T) {
	t.Run("a mark names the session that must release", func(t *testing.T) {
		var u Unsure
		if got := u.For("A", "A"); got != "" {
			t.Fatalf("a zero Unsure: For = %q, want sure", got)
		}
		u.Mark("A")
		if got := u.For("A", "A"); got != "A" {
			t.Fatalf("after Mark(A): For(A) = %q, want A", got)
		}
		u.Mark("")
		if got := u.Owner(); got != "" {
			t.Fatalf("after the release: Owner = %q, want none", got)
		}
	})
	t.Run("a stale caller neither sees nor forgets the current session's mark", func(t *testing.T) {
		var u Unsure
		u.Mark("B")
		if got := u.For("A", "B"); got != "" {
			t.Fatalf("For(stale A) = %q, want \"\"", got)
		}
		if got := u.For("B", "B"); got != "B" {
			t.Fatalf("For(B) after a stale caller = %q, want B", got)
		}
	})
	t.Run("a dead session's mark is forgotten", func(t *testing.T) {
		var u Unsure
		u.Mark("A")
		if got := u.For("B", "B"); got != "" || u.Owner() != "" {
			t.Fatalf("For(B) with A dead = %q (owner %q), want both none", got, u.Owner())
		}
	})
	t.Run("a switch makes the current session unsure and asks for a confirmation", func(t *testing.T) {
		var u Unsure
		u.Init(3)
		if u.Switched(3, "A") || u.Switched(2, "A") {
			t.Fatal("a count seen already (or older) was taken for a switch")
		}
		if need, _ := u.NeedsConfirm(); need || u.Owner() != "" {
			t.Fatal("no switch, yet unsure or waiting for a confirmation")
		}
		if !u.Switched(4, "A") || u.Owner() != "A" {
			t.Fatalf("after a switch: Owner = %q, want A", u.Owner())
		}
		need, seen := u.NeedsConfirm()
		if !need || seen != 4 {
			t.Fatalf("NeedsConfirm = %v, %d; want true, 4", need, seen)
		}
		if !u.Confirmed(4) {
			t.Fatal("the confirmation of the switch seen was refused")
		}
		if need, _ := u.NeedsConfirm(); need {
			t.Fatal("still waiting after the confirmation")
		}
	})
	t.Run("a switch seen during a confirmation needs one of its own", func(t *testing.T) {
		var u Unsure
		u.Switched(1, "A")
		_, seen := u.NeedsConfirm()
		u.Switched(2, "A") // while the beat for the first was on its way
		if u.Confirmed(seen) {
			t.Fatal("a beat begun before the second switch confirmed it")
		}
		if need, now := u.NeedsConfirm(); !need || now != 2 {
			t.Fatalf("NeedsConfirm = %v, %d; want true, 2", need, now)
		}
	})
}
