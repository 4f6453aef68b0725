// Package dial builds redigo connection pools from a Redis URL plus optional
// TLS files, for the binaries and the tests. Credentials never appear in the
// errors it returns: use Redact for anything else that prints a URL.
package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/worqr/worqr-go/internal/rdb"
)

// Options say how to reach Redis.
type Options struct {
	// URL is redis://[user:password@]host[:port][/db] or rediss:// for TLS.
	URL string
	// CAFile is a PEM file of CAs to verify the server with (rediss://);
	// empty means the system pool.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key, for
	// servers that require client authentication (tls-auth-clients yes).
	CertFile, KeyFile string
	// ServerName overrides the name the server certificate is checked
	// against (default: the URL's host).
	ServerName string
	// MaxIdle is the pool's idle connection count (default 16).
	MaxIdle int
	// MaxActive caps the pool's open connections (default 0: no cap).
	MaxActive int
	// ConnectTimeout bounds a dial (default 5s).
	ConnectTimeout time.Duration
	// ReadTimeout and WriteTimeout bound each reply and request on a
	// connection that has no context deadline (default 0: none; worqr's own
	// calls carry deadlines).
	ReadTimeout, WriteTimeout time.Duration
}

// Redact returns rawURL with its password replaced by "xxxxx", for logs and
// error messages. A URL that does not parse is replaced entirely.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparsable Redis URL>"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// scrub removes the URL's password from an error message.
func scrub(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	u, perr := url.Parse(rawURL)
	if perr != nil {
		return errors.New(strings.ReplaceAll(err.Error(), rawURL, "<Redis URL>"))
	}
	pw, has := u.User.Password()
	if !has || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

// Check validates the options without dialing.
func (o Options) Check() error {
	if o.URL == "" {
		return errors.New("is empty: want redis://host:port/db or rediss://... (WORQR_REDIS_URL unset?)")
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return fmt.Errorf("%q does not parse", Redact(o.URL))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("%q: scheme must be redis or rediss", Redact(o.URL))
	}
	if (o.CAFile != "" || o.CertFile != "" || o.KeyFile != "") && u.Scheme != "rediss" {
		return fmt.Errorf("%q is not rediss:// but TLS files are set", Redact(o.URL))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return errors.New("a TLS client certificate needs both a cert file and a key file")
	}
	_, err = o.tlsConfig(u)
	return err
}

func (o Options) tlsConfig(u *url.URL) (*tls.Config, error) {
	if u.Scheme != "rediss" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s holds no PEM certificate", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Pool returns a pool dialing o.URL (with TLS when rediss://). Its dial
// errors never contain the password.
func Pool(o Options) (*redis.Pool, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(o.URL)
	tc, err := o.tlsConfig(u)
	if err != nil {
		return nil, err
	}
	connect := o.ConnectTimeout
	if connect == 0 {
		connect = 5 * time.Second
	}
	opts := []redis.DialOption{redis.DialConnectTimeout(connect),
		redis.DialReadTimeout(o.ReadTimeout), redis.DialWriteTimeout(o.WriteTimeout)}
	if tc != nil {
		opts = append(opts, redis.DialTLSConfig(tc))
	}
	maxIdle := o.MaxIdle
	if maxIdle == 0 {
		maxIdle = 16
	}
	raw := o.URL
	return &redis.Pool{
		MaxIdle:     maxIdle,
		MaxActive:   o.MaxActive,
		IdleTimeout: 5 * time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			// DialURLContext appends to the options it is given: a slice
			// with no spare capacity keeps concurrent dials from writing
			// into one backing array (a data race).
			c, err := redis.DialURLContext(ctx, raw, opts[:len(opts):len(opts)]...)
			return c, scrub(err, raw)
		},
		TestOnBorrowContext: rdb.TestOnBorrow,
	}, nil
}
