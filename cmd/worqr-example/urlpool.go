package main

import (
	"github.com/worqr/worqr-go/redisconn"
	"github.com/worqr/worqr-go/worqr"
)

// openURL returns the pool on the Redis at rawURL (it dials nothing yet)
// and the function that closes it. It is a file of its own so that a
// build for another client replaces it (contrib/goredis/suite, with go
// build -overlay, for the worker processes of test/integration and
// test/chaos).
func openURL(rawURL string, o *redisconn.Options) (worqr.ConnGetter, func(), error) {
	p, err := newPool(rawURL, o)
	if err != nil {
		return nil, nil, err
	}
	return p, func() { p.Close() }, nil
}
