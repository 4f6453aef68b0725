package turnstile

import "testing"

// The turnstile serves tickets in order, whatever order they come to wait
// in, and passes over the ones that left or will never wait.
func TestTurnstile(t *testing.T) {
	t.Run("serves tickets in launch order, passing over those gone", testLaunchOrder)
}

func testLaunchOrder(t *testing.T) {
	served := func(c chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	ts := New(1)
	if ts.Wait(1) != nil {
		t.Fatal("ticket 1 waits with a slot free")
	}
	c3 := ts.Wait(3) // came before ticket 2
	c2 := ts.Wait(2)
	ts.Done() // 1 ends
	if !served(c2) || served(c3) {
		t.Fatalf("after 1: 2 served %v, 3 served %v; want 2 only", served(c2), served(c3))
	}
	c4 := ts.Wait(4)
	if !ts.Leave(3) {
		t.Fatal("3 left while waiting, reported served")
	}
	ts.Skip(5) // never waits (expired when taken)
	ts.Done()  // 2 ends: 3 left, so 4
	if !served(c4) {
		t.Fatal("4 not served after 2 ended and 3 left")
	}
	if ts.Leave(4) {
		t.Fatal("4 was served, reported left")
	}
	c6 := ts.Wait(6)
	ts.Done() // 4 ends: 5 never waits, so 6
	if !served(c6) {
		t.Fatal("6 not served past 5, which never waits")
	}
	if ts.Wait(7) == nil {
		t.Fatal("7 served while 6 holds the only slot")
	}
}
