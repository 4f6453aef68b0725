module github.com/worqr/worqr-go/cmd/worqr

go 1.23

replace github.com/worqr/worqr-go => ../..

require (
	github.com/gomodule/redigo v1.9.3
	github.com/rs/xid v1.6.0
	github.com/schollz/progressbar/v3 v3.18.0
	github.com/spf13/cobra v1.10.2
	github.com/worqr/worqr-go v0.0.0-00010101000000-000000000000
	golang.org/x/term v0.28.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/sys v0.29.0 // indirect
)
