// Package browser drives the dashboard in a real headless Chromium through
// chromedp: live counts without a reload, a bulk retry from the page, and
// read-only mode. It is a module of its own so that chromedp stays out of
// the library's go.mod. TestScreenshots (with -screenshots DIR) captures the
// PNGs of docs/img.
package browser

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
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
	srv, err := redistest.Start() // or the server WORQR_TEST_REDIS_URL names
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 2
	}
	defer srv.Stop()
	redisURL = srv.URL
	return m.Run()
}
