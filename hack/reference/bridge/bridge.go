// Package bridge serves a Gardener Go provider driver (machine-controller-manager
// v0.62.1's pkg/util/provider/driver.Driver) over mcm-rs's driver protocol,
// mcm.driver.v1 (proto/mcm/driver/v1/driver.proto; design:
// docs/design/driver.md, "The Go bridge").
//
// A provider author links their driver into a main that calls Serve (or
// cmd/driver-bridge does it for the drivers it knows). The bridge decodes the
// request's JSON objects into the reference's Go types, calls the driver, and
// answers its machinecodes status as a gRPC status: codes 0-16 unchanged, 17
// (Uninitialized) as Unknown, and every code in the metadata key
// mcm-machine-code, which is what mcm-rs's client reads. Secret data is passed
// to the driver and never logged.
package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	"github.com/mcm-rs/mcm-rs/hack/reference/driverpb"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
)

// ProtocolVersion is the mcm.driver version the bridge speaks.
const ProtocolVersion = "1.0"

// The metadata keys of the protocol (see the proto's header).
const (
	MachineCodeKey     = "mcm-machine-code"
	MachineIdentityKey = "mcm-machine-identity-bin"
)

// ListedVM is one VM of an IdentityLister's answer. It is a plain struct
// type (an alias of an unnamed struct), so a driver package can declare the
// same shape without importing this package.
type ListedVM = struct {
	ProviderID  string
	MachineName string
	// InstanceKey is the VM's canonical key; empty: the provider ID.
	InstanceKey string
	// Namespace and UID of the Machine the VM was created for (recorded on
	// the VM at creation); empty: unknown.
	Namespace string
	UID       string
}

// IdentityLister is an optional extension of driver.Driver: a driver that
// records the Machine's namespace and UID on the VM at creation can report
// them, so that mcm-rs's orphan collection can tell whose VM it is
// (docs/design/safety.md, "VM identity"). The reference's interface has no
// place for them; without this extension ListMachines' map is used.
type IdentityLister interface {
	ListMachineIdentities(context.Context, *driver.ListMachinesRequest) ([]ListedVM, error)
}

// Info is what the bridge answers to Info besides what it derives itself.
type Info struct {
	// Name and Version of the driver (for the controller's logs).
	Name    string
	Version string
	// Providers: the MachineClass provider values the driver serves.
	Providers []string
}

// Server is the mcm.driver.v1 service around one Go driver.
type Server struct {
	driverpb.UnimplementedDriverServer
	driver driver.Driver
	info   Info
	log    *slog.Logger
}

// New returns the service for d.
func New(d driver.Driver, info Info, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{driver: d, info: info, log: log}
}

// Register adds the service to a gRPC server, with an interceptor that turns
// a panic of the driver into an Internal answer instead of ending the process.
func (s *Server) Register(g *grpc.Server) {
	driverpb.RegisterDriverServer(g, s)
}

// ServerOptions are the grpc.Server options the bridge needs.
func (s *Server) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.UnaryInterceptor(s.recoverPanics)}
}

func (s *Server) recoverPanics(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("driver panicked", "op", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			resp, err = nil, s.fail(ctx, status.Error(codes.Internal, fmt.Sprintf("the driver panicked in %s: %v", info.FullMethod, p)), nil)
		}
	}()
	return h(ctx, req)
}

// Info answers who the driver is. The operations are those of the
// reference's interface beyond the five every driver has: InitializeMachine
// and GetVolumeIDs; UpdateMachine, InPlaceChanges and ProviderSpecWarnings
// are not in v0.62.1's interface and answer Unimplemented.
func (s *Server) Info(context.Context, *driverpb.InfoRequest) (*driverpb.InfoResponse, error) {
	return &driverpb.InfoResponse{
		Name:            s.info.Name,
		Version:         s.info.Version,
		Providers:       s.info.Providers,
		ProtocolVersion: ProtocolVersion,
		RateLimitScope:  &driverpb.RateLimitScope{},
		Operations:      []string{"InitializeMachine", "GetVolumeIDs"},
	}, nil
}

