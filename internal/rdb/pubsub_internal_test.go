package rdb

import (
	"crypto/sha1"
	"encoding/hex"
	"io/fs"
	"strings"
	"testing"
)

// Every script publishes through publishCall, so that the sharded variant
// (SPUBLISH, on a Redis Cluster) replaces every publish; a publish written
// another way would stay a PUBLISH, broadcast to every node of a cluster.
func TestPublishCalls(t *testing.T) {
	files, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	inc, err := fs.Glob(luaFiles, "lua/include/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range append(files, inc...) {
		b, err := luaFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := stripComments(string(b)) // comments may name PUBLISH
		all, plain := strings.Count(strings.ToUpper(src), "PUBLISH"), strings.Count(src, publishCall)
		if all != plain {
			t.Errorf("%s: %d mentions of PUBLISH, %d of them as %s: publish only that way", f, all, plain, publishCall)
		}
		total += plain
	}
	if total == 0 {
		t.Fatal("no script publishes: the test reads the wrong files")
	}
	plain, shard := lib(false), lib(true)
	if plain.name == shard.name {
		t.Errorf("the plain and sharded libraries share the name %s", plain.name)
	}
	if strings.Contains(plain.src, "SPUBLISH") {
		t.Error("the plain library publishes with SPUBLISH")
	}
	if n := strings.Count(shard.src, publishCall); n != 0 {
		t.Errorf("the sharded library still holds %d PUBLISH", n)
	}
	if a, b := strings.Count(plain.src, publishCall), strings.Count(shard.src, "redis.call('SPUBLISH',"); a != b || a == 0 {
		t.Errorf("%d PUBLISH in the plain library, %d SPUBLISH in the sharded one", a, b)
	}
	if sharded(plain.src) != strings.Replace(shard.src, shard.name, plain.name, -1) {
		t.Error("the sharded library differs from the plain one by more than its publishes and its name")
	}
	for _, sc := range scripts {
		if sc.shardSrc != sharded(sc.src) {
			t.Errorf("%s: the sharded source is not the plain one with SPUBLISH", sc.name)
		}
		if sum := sha1.Sum([]byte(sc.shardSrc)); hex.EncodeToString(sum[:]) != sc.shardHash {
			t.Errorf("%s: the sharded hash is not the SHA-1 of the sharded source", sc.name)
		}
		if sc.fn == sc.shardFn || !strings.HasPrefix(sc.shardFn, shard.name+"_") {
			t.Errorf("%s: functions %s and %s", sc.name, sc.fn, sc.shardFn)
		}
	}
}
