module github.com/worqr/worqr-go/contrib/goredis

go 1.23.0

require (
	github.com/gomodule/redigo v1.9.3
	github.com/redis/go-redis/v9 v9.22.0
	github.com/worqr/worqr-go v0.1.0
)