// decoded is a machine-scoped request in the reference's types.
type decoded struct {
	machine *v1alpha1.Machine
	class   *v1alpha1.MachineClass
	secret  *corev1.Secret
}

func decodeField(b []byte, field, kind string, out any) error {
	if err := json.Unmarshal(b, out); err != nil {
		// The JSON error only: never the content (it may be the Secret).
		return status.Error(codes.InvalidArgument, fmt.Sprintf("field %s is not valid JSON of a %s: %v", field, kind, jsonErrorKind(err)))
	}
	return nil
}

// jsonErrorKind is a JSON error without any of the input's bytes.
func jsonErrorKind(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Sprintf("syntax error at offset %d", e.Offset)
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("cannot decode a JSON %s into %s at %q", e.Value, e.Type, e.Field)
	default:
		return "not decodable"
	}
}

func decodeSecret(b []byte, field string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := decodeField(b, field, "Secret", s); err != nil {
		return nil, err
	}
	// The API server folds stringData into data; the Go drivers read data.
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
		s.StringData = nil
	}
	return s, nil
}

func decodeClass(b []byte, field string) (*v1alpha1.MachineClass, error) {
	c := &v1alpha1.MachineClass{}
	if err := decodeField(b, field, "MachineClass", c); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeMachineRequest(r *driverpb.MachineRequest) (*decoded, error) {
	if r == nil {
		return nil, status.Error(codes.InvalidArgument, "the request has no machine")
	}
	m := &v1alpha1.Machine{}
	if err := decodeField(r.MachineJson, "machine_json", "Machine", m); err != nil {
		return nil, err
	}
	c, err := decodeClass(r.MachineClassJson, "machine_class_json")
	if err != nil {
		return nil, err
	}
	sec, err := decodeSecret(r.SecretJson, "secret_json")
	if err != nil {
		return nil, err
	}
	return &decoded{machine: m, class: c, secret: sec}, nil
}

func addresses(a []corev1.NodeAddress) []*driverpb.NodeAddress {
	out := make([]*driverpb.NodeAddress, 0, len(a))
	for _, x := range a {
		out = append(out, &driverpb.NodeAddress{Type: string(x.Type), Address: x.Address})
	}
	return out
}

// identity is the VM's identity an error answer carries (the reference's
// drivers answer Uninitialized together with the response that names the VM).
type identity struct {
	ProviderID string               `json:"providerID"`
	NodeName   string               `json:"nodeName"`
	Addresses  []corev1.NodeAddress `json:"addresses"`
}

// fail answers a driver's error: its machine code as the gRPC code (0-16)
// or Unknown (17 and any other), the code in MachineCodeKey, the VM's
// identity when the driver named one, and the driver's message unchanged.
func (s *Server) fail(ctx context.Context, err error, id *identity) error {
	st, _ := status.FromError(err)
	code, message := st.Code(), st.Message()
	if code == codes.OK || code > codes.Uninitialized {
		// An error that says OK, or a code past the machine codes: not an
		// answer the controller could act on.
		message = fmt.Sprintf("the driver answered an error with the machine code %d: %s", code, message)
		code = codes.Unknown
	}
	md := metadata.Pairs(MachineCodeKey, strconv.Itoa(int(code)))
	if id != nil && id.ProviderID != "" {
		if b, jerr := json.Marshal(id); jerr == nil {
			md.Append(MachineIdentityKey, string(b))
		}
	}
	if serr := grpc.SetTrailer(ctx, md); serr != nil {
		s.log.Warn("cannot set the machine code trailer", "error", serr.Error())
	}
	g := grpccodes.Unknown
	if code <= 16 {
		g = grpccodes.Code(code)
	}
	return grpcstatus.Error(g, message)
}

func (s *Server) logResult(op string, m *v1alpha1.Machine, err error) {
	attrs := []any{"op", op}
	if m != nil {
		attrs = append(attrs, "machine", m.Name, "namespace", m.Namespace)
	}
	if err != nil {
		st, _ := status.FromError(err)
		s.log.Debug("driver call failed", append(attrs, "code", st.Code().String(), "error", st.Message())...)
		return
	}
	s.log.Debug("driver call served", attrs...)
}

// answer finishes a call whose response names a VM: a driver error goes
// back with the identity answered together with it (Uninitialized, in the
// reference's drivers), and neither a response nor an error is Internal.
// Without an error it returns the response's identity.
func (s *Server) answer(ctx context.Context, op string, m *v1alpha1.Machine, id *identity, err error) (*identity, error) {
	s.logResult(op, m, err)
	if err != nil {
		return nil, s.fail(ctx, err, id)
	}
	if id == nil {
		return nil, s.fail(ctx, status.Error(codes.Internal, "the driver's "+op+" answered neither a response nor an error"), nil)
	}
	return id, nil
}

// CreateMachine calls the driver's CreateMachine.
func (s *Server) CreateMachine(ctx context.Context, r *driverpb.MachineRequest) (*driverpb.CreateMachineResponse, error) {
	d, err := decodeMachineRequest(r)
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	resp, err := s.driver.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: d.machine, MachineClass: d.class, Secret: d.secret})
	var id *identity
	if resp != nil {
		id = &identity{ProviderID: resp.ProviderID, NodeName: resp.NodeName, Addresses: resp.Addresses}
	}
	if id, err = s.answer(ctx, "CreateMachine", d.machine, id, err); err != nil {
		return nil, err
	}
	return &driverpb.CreateMachineResponse{
		ProviderId: id.ProviderID, NodeName: id.NodeName,
		LastKnownState: resp.LastKnownState, Addresses: addresses(id.Addresses),
	}, nil
}

