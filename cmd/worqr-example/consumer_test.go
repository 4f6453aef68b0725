package main

import (
	"strconv"
	"strings"
	"testing"
)

func TestChunkAt(t *testing.T) {
	var c uint64
	for b := uint64(0); b < 40; b++ {
		if got := chunksBefore(b); got != c {
			t.Fatalf("chunksBefore(%d) = %d, want %d", b, got, c)
		}
		for k := uint64(0); k < b%4; k++ {
			if gb, gk := chunkAt(c); gb != b || gk != k {
				t.Fatalf("chunkAt(%d) = %d, %d; want %d, %d", c, gb, gk, b, k)
			}
			c++
		}
	}
}

// The consumer subcommand runs both consumers of its pipeline to the end
// of a short chain: every block and every chunk done, in one process.
func TestConsumerPipeline(t *testing.T) {
	url := startMiniredis(t)
	e := env{envRedisURL: url, envNamespace: "t-consumer",
		envHeartbeatInterval: "100ms", envHeartbeatTTL: "1s", envReaperInterval: "100ms", envPollInterval: "50ms"}
	code, stdout, stderr := runArgs(t, e, "consumer", "--blocks", "20", "--block-interval", "5ms",
		"--work-time", "1ms", "--exit-when-done")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	blocks, chunks := map[uint64]bool{}, map[uint64]bool{}
	last := map[string]uint64{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(l)
		n := func(i int) uint64 {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				t.Fatalf("bad line %q", l)
			}
			return v
		}
		switch {
		case len(f) == 2 && f[0] == "block":
			blocks[n(1)] = true
		case len(f) == 4 && f[0] == "chunk":
			if b, k := chunkAt(n(1)); b != n(2) || k != n(3) {
				t.Errorf("line %q: chunk of block %d rank %d", l, b, k)
			}
			chunks[n(1)] = true
		case len(f) == 3 && f[0] == "started":
		case len(f) == 3 && f[0] == "processed":
			if p := n(2); p <= last[f[1]] && last[f[1]] != 0 {
				t.Errorf("processed index of %s went from %d to %d", f[1], last[f[1]], p)
			}
			last[f[1]] = n(2)
		default:
			t.Fatalf("unexpected line %q", l)
		}
	}
	if len(blocks) != 20 || len(chunks) != int(chunksBefore(20)) {
		t.Errorf("%d blocks and %d chunks done, want 20 and %d", len(blocks), len(chunks), chunksBefore(20))
	}
	if last["example.blocks"] != 20 || last["example.chunks"] != chunksBefore(20) {
		t.Errorf("last processed indexes %v", last)
	}
}

func TestConsumerUsage(t *testing.T) {
	e := env{envRedisURL: "redis://127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"consumer", "--exit-when-done", "--blocks", "0"}, "--exit-when-done needs --blocks > 0"},
		{[]string{"consumer", "--max-processing", "0"}, "--max-processing (0) must be at least 1"},
		{[]string{"consumer", "--block-interval", "0s"}, "--block-interval (0s) must be positive"},
		{[]string{"consumer", "--chain-start", "yesterday"}, "--chain-start \"yesterday\" is not an RFC 3339 time"},
	} {
		code, _, stderr := runArgs(t, e, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	code, stdout, _ := runArgs(t, e, "consumer", "--help")
	if code != 0 || !strings.Contains(stdout, "chunk <index> <block> <k>") {
		t.Errorf("--help: exit %d:\n%s", code, stdout)
	}
}
