module github.com/worqr/worqr-go/cmd/worqr

go 1.24.0

require (
	github.com/gomodule/redigo v1.9.3
	github.com/prometheus/client_golang v1.23.2
	github.com/rs/xid v1.6.0
	github.com/schollz/progressbar/v3 v3.18.0
	github.com/spf13/cobra v1.10.2
	github.com/worqr/worqr-go v0.1.0
	github.com/worqr/worqr-go/contrib/prometheus v0.1.0
	github.com/worqr/worqr-go/gateway v0.1.0
	golang.org/x/sys v0.35.0
	golang.org/x/term v0.28.0
)

require (
	connectrpc.com/connect v1.19.1 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	google.golang.org/protobuf v1.36.10 // indirect
)