// InitializeMachine calls the driver's InitializeMachine.
func (s *Server) InitializeMachine(ctx context.Context, r *driverpb.MachineRequest) (*driverpb.InitializeMachineResponse, error) {
	d, err := decodeMachineRequest(r)
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	resp, err := s.driver.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: d.machine, MachineClass: d.class, Secret: d.secret})
	var id *identity
	if resp != nil {
		id = &identity{ProviderID: resp.ProviderID, NodeName: resp.NodeName, Addresses: resp.Addresses}
	}
	if id, err = s.answer(ctx, "InitializeMachine", d.machine, id, err); err != nil {
		return nil, err
	}
	return &driverpb.InitializeMachineResponse{ProviderId: id.ProviderID, NodeName: id.NodeName, Addresses: addresses(id.Addresses)}, nil
}

// DeleteMachine calls the driver's DeleteMachine.
func (s *Server) DeleteMachine(ctx context.Context, r *driverpb.MachineRequest) (*driverpb.DeleteMachineResponse, error) {
	d, err := decodeMachineRequest(r)
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	resp, err := s.driver.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: d.machine, MachineClass: d.class, Secret: d.secret})
	s.logResult("DeleteMachine", d.machine, err)
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	out := &driverpb.DeleteMachineResponse{}
	if resp != nil {
		out.LastKnownState = resp.LastKnownState
	}
	return out, nil
}

// GetMachineStatus calls the driver's GetMachineStatus; an error answered
// together with a response (Uninitialized, in the reference's drivers)
// carries the response's identity.
func (s *Server) GetMachineStatus(ctx context.Context, r *driverpb.MachineRequest) (*driverpb.GetMachineStatusResponse, error) {
	d, err := decodeMachineRequest(r)
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	resp, err := s.driver.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: d.machine, MachineClass: d.class, Secret: d.secret})
	var id *identity
	if resp != nil {
		id = &identity{ProviderID: resp.ProviderID, NodeName: resp.NodeName, Addresses: resp.Addresses}
	}
	if id, err = s.answer(ctx, "GetMachineStatus", d.machine, id, err); err != nil {
		return nil, err
	}
	return &driverpb.GetMachineStatusResponse{ProviderId: id.ProviderID, NodeName: id.NodeName, Addresses: addresses(id.Addresses)}, nil
}

