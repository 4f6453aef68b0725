package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An error reads "worqr <command>: what went wrong": the library's own
// "worqr: " prefixes, and a repeat of the command's name, are dropped
// wherever the CLI wraps them (it read "worqr load: worqr: load: line 2:
// worqr: line is not one JSON value ...").
func TestErrorsCarryOnePrefix(t *testing.T) {
	b := setup(t)
	file := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(file, []byte("{\"n\":1}\n{oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderrs []string
	r := b.run("", "load", file, "--queue", "jobs", "--format", "jsonl", "--name", "bad")
	first := strings.SplitN(r.err, "\n", 3)[1] // after the "loading ..." line
	if r.code != exitUsage || !strings.HasPrefix(first, "worqr load: line 2: line is not one JSON value (format jsonl); lines before it are enqueued") {
		t.Errorf("a bad line: exit %d, stderr %q; want 2 and \"worqr load: line 2: line is not one JSON value ...\"", r.code, r.err)
	}

	stderrs = append(stderrs, r.err)

	// An error from Redis, wrapped by the library and by the CLI.
	c := b.pool.Get()
	defer c.Close()
	if _, err := c.Do("SET", b.ns+":{reg}:queues", "not a set"); err != nil {
		t.Fatal(err)
	}
	r = b.run("", "stats")
	if r.code != 1 || !strings.HasPrefix(r.err, "worqr stats: queues: WRONGTYPE") {
		t.Errorf("stats over a broken key: exit %d, stderr %q; want 1 and \"worqr stats: queues: WRONGTYPE ...\"", r.code, r.err)
	}
	stderrs = append(stderrs, r.err)
	if _, err := c.Do("DEL", b.ns+":{reg}:queues"); err != nil {
		t.Fatal(err)
	}

	// A sentinel of the library, wrapped by the CLI's own words.
	b.ok("", "enqueue", "jobs", "x", "--unique-key", "k", "--unique-ttl", "1m")
	r = b.run("", "enqueue", "jobs", "y", "--unique-key", "k", "--unique-ttl", "1m")
	if r.code != 1 || !strings.HasPrefix(r.err, "worqr enqueue: duplicate task: unique key \"k\"") {
		t.Errorf("a duplicate: exit %d, stderr %q; want \"worqr enqueue: duplicate task: ...\"", r.code, r.err)
	}
	for _, out := range append(stderrs, r.err) {
		if strings.Contains(out, "worqr: ") {
			t.Errorf("stderr %q still carries the library's prefix", out)
		}
	}
}
