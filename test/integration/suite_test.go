// Package integration_test is worqr's black-box suite: real redis-server, real
// worker processes (cmd/worqr-example) killed and frozen for real, and
// in-process workers driven through the public API. Each spec works in its
// own namespace, so specs are independent and need no FLUSHDB.
package integration_test

import (
	"encoding/json"
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/worqr/worqr-go/internal/redistest"
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "worqr integration suite")
}

var (
	// srv is the suite's redis-server (started by process 1).
	srv *redistest.Server
	// exampleBin is the path of the built cmd/worqr-example binary.
	exampleBin string
	// ownServer is set on the process that started srv and must stop it.
	ownServer *redistest.Server
)

type suiteShared struct {
	RedisURL   string
	ExampleBin string
}

var _ = SynchronizedBeforeSuite(func() []byte {
	s, err := redistest.Start()
	Expect(err).NotTo(HaveOccurred(), "starting redis-server")
	ownServer = s
	// Built with the race detector: a data race in a worker process makes it
	// exit 66, so the process specs catch races of the shipped binary too.
	// With the go build -overlay file WORQR_EXAMPLE_OVERLAY names, when set
	// (contrib/goredis/suite sets it: the processes then run on go-redis).
	args := []string{"-race"}
	if ov := os.Getenv("WORQR_EXAMPLE_OVERLAY"); ov != "" {
		args = append(args, "-overlay", ov)
	}
	bin, err := gexec.Build("github.com/worqr/worqr-go/cmd/worqr-example", args...)
	Expect(err).NotTo(HaveOccurred(), "building cmd/worqr-example")
	data, err := json.Marshal(suiteShared{RedisURL: s.URL, ExampleBin: bin})
	Expect(err).NotTo(HaveOccurred())
	return data
}, func(data []byte) {
	var sh suiteShared
	Expect(json.Unmarshal(data, &sh)).To(Succeed())
	srv = &redistest.Server{URL: sh.RedisURL}
	exampleBin = sh.ExampleBin
})

var _ = SynchronizedAfterSuite(func() {
	gexec.KillAndWait()
}, func() {
	if ownServer != nil {
		ownServer.Stop()
	}
	gexec.CleanupBuildArtifacts()
})