// ListMachines calls the driver's ListMachines, or its IdentityLister
// extension when it has one.
func (s *Server) ListMachines(ctx context.Context, r *driverpb.ListMachinesRequest) (*driverpb.ListMachinesResponse, error) {
	c, err := decodeClass(r.MachineClassJson, "machine_class_json")
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	sec, err := decodeSecret(r.SecretJson, "secret_json")
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	req := &driver.ListMachinesRequest{MachineClass: c, Secret: sec}
	out := &driverpb.ListMachinesResponse{}
	if l, ok := s.driver.(IdentityLister); ok {
		vms, err := l.ListMachineIdentities(ctx, req)
		s.logResult("ListMachines", nil, err)
		if err != nil {
			return nil, s.fail(ctx, err, nil)
		}
		for _, vm := range vms {
			v := &driverpb.ListedVm{ProviderId: vm.ProviderID, MachineName: vm.MachineName, InstanceKey: vm.InstanceKey}
			if vm.UID != "" {
				v.Owner = &driverpb.MachineOwner{Namespace: vm.Namespace, Uid: vm.UID}
			}
			out.Machines = append(out.Machines, v)
		}
		return out, nil
	}
	resp, err := s.driver.ListMachines(ctx, req)
	s.logResult("ListMachines", nil, err)
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	if resp != nil {
		for id, name := range resp.MachineList {
			out.Machines = append(out.Machines, &driverpb.ListedVm{ProviderId: id, MachineName: name})
		}
	}
	return out, nil
}

// GetVolumeIDs calls the driver's GetVolumeIDs.
func (s *Server) GetVolumeIDs(ctx context.Context, r *driverpb.GetVolumeIDsRequest) (*driverpb.GetVolumeIDsResponse, error) {
	specs := make([]*corev1.PersistentVolumeSpec, 0, len(r.PvSpecJson))
	for _, b := range r.PvSpecJson {
		pv := &corev1.PersistentVolumeSpec{}
		if err := decodeField(b, "pv_spec_json", "PersistentVolumeSpec", pv); err != nil {
			return nil, s.fail(ctx, err, nil)
		}
		specs = append(specs, pv)
	}
	resp, err := s.driver.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
	s.logResult("GetVolumeIDs", nil, err)
	if err != nil {
		return nil, s.fail(ctx, err, nil)
	}
	out := &driverpb.GetVolumeIDsResponse{}
	if resp != nil {
		out.VolumeIds = resp.VolumeIDs
	}
	return out, nil
}

func (s *Server) unimplemented(ctx context.Context, op string) error {
	return s.fail(ctx, status.Error(codes.Unimplemented,
		op+" is not in the interface of machine-controller-manager v0.62.1's Go drivers"), nil)
}

// InPlaceChanges is not in the reference's interface.
func (s *Server) InPlaceChanges(ctx context.Context, _ *driverpb.InPlaceChangesRequest) (*driverpb.InPlaceChangesResponse, error) {
	return nil, s.unimplemented(ctx, "InPlaceChanges")
}

// UpdateMachine is not in the reference's interface.
func (s *Server) UpdateMachine(ctx context.Context, _ *driverpb.UpdateMachineRequest) (*driverpb.UpdateMachineResponse, error) {
	return nil, s.unimplemented(ctx, "UpdateMachine")
}

// ProviderSpecWarnings is not in the reference's interface.
func (s *Server) ProviderSpecWarnings(ctx context.Context, _ *driverpb.ProviderSpecWarningsRequest) (*driverpb.ProviderSpecWarningsResponse, error) {
	return nil, s.unimplemented(ctx, "ProviderSpecWarnings")
}
