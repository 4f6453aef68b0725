package worqr

import "testing"

func TestErrorShape(t *testing.T) {
	for in, want := range map[string]string{
		"timeout after 3s":                          "timeout after <n>s",
		"read tcp 10.0.0.1:6379: i/o timeout":       "read tcp <n>.<n>.<n>.<n>:<n>: i/o timeout",
		"task cv3k1s1hhc2s73b0o3ng failed":          "task <id> failed",
		"object deadbeef42 at 0x7ffd5e8c missing":   "object <hex> at <hex> missing",
		"user 0F8FAD5B-D9CB-469F-A165-70867728950E": "user <uuid>",
		"plain   words\nonly":                       "plain words only",
	} {
		if got := ErrorShape(in); got != want {
			t.Errorf("ErrorShape(%q) = %q, want %q", in, got, want)
		}
	}
}
