package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/worqr/worqr-go/gateway"
	gatewayv1 "github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1"
	"github.com/worqr/worqr-go/gateway/gen/worqr/gateway/v1/gatewayv1connect"
	"github.com/worqr/worqr-go/internal/redistest"
	"github.com/worqr/worqr-go/remote"
	"github.com/worqr/worqr-go/worqr"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "worqr-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestGRPCOverTLS serves the gateway with a certificate (as --tls-cert and
// --tls-key do) and calls it over gRPC on HTTP/2 with TLS.
func TestGRPCOverTLS(t *testing.T) {
	pool := srv.Pool()
	defer pool.Close()
	cfg := worqr.Config{Namespace: redistest.Namespace(), DisableEvents: true}
	rs, err := remote.NewServer(pool, &remote.Config{Config: cfg, AnyQueue: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = rs.Stop(ctx)
	}()
	client, _ := worqr.NewClient(pool, &cfg)
	insp, _ := worqr.NewInspector(pool, &cfg)
	hs, err := gateway.NewServer("127.0.0.1:0", gateway.Config{Remote: rs, Client: client, Inspector: insp})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, roots := selfSigned(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.ServeTLS(l, certFile, keyFile) }()
	defer hs.Close()

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	c := gatewayv1connect.NewGatewayServiceClient(&http.Client{Transport: tr}, "https://"+l.Addr().String(), connect.WithGRPC())
	res, err := c.Enqueue(context.Background(), connect.NewRequest(&gatewayv1.EnqueueRequest{Queue: "q", Payload: []byte("x")}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.Id == "" {
		t.Fatal("no id")
	}
}
