package worqr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
	"github.com/worqr/worqr-go/worqr"
)

// With AnyQueue (the CLI gateway's default), every queue name a session
// ever named stayed in the Remote for the life of the process: subscribed
// to, and read once per PollInterval (one round trip per stand-alone
// queue, in series, under one 5 s bound for them all). Names come from
// remotes: one caller opening sessions over fresh names (100 a call, even
// when MaxSessions refuses the open) grows the set without bound. Once no
// open session names a queue, the Remote lets it go.
func TestRemoteForgetsQueuesNoSessionNames(t *testing.T) {
	ctx := context.Background()
	b := setupRemote(t, ctx, worqr.RemoteConfig{AnyQueue: true, SessionTTL: 300 * time.Millisecond,
		ReaperInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	keys := rdb.NewKeys(b.ns)
	var channels []any
	for round := 0; round < 3; round++ {
		names := make([]string, 100)
		for i := range names {
			names[i] = fmt.Sprintf("tenant-%d-%d", round, i)
			channels = append(channels, keys.Queue(rdb.Standalone(names[i])).WakeChannel)
		}
		s := open(t, b, names...)
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	conn := srv.Pool().Get()
	defer conn.Close()
	subscribed := func() int {
		vals, err := redis.Values(conn.Do("PUBSUB", append([]any{"NUMSUB"}, channels...)...))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i := 1; i < len(vals); i += 2 {
			if c, _ := redis.Int(vals[i], nil); c > 0 {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(3 * time.Second)
	n := subscribed()
	for n > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = subscribed()
	}
	if n > 0 {
		t.Errorf("%d of the %d queues of closed sessions are still subscribed (and polled) 3 s after the last one closed", n, len(channels))
	}
}
