package integration_test

import (
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"

	"github.com/worqr/worqr-go/internal/redistest"
)

// The example binary against a redis-server that accepts only an ACL user
// over TLS with a client certificate: it works, and its output never holds
// the password.
var _ = Describe("Secure connections", func() {
	const password = "pw-Zq81-never-logged"

	run := func(env []string, args ...string) *gexec.Session {
		cmd := exec.Command(exampleBin, args...)
		cmd.Env = env
		s, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
		Expect(err).NotTo(HaveOccurred())
		return s
	}
	noSecret := func(s *gexec.Session) {
		GinkgoHelper()
		Expect(string(s.Out.Contents())).NotTo(ContainSubstring(password))
		Expect(string(s.Err.Contents())).NotTo(ContainSubstring(password))
	}

	It("enqueues and works over TLS with client certificates as an ACL user, never printing the password", func(ctx SpecContext) {
		srv, files, err := redistest.StartSecure("worqr", password, true)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Stop)
		Expect(srv.URL).To(HavePrefix("rediss://worqr:" + password + "@"))
		ns := redistest.Namespace()
		env := []string{"WORQR_REDIS_URL=" + srv.URL, "WORQR_NAMESPACE=" + ns, "WORQR_LOG_LEVEL=debug",
			"WORQR_TLS_CA_FILE=" + files.CA, "WORQR_TLS_CERT_FILE=" + files.ClientCert, "WORQR_TLS_KEY_FILE=" + files.ClientKey}

		w := run(env, "worker", "--queues", "sec", "--work-time", "0s")
		DeferCleanup(func() { w.Terminate().Wait(5 * time.Second) })
		Eventually(w.Out).WithContext(ctx).WithTimeout(10 * time.Second).Should(gbytes.Say(`registered `))

		e := run(env, "enqueue", "--queue", "sec", "--count", "3")
		Eventually(e).WithContext(ctx).WithTimeout(10 * time.Second).Should(gexec.Exit(0))
		ids := strings.Fields(strings.ReplaceAll(string(e.Out.Contents()), "enqueued sec", ""))
		Expect(ids).To(HaveLen(3))
		out := func() string { return string(w.Out.Contents()) }
		for _, id := range ids {
			Eventually(out).WithContext(ctx).WithTimeout(10 * time.Second).Should(ContainSubstring("done sec " + id))
		}
		noSecret(w)
		noSecret(e)

		// Without the client certificate the server refuses: a clear error,
		// exit 1, and still no password.
		bare := run([]string{"WORQR_REDIS_URL=" + srv.URL, "WORQR_NAMESPACE=" + ns, "WORQR_TLS_CA_FILE=" + files.CA},
			"enqueue", "--queue", "sec", "--count", "1")
		Eventually(bare).WithContext(ctx).WithTimeout(15 * time.Second).Should(gexec.Exit(1))
		Expect(string(bare.Err.Contents())).To(ContainSubstring("cannot reach Redis"))
		Expect(string(bare.Err.Contents())).To(ContainSubstring("worqr:xxxxx@"))
		noSecret(bare)

		// A wrong password fails too, without printing either password.
		wrong := run([]string{"WORQR_REDIS_URL=" + strings.Replace(srv.URL, password, "wrong-"+password, 1),
			"WORQR_NAMESPACE=" + ns, "WORQR_TLS_CA_FILE=" + files.CA,
			"WORQR_TLS_CERT_FILE=" + files.ClientCert, "WORQR_TLS_KEY_FILE=" + files.ClientKey},
			"stats", "--queues", "sec")
		Eventually(wrong).WithContext(ctx).WithTimeout(15 * time.Second).Should(gexec.Exit(1))
		noSecret(wrong)
	}, SpecTimeout(60*time.Second))

	It("refuses TLS files with a plain redis:// URL, naming the variables, exit 2", func(ctx SpecContext) {
		s := run([]string{"WORQR_REDIS_URL=redis://u:" + password + "@127.0.0.1:1", "WORQR_TLS_CA_FILE=/nonexistent"},
			"enqueue", "--queue", "q")
		Eventually(s).WithContext(ctx).WithTimeout(10 * time.Second).Should(gexec.Exit(2))
		Expect(string(s.Err.Contents())).To(ContainSubstring("WORQR_TLS_CA_FILE"))
		noSecret(s)
	}, SpecTimeout(20*time.Second))
})
