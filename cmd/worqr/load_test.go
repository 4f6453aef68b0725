package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
)

// TestLoadKilledAndResumedEnqueuesEveryLineOnce kills a load with SIGKILL
// mid-way and resumes it: every line of the file is a task exactly once.
func TestLoadKilledAndResumedEnqueuesEveryLineOnce(t *testing.T) {
	b := setup(t)
	const lines = 200_000
	var input bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&input, "{\"n\":%d}\n", i)
	}
	file := filepath.Join(t.TempDir(), "payloads.jsonl")
	if err := os.WriteFile(file, input.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Small steps, one at a time, so that the kill lands mid-way.
	cmd := exec.Command(binPath, "load", file, "--queue", "ld", "--format", "jsonl", "--chunk", "100", "--window", "1", "--every", "1ms")
	cmd.Env = append(cleanEnv(), "WORQR_REDIS_URL="+redisURL, "WORQR_NAMESPACE="+b.ns)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "enqueued ") && !strings.Contains(sc.Text(), "enqueued 0 ") {
			break
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	first := b.queue("ld").Waiting
	if first == 0 || first >= lines {
		t.Fatalf("%d tasks after the kill: the kill did not land mid-load", first)
	}

	r := b.run("", "load", file, "--queue", "ld", "--format", "jsonl")
	if r.code != exitUsage || !strings.Contains(r.err, "--resume continues it") {
		t.Errorf("started again without --resume: exit %d, stderr %q; want 2 and a hint at --resume", r.code, r.err)
	}
	out := b.ok("", "load", file, "--queue", "ld", "--format", "jsonl", "--resume", "-o", "json")
	var res struct{ Lines, Enqueued, Resumed int64 }
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("load -o json: %v\n%s", err, out)
	}
	if res.Lines != lines || res.Enqueued+res.Resumed != lines || res.Resumed < int64(first) {
		t.Errorf("resumed load reported %+v; want %d lines, enqueued+resumed = lines, resumed >= %d", res, lines, first)
	}
	qi := b.queue("ld")
	if qi.Waiting != lines {
		t.Fatalf("%d tasks waiting after the resume; want %d", qi.Waiting, lines)
	}
	c := b.pool.Get()
	defer c.Close()
	ids, err := redis.Strings(c.Do("LRANGE", b.ns+":{ld}:q:ld", 0, -1))
	if err != nil {
		t.Fatal(err)
	}
	// Loaded tasks wait packed: the payload is field <last 3 characters of
	// the id> of the hash lb:<the rest>, shared by about 2,000 lines.
	for _, id := range ids {
		_ = c.Send("HGET", b.ns+":{ld}:lb:"+id[:len(id)-3], id[len(id)-3:])
	}
	_ = c.Flush()
	seen := make(map[string]bool, lines)
	for range ids {
		p, err := redis.String(c.Receive())
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("payload %s enqueued twice", p)
		}
		seen[p] = true
	}
	for i := 1; i <= lines; i++ {
		if !seen[fmt.Sprintf("{\"n\":%d}", i)] {
			t.Fatalf("line %d was never enqueued", i)
		}
	}
}

func TestLoadUsageErrors(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "-", "--queue", "q"}, "--name is required when reading stdin"},
		{[]string{"load", "-", "--name", "n"}, "--queue is required"},
		{[]string{"load", "-", "--queue", "q", "--name", "n", "--format", "csv"}, `--format "csv": want raw or jsonl`},
		{[]string{"load", "-", "--queue", "q", "--name", "bad name"}, "--name"},
		{[]string{"load", "-", "--queue", "q", "--name", "n", "--chunk", "0"}, "--chunk 0: want 1 to 2000"},
		{[]string{"load", "/no/such/file", "--queue", "q"}, "no such file"},
	} {
		r := b.run("a\n", c.args...)
		if r.code != exitUsage || !strings.Contains(r.err, c.want) {
			t.Errorf("worqr %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), r.code, r.err, c.want)
		}
	}
	out := b.ok("x\n\ny\n", "load", "-", "--queue", "q", "--name", "n")
	if !strings.Contains(out, "enqueued 2 tasks into q from 3 lines (1 blank, 0 loaded before)") {
		t.Errorf("load from stdin said %q", out)
	}
}

