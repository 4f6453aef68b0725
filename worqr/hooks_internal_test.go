package worqr

import "testing"

func TestHook(t *testing.T) {
	var h hook[func() int]
	t.Run("unset reports none", func(t *testing.T) {
		if _, ok := h.get(); ok {
			t.Fatal("an unset hook is set")
		}
	})
	t.Run("set until undone", func(t *testing.T) {
		undo := h.set(func() int { return 7 })
		f, ok := h.get()
		if !ok || f() != 7 {
			t.Fatalf("get = %v, want the callback set", ok)
		}
		undo()
		if _, ok := h.get(); ok {
			t.Fatal("set after undo")
		}
	})
}
