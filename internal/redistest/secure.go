package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files of a TLS test server: the CA that signed both
// certificates, and a client certificate the server accepts.
type TLSFiles struct {
	CA, ClientCert, ClientKey string
}

// StartSecure starts a private redis-server that accepts only the ACL user
// user/password (the default user is off) and, when tls is true, only TLS
// connections that present a client certificate signed by the test CA. The
// server's URL carries the credentials (rediss:// with TLS).
func StartSecure(user, password string, tls bool) (*Server, *TLSFiles, error) {
	dir, err := os.MkdirTemp("", "worqr-redis-tls-")
	if err != nil {
		return nil, nil, err
	}
	aclFile := filepath.Join(dir, "users.acl")
	rules := "user default off\nuser " + user + " on >" + password + " ~* &* +@all\n"
	if err := os.WriteFile(aclFile, []byte(rules), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	acl := []string{"--aclfile", aclFile}
	if !tls {
		s, err := start(dir, acl, false)
		if err != nil {
			return nil, nil, err
		}
		s.URL = withUser(s.URL, user, password)
		return s, nil, nil
	}
	files, err := writeCerts(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	args := append(acl,
		"--tls-cert-file", filepath.Join(dir, "server.crt"),
		"--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", files.CA,
		"--tls-auth-clients", "yes")
	s, err := start(dir, args, true)
	if err != nil {
		return nil, nil, err
	}
	s.URL = withUser(s.URL, user, password)
	return s, files, nil
}

func withUser(raw, user, password string) string {
	u, _ := url.Parse(raw)
	u.User = url.UserPassword(user, password)
	return u.String()
}

func writeCerts(dir string) (*TLSFiles, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "worqr test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		return der, key, err
	}
	write := func(name, kind string, der []byte) error {
		return os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) error {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return err
		}
		return write(name, "EC PRIVATE KEY", der)
	}
	if err := write("ca.crt", "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name  string
		usage x509.ExtKeyUsage
		n     int64
	}{{"server", x509.ExtKeyUsageServerAuth, 2}, {"client", x509.ExtKeyUsageClientAuth, 3}} {
		der, key, err := leaf(c.n, "worqr test "+c.name, c.usage)
		if err != nil {
			return nil, err
		}
		if err := write(c.name+".crt", "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if err := writeKey(c.name+".key", key); err != nil {
			return nil, err
		}
	}
	return &TLSFiles{
		CA:         filepath.Join(dir, "ca.crt"),
		ClientCert: filepath.Join(dir, "client.crt"),
		ClientKey:  filepath.Join(dir, "client.key"),
	}, nil
}
