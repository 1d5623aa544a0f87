//go:build tools

// Pins the reference's manager half into this module's dependency graph, so
// that `go build github.com/gardener/machine-controller-manager/cmd/machine-controller-manager`
// builds it with the versions of this go.sum.
package tools

import (
	_ "github.com/gardener/machine-controller-manager/cmd/machine-controller-manager/app"
	_ "github.com/gardener/machine-controller-manager/pkg/util/client/metrics/prometheus"
	_ "github.com/gardener/machine-controller-manager/pkg/util/reflector/prometheus"
	_ "github.com/gardener/machine-controller-manager/pkg/util/workqueue/prometheus"
)
