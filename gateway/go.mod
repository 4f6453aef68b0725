module github.com/worqr/worqr-go/gateway

go 1.24.0

require (
	connectrpc.com/connect v1.19.1
	github.com/gomodule/redigo v1.9.3
	github.com/rs/xid v1.6.0
	github.com/worqr/worqr-go v0.1.0
	google.golang.org/protobuf v1.36.10
)

require github.com/robfig/cron/v3 v3.0.1 // indirect