// A bad line stops a load after the lines before it; fixed in place, the
// file is resumed by the command the error prints, or by the same command
// with --resume (its default name does not change with the fix), and every
// line ends up enqueued once. A --resume under a name that never started
// enqueues nothing.
func TestLoadFixedAndResumedEnqueuesEveryLineOnce(t *testing.T) {
	b := setup(t)
	var input bytes.Buffer
	for i := 1; i <= 1000; i++ {
		if i == 701 {
			input.WriteString("{oops\n")
			continue
		}
		fmt.Fprintf(&input, "{\"n\":%d}\n", i)
	}
	file := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(file, input.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.run("", "load", file, "--queue", "ld2", "--format", "jsonl")
	if r.code != exitUsage || !strings.Contains(r.err, "line 701") || !strings.Contains(r.err, "--resume") {
		t.Fatalf("bad line: exit %d, stderr %q; want 2, the line and how to resume", r.code, r.err)
	}
	if n := b.queue("ld2").Waiting; n != 700 {
		t.Fatalf("%d tasks after the bad line, want the 700 before it", n)
	}
	fixed := bytes.Replace(input.Bytes(), []byte("{oops\n"), []byte("{\"n\":701}\n"), 1)
	if err := os.WriteFile(file, fixed, 0o600); err != nil {
		t.Fatal(err)
	}
	r = b.run("", "load", file, "--queue", "ld2", "--format", "jsonl", "--resume", "--name", "never-started")
	if r.code != exitUsage || !strings.Contains(r.err, "no load to resume") {
		t.Errorf("resume of a load that never started: exit %d, stderr %q; want 2 and no load to resume", r.code, r.err)
	}
	out := b.ok("", "load", file, "--queue", "ld2", "--format", "jsonl", "--resume")
	if !strings.Contains(out, "enqueued 300 tasks into ld2 from 1000 lines (0 blank, 700 loaded before)") {
		t.Errorf("resume after the fix said %q", out)
	}
	if n := b.queue("ld2").Waiting; n != 1000 {
		t.Fatalf("%d tasks after the resume, want 1000", n)
	}
}

// A load stopped before it enqueued anything (a bad first line) has no
// checkpoint: the error says to run it again, not to resume it.
func TestLoadBadFirstLineSaysRunAgain(t *testing.T) {
	b := setup(t)
	file := filepath.Join(t.TempDir(), "first.jsonl")
	if err := os.WriteFile(file, []byte("{oops\n{\"n\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.run("", "load", file, "--queue", "ld3", "--format", "jsonl")
	if r.code != exitUsage || !strings.Contains(r.err, "line 1") || !strings.Contains(r.err, "not with --resume") {
		t.Fatalf("bad first line: exit %d, stderr %q; want 2 and to run it again without --resume", r.code, r.err)
	}
	if err := os.WriteFile(file, []byte("{\"n\":1}\n{\"n\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "load", file, "--queue", "ld3", "--format", "jsonl"); !strings.Contains(out, "enqueued 2 tasks") {
		t.Errorf("the load run again said %q", out)
	}
}

// A load whose only chunk before a bad line held blank lines has a
// checkpoint all the same: the error says to resume it (before, it said to
// run it again, which is refused while the checkpoint exists).
func TestLoadBlankLinesThenABadLineSaysResume(t *testing.T) {
	b := setup(t)
	file := filepath.Join(t.TempDir(), "blank.jsonl")
	if err := os.WriteFile(file, []byte("\n\n{oops\n{\"n\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.run("", "load", file, "--queue", "ld4", "--format", "jsonl", "--name", "blank")
	if r.code != exitUsage || !strings.Contains(r.err, "line 3") || !strings.Contains(r.err, "--resume") || strings.Contains(r.err, "not with --resume") {
		t.Fatalf("blank lines, then a bad line: exit %d, stderr %q; want 2 and to resume it", r.code, r.err)
	}
	if err := os.WriteFile(file, []byte("\n\n{\"n\":1}\n{\"n\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "load", file, "--queue", "ld4", "--format", "jsonl", "--name", "blank", "--resume"); !strings.Contains(out, "enqueued 2 tasks") {
		t.Errorf("the load resumed said %q", out)
	}
}

// A load that Redis refuses (an error reply: OOM under maxmemory, here a
// waiting list of the wrong type) says how far it got and how to go on;
// it printed Redis's error alone.
func TestLoadRefusedByRedisSaysHowToGoOn(t *testing.T) {
	b := setup(t)
	file := filepath.Join(t.TempDir(), "refused.txt")
	if err := os.WriteFile(file, []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := b.pool.Get()
	defer c.Close()
	waiting := b.ns + ":{ld5}:q:ld5"
	if _, err := c.Do("SET", waiting, "not a list"); err != nil {
		t.Fatal(err)
	}
	r := b.run("", "load", file, "--queue", "ld5")
	if r.code == 0 || !strings.Contains(r.err, "WRONGTYPE") || !strings.Contains(r.err, "0 tasks enqueued now") || !strings.Contains(r.err, "run the same command again") {
		t.Fatalf("refused load: exit %d, stderr %q; want Redis's error, how far it got and how to go on", r.code, r.err)
	}
	if _, err := c.Do("DEL", waiting); err != nil {
		t.Fatal(err)
	}
	if out := b.ok("", "load", file, "--queue", "ld5"); !strings.Contains(out, "enqueued 2 tasks") {
		t.Errorf("the load run again said %q", out)
	}
}
