package worqr

import "github.com/gomodule/redigo/redis"

// waitReadWidth is how many of a Client's waits may read at once: at most
// 8, and with a pool capped by MaxActive (a *redis.Pool, as
// redisconn.NewPool returns, or a redisconn.Cluster or Sentinel, per node)
// at most half of what
// the subscription leaves, at least 1.
func waitReadWidth(pool ConnGetter) int {
	capped := 0
	switch p := pool.(type) {
	case *redis.Pool:
		capped = p.MaxActive
	case interface{ MaxActive() int }: // a redisconn.Cluster or Sentinel
		capped = p.MaxActive()
	}
	if capped > 0 {
		return max(1, min(8, (capped-1)/2))
	}
	return 8
}
