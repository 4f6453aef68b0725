// Package redisconn makes the connection sources worqr runs on: a redigo
// pool for one Redis server (NewPool), a client of a Redis Cluster that
// sends each call to the master of its hash tag's slot (NewCluster), and a
// pool that follows the primary a set of Redis Sentinels names
// (NewSentinel). Each satisfies worqr.ConnGetter; worqr never closes them.
//
//	pool, err := redisconn.NewPool("redis://localhost:6379/0", nil)
//	if err != nil { ... }
//	defer pool.Close()
//	client, err := worqr.NewClient(pool, nil)
//
// A *redis.Pool of your own works as well. See docs/guide/cluster.md and
// docs/guide/sentinel.md for what a cluster and a failover change.
package redisconn
