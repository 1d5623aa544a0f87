// The reference's machine-controller (Gardener's provider library,
// pkg/util/provider/app) with a driver for mcm-rs's local cloud: the Go half
// that mcm-rs's machine-controller is compared with.
package main

import (
	"fmt"
	"os"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/app"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/app/options"
	"github.com/mcm-rs/mcm-rs/hack/reference/localdriver"
	"github.com/spf13/pflag"
	"k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
)

func main() {
	s := options.NewMCServer()
	s.AddFlags(pflag.CommandLine)
	url := pflag.CommandLine.String("local-cloud-url", os.Getenv("MCM_LOCAL_CLOUD_URL"),
		"base URL of the local cloud's HTTP API (env MCM_LOCAL_CLOUD_URL)")
	flag.InitFlags()
	logs.InitLogs()
	defer logs.FlushLogs()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "--local-cloud-url is required")
		os.Exit(2)
	}
	if err := app.Run(s, localdriver.New(*url)); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
}
