package main

import (
	"context"
	"net"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// The database scenarios put the database server, MinIO and both
// contenders on the same CPUs. Through a port Docker maps, every byte also
// passes through docker-proxy, Docker's userland TCP forwarder, one more
// process copying it on those CPUs (0.9-1.5 CPU-s of a 5-second run,
// bench/reports/2026-11-27-cluster-direct.md); a deployment has no such
// process between a client and its database or store. So the postgres,
// pgcluster and mysqlcluster scenarios connect to the containers' own
// addresses when the host can reach them (Linux's bridge network), both
// contenders alike, and their reports say which way they went.

// directAddr is where the host reaches port (e.g. "5432/tcp") of c without
// docker-proxy: the container's IP and the port itself. ok is false when
// the host cannot reach it (Docker Desktop, a remote engine).
func directAddr(ctx context.Context, c testcontainers.Container, port string) (host, p string, ok bool) {
	ip, err := c.ContainerIP(ctx)
	if err != nil || ip == "" {
		return "", "", false
	}
	p, _, _ = strings.Cut(port, "/")
	addr := net.JoinHostPort(ip, p)
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", "", false
	}
	conn.Close()
	return ip, p, true
}

// connectionNote says how a scenario's report names its connections.
func connectionNote(direct bool) string {
	if direct {
		return "Both contenders connect to the containers' own addresses, not through the ports Docker maps (docker-proxy would copy every byte once more on the same CPUs)."
	}
	return "Both contenders connect through the ports Docker maps (docker-proxy copies every byte once more on the same CPUs): the host cannot reach the containers' own addresses."
}
