package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// MutualTLS loads the remote endpoint's TLS from PEM files and returns the
// two halves for Config.RemoteServerTLS and Config.RemoteClientTLS: the
// cluster's CA (caFile) checks the other side in both directions, and
// certFile with keyFile is this member's certificate, shown both as a
// server and as a client. The certificate must name the member's remote
// advertise address (an IP SAN for an IP), and allow server and client
// authentication.
//
//	cfg := cluster.LAN()
//	cfg.RemoteServerTLS, cfg.RemoteClientTLS, err = cluster.MutualTLS("ca.pem", "node.pem", "node-key.pem")
func MutualTLS(caFile, certFile, keyFile string) (server, client *tls.Config, err error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: read the CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("cluster: %s holds no PEM certificate", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: load the certificate: %w", err)
	}
	server = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	client = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
	}
	return server, client, nil
}
