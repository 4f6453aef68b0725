package gateway_test

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// blackhole returns the address of a listener whose accept queue is full:
// a dial to it times out, as a dial to a Redis host behind a firewall that
// drops packets (or a host that is down in a cloud network) does.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for i := 0; i < 2; i++ { // fill the accept queue
		d := net.Dialer{Timeout: 200 * time.Millisecond}
		if c, err := d.Dial("tcp", addr); err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	return addr
}

// startGatewayWith starts a gateway whose Remote, Client and Inspector
// have Config cfg, on pool.
func startGatewayWith(t *testing.T, pool worqr.ConnGetter, cfg worqr.Config) *gw {
	t.Helper()
	return serveGateway(t, pool, remote.Config{Config: cfg, AnyQueue: true,
		SessionTTL: 2 * time.Second, ReaperInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond})
}
