package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
)

// Listen opens the endpoint: unix:///path (the default transport: the
// socket's directory is created with mode 0700 when missing, a stale socket
// is replaced, a path that is not a socket is never removed, and the socket
// gets mode 0600 before the first connection is accepted) or tcp://host:port
// on a loopback address (the bridge has no TLS: across hosts, mcm-rs's own
// `mcm driver serve` with client certificates is the way).
func Listen(endpoint string) (net.Listener, error) {
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		path := strings.TrimPrefix(endpoint, "unix://")
		if !filepath.IsAbs(path) {
			return nil, fmt.Errorf("%s: the socket path must be absolute (unix:///path)", endpoint)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", endpoint, err)
		}
		if fi, err := os.Lstat(path); err == nil {
			if fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("cannot listen on %s: the path exists and is not a socket", endpoint)
			}
			if err := os.Remove(path); err != nil {
				return nil, fmt.Errorf("%s: removing the stale socket: %w", endpoint, err)
			}
		}
		// The socket is created with mode 0600 (umask 0177), not chmod-ed
		// after the fact, so no connection is ever accepted on a wider mode.
		old := umask(0o177)
		l, err := net.Listen("unix", path)
		umask(old)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", endpoint, err)
		}
		return l, nil
	case strings.HasPrefix(endpoint, "tcp://"):
		addr := strings.TrimPrefix(endpoint, "tcp://")
		if !loopback(addr) {
			return nil, fmt.Errorf("%s: plain TCP carries Secrets unprotected, so it is served on a loopback address only (127.0.0.0/8, ::1, localhost); use unix:///path", endpoint)
		}
		return net.Listen("tcp", addr)
	default:
		return nil, fmt.Errorf("%q: the endpoint must be unix:///path or tcp://host:port", endpoint)
	}
}

// loopback says whether host:port names a loopback address literally (names
// other than localhost are not resolved), as mcm-rs's own server requires.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves s on the endpoint until ctx ends (then stops gracefully and
// removes a Unix socket).
func Serve(ctx context.Context, s *Server, endpoint string, log *slog.Logger) error {
	l, err := Listen(endpoint)
	if err != nil {
		return err
	}
	g := grpc.NewServer(s.ServerOptions()...)
	s.Register(g)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			g.GracefulStop()
		case <-done:
		}
	}()
	log.Info("serving the Go driver over mcm.driver.v1", "endpoint", endpoint, "name", s.info.Name,
		"version", s.info.Version, "providers", s.info.Providers)
	err = g.Serve(l)
	close(done)
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}
