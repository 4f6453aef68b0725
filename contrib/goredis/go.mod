module github.com/worqr/worqr-go/contrib/goredis

go 1.24

require (
	github.com/gomodule/redigo v1.9.3
	github.com/redis/go-redis/v9 v9.22.0
	github.com/worqr/worqr-go v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/rs/xid v1.6.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
