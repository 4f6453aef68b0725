package cluster

import (
	"errors"
	"testing"

	"github.com/gomodule/redigo/redis"
)

// TestParseRedirect: the replies a Conn acts on, with the text Redis 7
// sends, and the ones it passes through.
func TestParseRedirect(t *testing.T) {
	for _, c := range []struct {
		reply string
		want  redirectKind
		addr  string
	}{
		{"MOVED 3999 127.0.0.1:6381", movedRedirect, "127.0.0.1:6381"},
		{"ASK 3999 127.0.0.1:6381", askRedirect, "127.0.0.1:6381"},
		{"MOVED 3999 :6381", movedRedirect, "10.0.0.1:6381"}, // a node that does not know its IP
		{"TRYAGAIN Multiple keys request during rehashing of slot", tryAgain, ""},
		{"CLUSTERDOWN The cluster is down", clusterDown, ""},
		{"CLUSTERDOWN Hash slot not served", clusterDown, ""},
		{"LOADING Redis is loading the dataset in memory", loading, ""},
		{"READONLY You can't write against a read only replica.", readOnly, ""},
		{"ERR Script attempted to access a non local key in a cluster node script", noRedirect, ""},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", noRedirect, ""},
	} {
		rd := parseRedirect(redis.Error(c.reply), "10.0.0.1:6379")
		if rd.kind != c.want || rd.addr != c.addr {
			t.Errorf("%q: kind %d addr %q, want %d %q", c.reply, rd.kind, rd.addr, c.want, c.addr)
		}
	}
	if rd := parseRedirect(errors.New("EOF"), "x:1"); rd.kind != noRedirect {
		t.Errorf("a connection error parsed as %d", rd.kind)
	}
}
