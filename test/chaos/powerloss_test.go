package chaos_test

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// powerLossShim is an LD_PRELOAD library for redis-server that simulates a
// power loss on SIGKILL: it keeps every write(2) to an *.aof file in process
// memory and hands it to the kernel only when Redis calls fsync or fdatasync
// on that file (or closes it). A SIGKILL then loses exactly what the page
// cache would have lost in a power cut or kernel crash: the data written since
// the last fsync. (A real crash may lose less: the kernel writes dirty pages
// back on its own within seconds.)
const powerLossShim = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXFD 65536
static char *buf[MAXFD];
static size_t len[MAXFD], cap[MAXFD];
static char tracked[MAXFD];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_close)(int);
static int (*real_open64)(const char *, int, ...);
static int (*real_open)(const char *, int, ...);

// A fork (Redis forks to rewrite its AOF) must not leave the child with the
// lock held by another thread of the parent.
static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork(void) { pthread_mutex_unlock(&mu); }

__attribute__((constructor)) static void setup(void) {
	pthread_atfork(before_fork, after_fork, after_fork);
}

static void init(void) {
	if (!real_write) {
		real_write = dlsym(RTLD_NEXT, "write");
		real_fsync = dlsym(RTLD_NEXT, "fsync");
		real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
		real_close = dlsym(RTLD_NEXT, "close");
		real_open64 = dlsym(RTLD_NEXT, "open64");
		real_open = dlsym(RTLD_NEXT, "open");
	}
}

static int is_aof(const char *p) {
	size_t n = strlen(p);
	return n > 4 && strcmp(p + n - 4, ".aof") == 0;
}

static void track(int fd, const char *path, int flags) {
	if (fd >= 0 && fd < MAXFD && (flags & (O_WRONLY | O_RDWR)) && is_aof(path)) {
		pthread_mutex_lock(&mu);
		tracked[fd] = 1;
		len[fd] = 0;
		pthread_mutex_unlock(&mu);
	}
}

static int flush_locked(int fd) {
	size_t off = 0;
	while (off < len[fd]) {
		ssize_t n = real_write(fd, buf[fd] + off, len[fd] - off);
		if (n <= 0) return -1;
		off += n;
	}
	len[fd] = 0;
	return 0;
}

int open64(const char *path, int flags, ...) {
	init();
	mode_t mode = 0;
	if (flags & O_CREAT) { va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); }
	int fd = real_open64(path, flags, mode);
	track(fd, path, flags);
	return fd;
}

int open(const char *path, int flags, ...) {
	init();
	mode_t mode = 0;
	if (flags & O_CREAT) { va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); }
	int fd = real_open(path, flags, mode);
	track(fd, path, flags);
	return fd;
}

ssize_t write(int fd, const void *p, size_t n) {
	init();
	if (fd >= 0 && fd < MAXFD && tracked[fd]) {
		pthread_mutex_lock(&mu);
		if (tracked[fd]) {
			if (len[fd] + n > cap[fd]) {
				size_t c = cap[fd] ? cap[fd] : 1 << 20;
				while (c < len[fd] + n) c *= 2;
				char *nb = realloc(buf[fd], c);
				if (!nb) { pthread_mutex_unlock(&mu); return -1; }
				buf[fd] = nb;
				cap[fd] = c;
			}
			memcpy(buf[fd] + len[fd], p, n);
			len[fd] += n;
			pthread_mutex_unlock(&mu);
			return n;
		}
		pthread_mutex_unlock(&mu);
	}
	return real_write(fd, p, n);
}

static int sync_with(int (*real)(int), int fd) {
	if (fd >= 0 && fd < MAXFD && tracked[fd]) {
		pthread_mutex_lock(&mu);
		if (tracked[fd]) flush_locked(fd);
		pthread_mutex_unlock(&mu);
	}
	return real(fd);
}

int fsync(int fd) { init(); return sync_with(real_fsync, fd); }
int fdatasync(int fd) { init(); return sync_with(real_fdatasync, fd); }

int close(int fd) {
	init();
	if (fd >= 0 && fd < MAXFD && tracked[fd]) {
		pthread_mutex_lock(&mu);
		if (tracked[fd]) { flush_locked(fd); tracked[fd] = 0; }
		pthread_mutex_unlock(&mu);
	}
	return real_close(fd);
}
`

// buildPowerLossShim compiles the shim into dir, or says why it cannot.
func buildPowerLossShim(dir string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		if cc, err = exec.LookPath("gcc"); err != nil {
			return "", errors.New("no C compiler (cc or gcc) on the PATH")
		}
	}
	src := filepath.Join(dir, "powerloss.c")
	if err := os.WriteFile(src, []byte(powerLossShim), 0o644); err != nil {
		return "", err
	}
	so := filepath.Join(dir, "powerloss.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl", "-lpthread").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("compiling the power-loss shim: %v: %s", err, out)
	}
	return so, nil
}

// shimmedRedis is a redis-server started by hand (redistest cannot set its
// environment) with the power-loss shim preloaded.
type shimmedRedis struct {
	dir, addr, shim string
	args            []string
	cmd             *exec.Cmd
}

func startShimmedRedis(shim, fsync string) (*shimmedRedis, error) {
	dir, err := os.MkdirTemp("", "worqr-redis-powerloss-")
	if err != nil {
		return nil, err
	}
	port, err := stablePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &shimmedRedis{dir: dir, addr: "127.0.0.1:" + strconv.Itoa(port), shim: shim,
		args: []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "yes", "--appendfsync", fsync, "--auto-aof-rewrite-percentage", "0",
			"--protected-mode", "no"}}
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *shimmedRedis) url() string { return "redis://" + s.addr }

// stablePort returns a free loopback port below the kernel's ephemeral range,
// so that no outgoing connection can take it while the server is down
// between a crash and its restart.
func stablePort() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	base := max(low-12000, 1024)
	for i := 0; i < 100; i++ {
		port := base + rand.IntN(low-base)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			l.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free port below the ephemeral range")
}

func (s *shimmedRedis) launch() error {
	cmd := exec.Command("redis-server", s.args...)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+s.shim)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		var log []string
		for sc.Scan() {
			log = append(log, sc.Text())
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				ready <- nil
				for sc.Scan() {
				}
				return
			}
		}
		ready <- fmt.Errorf("redis-server (power-loss shim) exited before it was ready:\n%s", strings.Join(log, "\n"))
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Wait()
			return err
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		return errors.New("redis-server (power-loss shim) did not start within 20s")
	}
	s.cmd = cmd
	return nil
}

// crash SIGKILLs the server: with the shim, what was not fsynced is gone.
func (s *shimmedRedis) crash() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func (s *shimmedRedis) restart() error {
	s.crash()
	return s.launch()
}

func (s *shimmedRedis) stop() {
	s.crash()
	os.RemoveAll(s.dir)
}
