package worqr_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/worqr"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	if role := os.Getenv("WORQR_TEST_CHILD"); role != "" {
		// A child process of a test (see startChild): it uses its parent's
		// server (WORQR_TEST_REDIS_URL).
		srv = redistest.MustStart()
		os.Exit(runChild(role))
	}
	flag.Parse()
	srv = redistest.MustStart()
	// The examples read the servers' addresses as a program would.
	os.Setenv("WORQR_REDIS_URL", srv.URL)
	var stops []func()
	// A cluster takes about 2 s to form: it is started only when its
	// example is to run.
	if selected("ExampleNewClusterPool") {
		cl, err := redistest.StartCluster(3)
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting the Redis Cluster of ExampleNewClusterPool:", err)
			os.Exit(1)
		}
		stops = append(stops, cl.Stop)
		os.Setenv("WORQR_REDIS_CLUSTER", strings.Join(cl.Addrs(), ","))
	}
	if selected("ExampleNewSentinelPool") {
		st, err := redistest.StartSentinel(context.Background(), 0, 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting the Sentinel of ExampleNewSentinelPool:", err)
			os.Exit(1)
		}
		stops = append(stops, st.Stop)
		os.Setenv("WORQR_REDIS_SENTINEL", redistest.SentinelMaster+"@"+strings.Join(st.Addrs(), ","))
	}
	code := m.Run()
	for _, stop := range stops {
		stop()
	}
	srv.Stop()
	os.Exit(code)
}

// selected reports whether the -test.run and -test.skip flags let the
// top-level test or example name run.
func selected(name string) bool {
	match := func(flagName string, empty bool) bool {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return empty
		}
		// A pattern's first '/'-separated element matches top-level names.
		first := strings.Split(f.Value.String(), "/")[0]
		re, err := regexp.Compile(first)
		return err != nil || re.MatchString(name)
	}
	return match("test.run", true) && !match("test.skip", false)
}

// newInspector returns an Inspector on pool with cfg (in most tests, the
// config of the Client whose tasks it reads), and fails t if it cannot.
func newInspector(t testing.TB, pool worqr.ConnGetter, cfg *worqr.Config) *worqr.Inspector {
	t.Helper()
	in, err := worqr.NewInspector(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// queueLen returns how many tasks wait in queue (Inspector.Queue's
// Waiting), and fails t if it cannot read it.
func queueLen(t testing.TB, in *worqr.Inspector, queue string) int {
	t.Helper()
	qi, err := in.Queue(context.Background(), queue)
	if err != nil {
		t.Fatal(err)
	}
	return int(qi.Waiting)
}
