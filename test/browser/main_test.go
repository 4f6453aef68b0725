// Package browser drives the dashboard in a real headless Chromium through
// chromedp: live counts without a reload, a bulk retry from the page, and
// read-only mode. It is a module of its own so that chromedp stays out of
// the library's go.mod. TestScreenshots (with -screenshots DIR) captures the
// PNGs of docs/img.
package browser

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	browserPath string // "" when no browser is installed: the tests skip
	redisURL    string
	screenshots = flag.String("screenshots", "", "TestScreenshots writes one PNG per dashboard page into this directory")
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			browserPath = p
			break
		}
	}
	if browserPath == "" {
		fmt.Fprintln(os.Stderr, "browser tests: no chromium or google-chrome on the PATH; they will be skipped (Debian: apt-get install -y chromium)")
		return m.Run()
	}
	stop, url, err := startRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 2
	}
	defer stop()
	redisURL = url
	return m.Run()
}

// startRedis starts a private redis-server on a free loopback port with
// persistence off, as internal/redistest does (an internal package cannot
// be imported from this module).
func startRedis() (stop func(), url string, err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, "", errors.New("redis-server not found: install it (Debian/Ubuntu: apt-get install -y redis-server)")
	}
	dir, err := os.MkdirTemp("", "worqr-browser-redis-")
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				ready <- true
				for sc.Scan() {
				}
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			return nil, "", errors.New("redis-server exited before it was ready")
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		return nil, "", errors.New("redis-server did not start within 20s")
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}, "redis://127.0.0.1:" + strconv.Itoa(port), nil
}
