package bridge

import (
	"context"
	"fmt"
	"sync"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"
)

// FakeFleet serves the reference's own fake driver (driver.NewFakeDriver)
// for many machines: the reference's fake models ONE VM (one providerID, one
// VMExists flag, not safe for concurrent calls), so the fleet keeps one fake
// per Machine (by namespace and UID), made on the machine's first call, and
// passes every call to that machine's fake unchanged under a lock. What the
// fleet adds is only what a single fake cannot say: ListMachines over the
// fakes whose VM exists for the class, with the Machine's identity.
//
// Err, when set, is the error every fake is made with (the reference's
// fake then answers it from its calls, e.g. ResourceExhausted or
// Uninitialized), to show that a Go driver's code crosses unchanged.
type FakeFleet struct {
	Err   error
	mu    sync.Mutex
	fakes map[string]*fakeVM
}

type fakeVM struct {
	fake      *driver.FakeDriver
	class     string
	name      string
	namespace string
	uid       string
}

// NewFakeFleet returns an empty fleet whose fakes answer err (nil: succeed).
func NewFakeFleet(err error) *FakeFleet {
	return &FakeFleet{Err: err, fakes: map[string]*fakeVM{}}
}

func machineKey(m *v1alpha1.Machine) string {
	if m.UID != "" {
		return m.Namespace + "/" + string(m.UID)
	}
	return m.Namespace + "/name/" + m.Name
}

// fakeOf is the machine's fake; callers hold f.mu.
func (f *FakeFleet) fakeOf(m *v1alpha1.Machine, class *v1alpha1.MachineClass) (*driver.FakeDriver, error) {
	if m == nil || m.Name == "" {
		return nil, status.Error(codes.InvalidArgument, "machine: a name is required")
	}
	key := machineKey(m)
	if vm, ok := f.fakes[key]; ok {
		return vm.fake, nil
	}
	className := ""
	if class != nil {
		className = class.Name
	}
	providerID := fmt.Sprintf("fake:///%s/%s", m.Namespace, key[len(m.Namespace)+1:])
	addrs := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: m.Name}}
	d, ok := driver.NewFakeDriver(false, providerID, m.Name, "{}", addrs, f.Err, nil).(*driver.FakeDriver)
	if !ok {
		return nil, status.Error(codes.Internal, "driver.NewFakeDriver did not return a *FakeDriver")
	}
	f.fakes[key] = &fakeVM{fake: d, class: className, name: m.Name, namespace: m.Namespace, uid: string(m.UID)}
	return d, nil
}

// CreateMachine passes the call to the machine's fake.
func (f *FakeFleet) CreateMachine(ctx context.Context, r *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.fakeOf(r.Machine, r.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.CreateMachine(ctx, r)
}

// InitializeMachine passes the call to the machine's fake.
func (f *FakeFleet) InitializeMachine(ctx context.Context, r *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.fakeOf(r.Machine, r.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.InitializeMachine(ctx, r)
}

// DeleteMachine passes the call to the machine's fake.
func (f *FakeFleet) DeleteMachine(ctx context.Context, r *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.fakeOf(r.Machine, r.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.DeleteMachine(ctx, r)
}

// GetMachineStatus passes the call to the machine's fake.
func (f *FakeFleet) GetMachineStatus(ctx context.Context, r *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.fakeOf(r.Machine, r.MachineClass)
	if err != nil {
		return nil, err
	}
	return d.GetMachineStatus(ctx, r)
}

// ListMachines lists the fakes of the class whose VM exists.
func (f *FakeFleet) ListMachines(ctx context.Context, r *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	vms, err := f.ListMachineIdentities(ctx, r)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, vm := range vms {
		out[vm.ProviderID] = vm.MachineName
	}
	return &driver.ListMachinesResponse{MachineList: out}, nil
}

// ListMachineIdentities is ListMachines with each VM's Machine identity
// (the IdentityLister extension).
func (f *FakeFleet) ListMachineIdentities(ctx context.Context, r *driver.ListMachinesRequest) ([]ListedVM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Err != nil {
		return nil, f.Err
	}
	className := ""
	if r.MachineClass != nil {
		className = r.MachineClass.Name
	}
	var out []ListedVM
	for _, vm := range f.fakes {
		if vm.class != className || !vm.fake.VMExists {
			continue
		}
		out = append(out, ListedVM{ProviderID: vm.fake.ProviderID, MachineName: vm.fake.NodeName, Namespace: vm.namespace, UID: vm.uid})
	}
	return out, nil
}

// GetVolumeIDs is the reference fake's (no volumes).
func (f *FakeFleet) GetVolumeIDs(ctx context.Context, r *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	d := driver.NewFakeDriver(false, "", "", "", nil, f.Err, nil)
	return d.GetVolumeIDs(ctx, r)
}
