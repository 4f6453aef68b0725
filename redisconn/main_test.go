package redisconn_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/worqr/worqr-go/internal/redistest"
)

func TestMain(m *testing.M) {
	flag.Parse()
	srv := redistest.MustStart()
	// The examples read the servers' addresses as a program would.
	os.Setenv("WORQR_REDIS_URL", srv.URL)
	var stops []func()
	// A cluster takes about 2 s to form: it is started only when its
	// example is to run.
	if selected("ExampleNewCluster") {
		cl, err := redistest.StartCluster(3)
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting the Redis Cluster of ExampleNewCluster:", err)
			os.Exit(1)
		}
		stops = append(stops, cl.Stop)
		os.Setenv("WORQR_REDIS_CLUSTER", strings.Join(cl.Addrs(), ","))
	}
	if selected("ExampleNewSentinel") {
		st, err := redistest.StartSentinel(context.Background(), 0, 1)
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting the Sentinel of ExampleNewSentinel:", err)
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
