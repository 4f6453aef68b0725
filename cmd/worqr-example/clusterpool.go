package main

import (
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// openCluster returns the pool on the Redis Cluster of seeds and the
// function that closes it. It is a file of its own so that a build for
// another client replaces it (contrib/goredis/suite, with go build
// -overlay, for test/cluster's chaos test).
func openCluster(seeds []string, o *redisconn.Options) (worqr.ConnGetter, func(), error) {
	p, err := redisconn.NewCluster(seeds, o)
	if err != nil {
		return nil, nil, err
	}
	return p, func() { p.Close() }, nil
}
