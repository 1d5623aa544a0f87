// Command driver-bridge serves a Gardener Go provider driver
// (machine-controller-manager v0.62.1's driver.Driver) over mcm.driver.v1,
// so that mcm-rs's machine controller can use it through
// `--driver-endpoint <provider>=unix:///…` (docs/design/driver.md, "The Go
// bridge"). It links two drivers:
//
//	--driver local   hack/reference/localdriver, for mcm-rs's local cloud
//	--driver fake    the reference's driver.NewFakeDriver, one per Machine
//
// A provider author copies this main and links their own driver instead.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	"github.com/mcm-rs/mcm-rs/hack/reference/bridge"
	"github.com/mcm-rs/mcm-rs/hack/reference/localdriver"
	"github.com/spf13/pflag"
)

// version is set with -ldflags "-X main.version=…" by hack/build-reference.sh.
var version = "dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "driver-bridge:", err)
		os.Exit(2)
	}
}

func run() error {
	fs := pflag.NewFlagSet("driver-bridge", pflag.ContinueOnError)
	which := fs.String("driver", "", "the Go driver to serve: local or fake")
	listen := fs.String("listen", "", "where to serve: unix:///path (socket mode 0600) or tcp://host:port")
	providers := fs.StringSlice("provider", nil, "the MachineClass provider values served (default: the driver's name)")
	url := fs.String("local-cloud-url", os.Getenv("MCM_LOCAL_CLOUD_URL"),
		"--driver local: base URL of the local cloud's HTTP API (env MCM_LOCAL_CLOUD_URL)")
	fakeCode := fs.String("fake-error-code", "", "--driver fake: a machine code (name or number, e.g. ResourceExhausted or 17) every fake call answers")
	fakeMessage := fs.String("fake-error-message", "injected by driver-bridge", "--driver fake: the message of --fake-error-code")
	verbose := fs.BoolP("verbose", "v", false, "log every call (machine and namespace, never the Secret)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if *listen == "" {
		return fmt.Errorf("--listen is required")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var d driver.Driver
	var name string
	switch *which {
	case "local":
		if *url == "" {
			return fmt.Errorf("--driver local needs --local-cloud-url")
		}
		d, name = localdriver.New(*url), "local"
	case "fake":
		var ferr error
		if *fakeCode != "" {
			c, err := parseCode(*fakeCode)
			if err != nil {
				return err
			}
			ferr = status.Error(c, *fakeMessage)
		}
		d, name = bridge.NewFakeFleet(ferr), "fake"
	default:
		return fmt.Errorf("--driver must be local or fake, not %q", *which)
	}
	served := *providers
	if len(served) == 0 {
		served = []string{name}
	}
	for i := range served {
		served[i] = strings.ToLower(served[i])
	}
	s := bridge.New(d, bridge.Info{Name: "driver-bridge/" + name, Version: version, Providers: served}, log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return bridge.Serve(ctx, s, *listen, log)
}

func parseCode(text string) (codes.Code, error) {
	var n int
	if _, err := fmt.Sscanf(text, "%d", &n); err == nil && fmt.Sprint(n) == text {
		if n < 0 || n > int(codes.Uninitialized) {
			return 0, fmt.Errorf("--fake-error-code %d: machine codes are 0 to %d", n, codes.Uninitialized)
		}
		return codes.Code(n), nil
	}
	c := codes.StringToCode(text)
	if c.String() != text {
		return 0, fmt.Errorf("--fake-error-code %q: not a machine code name", text)
	}
	return c, nil
}
