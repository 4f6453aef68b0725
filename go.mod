module github.com/worqr/worqr-go

go 1.23

require (
	github.com/gomodule/redigo v1.9.3
	github.com/rs/xid v1.6.0
)
