// Package goredis serves worqr from a go-redis client
// (github.com/redis/go-redis/v9): an application that already has a
// redis.UniversalClient gives it to worqr, with its TLS, ACL user, Cluster
// or Sentinel setup, hooks and metrics, instead of opening a redigo pool
// beside it.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", Protocol: 2})
//	pool, err := goredis.New(rdb)
//	...
//	client, err := worqr.NewClient(pool, &worqr.Config{Namespace: "app"})
//
// New takes a *redis.Client (redis.NewClient, or redis.NewFailoverClient for
// a primary that Sentinel names) or a *redis.ClusterClient. The client must
// speak RESP2 (Options.Protocol 2).
//
// What worqr relies on holds as with redigo:
//
//   - One worqr call, one connection: each connection worqr takes is one of
//     the client's pool (client.Conn), kept for the call: a pipeline, a
//     MULTI/EXEC and the WAIT after a write go on it in order.
//   - A command is sent once. go-redis sends a command again after a
//     connection error (Options.MaxRetries); on a connection worqr holds, a
//     failed connection stays failed, so a script whose reply was lost is
//     never run a second time behind worqr's back. worqr decides what a lost
//     reply means (a take or an end that may have been applied).
//   - Replies read as redigo reads them (the adapter reads the reply's
//     bytes itself): bulk strings as []byte, simple strings as string,
//     integers as int64, arrays as []any, nil, and error replies as
//     redis.Error (NOSCRIPT, MOVED, ASK, ...).
//   - Pipelines: go-redis writes a pipeline and reads its replies in one
//     go, so the commands Send queues leave at the first Receive or Do
//     after them (Flush sends nothing itself), all in one round trip. A
//     window of pipelined chunks (worqr's batch enqueue and load) costs a
//     round trip per window, as with redigo, though a window is not sent
//     while the one before it is read. What was sent and not received when
//     the connection closes is not sent.
//   - Pub/sub: a Worker's subscription is a go-redis PubSub on a connection
//     of its own; on a Cluster the wake-ups and cancels go through sharded
//     pub/sub (SSUBSCRIBE to each master).
//   - Cluster: a call goes to the master that serves its hash tag's slot
//     (ClusterClient.MasterForKey); a call refused with MOVED, ASK, TRYAGAIN
//     or CLUSTERDOWN ran nowhere and the ClusterClient sends it again where
//     the slot is now.
//   - Server switches: a worker releases what it holds when its pool's
//     server changed, since an end the old one acknowledged may be lost.
//     A Pool of a failover client sees the primary's address change; a
//     Cluster reads the slot map itself (CLUSTER SHARDS) and counts a
//     master that left it (a failover), and its MasterOf returns "" for
//     the slots of a master that is down, as redisconn.Cluster's does.
//
// Against redigo a go-redis client sends the same commands per task; it
// costs more per call (a go-redis Conn and a pool check for each
// connection worqr takes): in this module's BenchmarkClients a drain takes
// about 4 % longer per task and an enqueue about 9 % (see the README).
//
// worqr keeps its own Cluster and Sentinel clients (package redisconn):
// redigo, its own client, has neither, and redisconn.Sentinel checks what
// go-redis's failover client does not (ROLE, configuration epochs, a hung
// sentinel). A program that already has a go-redis client gives worqr
// that one; docs/guide/getting-started.md ("Which client for Cluster and
// Sentinel") says which to pick and why.
//
// worqr never closes the client. This module is the only one of worqr's
// that requires go-redis: the library itself uses redigo.
package goredis
