package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// selfSigned writes a certificate for 127.0.0.1 and its key to dir, and
// returns their files and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "hybridlimitd test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile, pool
}

// TestTLS: given a certificate, the HTTP endpoints and the gRPC service
// answer over TLS to a client that trusts it, and refuse plaintext.
func TestTLS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	o := &options{config: "../../docs/examples/rules.yaml", envoy: []string{"../../docs/examples/envoy/mongo_cps.yaml"},
		httpAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", grace: time.Second, tlsCert: certFile, tlsKey: keyFile}
	s, err := start(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.shutdown()) })

	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := trusting.Get("https://" + s.httpAddr.String() + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "HTTPS")
	resp, err = http.Get("http://" + s.httpAddr.String() + "/readyz")
	if err == nil {
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to a TLS port") // net/http's answer to a plaintext request
	}
	_, err = http.Get("https://" + s.httpAddr.String() + "/readyz")
	assert.ErrorContains(t, err, "certificate", "a client that does not trust the certificate")

	req := &rlspb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*commonpb.RateLimitDescriptor{desc("database=users")}}
	call := func(creds grpc.DialOption) (*rlspb.RateLimitResponse, error) {
		conn, err := grpc.NewClient(s.grpcAddr.String(), creds)
		require.NoError(t, err)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	}
	got, err := call(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	require.NoError(t, err, "gRPC over TLS")
	assert.Equal(t, rlspb.RateLimitResponse_OK, got.OverallCode)
	_, err = call(grpc.WithTransportCredentials(insecure.NewCredentials()))
	assert.Error(t, err, "plaintext gRPC to a TLS port")
}
