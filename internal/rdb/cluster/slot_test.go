package cluster

import "testing"

func TestCRC16XModem(t *testing.T) {
	// The check value of CRC-16/XMODEM, as in the Redis Cluster spec.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
}

func TestSlot(t *testing.T) {
	for _, c := range []struct {
		key  string
		slot int
	}{
		{"123456789", 12739}, // 0x31C3 % 16384
		{"foo", 12182},
		{"bar", 5061},
		{"", 0},
		{"{user1000}.following", Slot("user1000")},
		{"{user1000}.followers", Slot("user1000")},
		{"foo{}{bar}", int(crc16("foo{}{bar}")) % Slots}, // empty first tag: the whole key
		{"foo{{bar}}zap", Slot("{bar")},                  // the tag is "{bar"
		{"foo{bar}{zap}", Slot("bar")},                   // only the first tag counts
		{"worqr:{reg}:workers", Slot("reg")},
		{"{", int(crc16("{")) % Slots},
	} {
		if got := Slot(c.key); got != c.slot {
			t.Errorf("Slot(%q) = %d, want %d", c.key, got, c.slot)
		}
	}
	if TagSlot("reg") != Slot("ns:{reg}:workers") || TagSlot("a}b") != Slot("ns:{a}b}:q:x") {
		t.Error("TagSlot disagrees with the slot of the tag's keys")
	}
}
