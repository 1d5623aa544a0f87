// Package localdriver is a driver.Driver of Gardener's provider library for
// mcm-rs's local cloud (its HTTP API: crates/provider-local/src/wire.rs). It
// exists so that the reference's machine-controller can run against the same
// simulated cloud as mcm-rs's, and so that VMs created by either half carry
// what the other half looks for: the Machine's UID as idempotency token and
// the namespace/UID identity tags (docs/design/reference-halves.md).
package localdriver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"
)

const (
	providerName     = "local"
	providerIDScheme = "local:///"
	clusterTagPrefix = "kubernetes.io/cluster/"
	csiDriver        = "local.csi.mcm.invalid"
	namespaceTag     = "machine.sapcloud.io/namespace"
	uidTag           = "machine.sapcloud.io/uid"
)

// Driver talks to the local cloud at a base URL.
type Driver struct {
	base string
	http *http.Client
}

// New returns a driver for the local cloud at base (e.g. http://127.0.0.1:8080).
func New(base string) *Driver {
	return &Driver{base: strings.TrimRight(base, "/"), http: &http.Client{Timeout: 30 * time.Second}}
}

type instance struct {
	ID            string            `json:"id"`
	MachineName   string            `json:"machineName"`
	NodeName      string            `json:"nodeName"`
	ProviderID    string            `json:"providerId"`
	PrivateIP     string            `json:"privateIp"`
	Tags          map[string]string `json:"tags"`
	SrcDstCheck   bool              `json:"srcDstCheck"`
	IPv6Addresses []string          `json:"ipv6Addresses"`
	IPv6Prefixes  []string          `json:"ipv6Prefixes"`
}

type instanceList struct {
	Instances []instance `json:"instances"`
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type spec struct {
	Tags                   map[string]string `json:"tags"`
	SrcAndDstChecksEnabled *bool             `json:"srcAndDstChecksEnabled"`
	IPv6AddressCount       int               `json:"ipv6AddressCount"`
	IPv6PrefixCount        int               `json:"ipv6PrefixCount"`
}

func classSpec(class *v1alpha1.MachineClass) (*spec, error) {
	if class == nil {
		return nil, status.Error(codes.InvalidArgument, "machineClass: required")
	}
	if class.Provider != "" && !strings.EqualFold(class.Provider, providerName) {
		return nil, status.Error(codes.InvalidArgument,
			fmt.Sprintf("machineClass.provider: %q is not supported by the local driver", class.Provider))
	}
	s := &spec{}
	if err := json.Unmarshal(class.ProviderSpec.Raw, s); err != nil {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("providerSpec: %v", err))
	}
	return s, nil
}

func (s *spec) clusterTag() string {
	for k := range s.Tags {
		if strings.HasPrefix(k, clusterTagPrefix) {
			return k
		}
	}
	return ""
}

func (s *spec) srcDstCheck() bool {
	return s.SrcAndDstChecksEnabled == nil || *s.SrcAndDstChecksEnabled
}

func (s *spec) initialized(i *instance) bool {
	return i.SrcDstCheck == s.srcDstCheck() &&
		len(i.IPv6Addresses) == s.IPv6AddressCount &&
		len(i.IPv6Prefixes) == s.IPv6PrefixCount
}

func instanceID(providerID string) string {
	rest, ok := strings.CutPrefix(providerID, providerIDScheme)
	if !ok {
		return ""
	}
	i := strings.LastIndex(rest, "/")
	if i < 0 || !strings.HasPrefix(rest[i+1:], "i-") {
		return ""
	}
	return rest[i+1:]
}

func addresses(i *instance) []corev1.NodeAddress {
	a := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: i.PrivateIP}}
	for _, ip := range i.IPv6Addresses {
		a = append(a, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return append(a, corev1.NodeAddress{Type: corev1.NodeHostName, Address: i.NodeName})
}

// call sends one request and decodes the answer into out; an error answer
// becomes a status error with the cloud's code.
func (d *Driver) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, rd)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		return status.Error(codes.Unavailable, fmt.Sprintf("local cloud: %v", err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return status.Error(codes.Unavailable, fmt.Sprintf("local cloud: %v", err))
	}
	if resp.StatusCode >= 300 {
		var e errorBody
		if json.Unmarshal(b, &e) == nil && e.Code != "" {
			return status.Error(codes.StringToCode(e.Code), e.Message)
		}
		return status.Error(codes.Unavailable, fmt.Sprintf("local cloud: HTTP %d", resp.StatusCode))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return status.Error(codes.Internal, fmt.Sprintf("local cloud: undecodable answer: %v", err))
		}
	}
	return nil
}

// find returns the instances backing a machine: by providerID, UID token or
// name within the class's cluster tag; one carrying another Machine's
// identity is never this machine's.
func (d *Driver) find(ctx context.Context, m *v1alpha1.Machine, s *spec) ([]instance, error) {
	q := map[string]string{"machineName": m.Name, "clusterTag": s.clusterTag()}
	if id := instanceID(m.Spec.ProviderID); id != "" {
		q["instanceId"] = id
	}
	if m.UID != "" {
		q["clientToken"] = string(m.UID)
	}
	var l instanceList
	if err := d.call(ctx, http.MethodPost, "/v1/instances/find", q, &l); err != nil {
		return nil, err
	}
	var mine []instance
	for _, i := range l.Instances {
		ns, uid := i.Tags[namespaceTag], i.Tags[uidTag]
		if uid != "" && m.UID != "" && (uid != string(m.UID) || ns != m.Namespace) {
			continue
		}
		mine = append(mine, i)
	}
	return mine, nil
}

func (d *Driver) theInstance(ctx context.Context, m *v1alpha1.Machine, s *spec) (*instance, error) {
	found, err := d.find(ctx, m, s)
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, status.Error(codes.NotFound, fmt.Sprintf("no local instance backs machine %s", m.Name))
	case 1:
		return &found[0], nil
	default:
		return nil, status.Error(codes.OutOfRange, fmt.Sprintf("several local instances back machine %s", m.Name))
	}
}

// CreateMachine launches the machine's instance (idempotent by the Machine's UID).
func (d *Driver) CreateMachine(ctx context.Context, r *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if _, err := classSpec(r.MachineClass); err != nil {
		return nil, err
	}
	body := map[string]any{
		"clientToken":  string(r.Machine.UID),
		"machineName":  r.Machine.Name,
		"providerSpec": json.RawMessage(r.MachineClass.ProviderSpec.Raw),
		"tags":         map[string]string{namespaceTag: r.Machine.Namespace, uidTag: string(r.Machine.UID)},
	}
	var i instance
	if err := d.call(ctx, http.MethodPost, "/v1/instances", body, &i); err != nil {
		return nil, err
	}
	return &driver.CreateMachineResponse{
		ProviderID:     i.ProviderID,
		NodeName:       i.NodeName,
		LastKnownState: fmt.Sprintf(`{"instanceId":%q}`, i.ID),
		Addresses:      addresses(&i),
	}, nil
}

// InitializeMachine establishes the spec's network settings on the instance.
func (d *Driver) InitializeMachine(ctx context.Context, r *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	s, err := classSpec(r.MachineClass)
	if err != nil {
		return nil, err
	}
	id := instanceID(r.Machine.Spec.ProviderID)
	if id == "" {
		i, err := d.theInstance(ctx, r.Machine, s)
		if err != nil {
			return nil, err
		}
		id = i.ID
	}
	var i instance
	body := map[string]any{"providerSpec": json.RawMessage(r.MachineClass.ProviderSpec.Raw)}
	if err := d.call(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(id)+"/initialize", body, &i); err != nil {
		return nil, status.Error(codes.Uninitialized, err.Error())
	}
	return &driver.InitializeMachineResponse{ProviderID: i.ProviderID, NodeName: i.NodeName, Addresses: addresses(&i)}, nil
}

// DeleteMachine deletes the machine's instance; an absent one is success.
func (d *Driver) DeleteMachine(ctx context.Context, r *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	s, err := classSpec(r.MachineClass)
	if err != nil {
		return nil, err
	}
	var ids []string
	if id := instanceID(r.Machine.Spec.ProviderID); id != "" {
		ids = []string{id}
	} else {
		found, err := d.find(ctx, r.Machine, s)
		if err != nil {
			return nil, err
		}
		for _, i := range found {
			ids = append(ids, i.ID)
		}
	}
	for _, id := range ids {
		if err := d.call(ctx, http.MethodDelete, "/v1/instances/"+url.PathEscape(id), nil, nil); err != nil {
			return nil, err
		}
	}
	b, _ := json.Marshal(map[string][]string{"deleted": ids})
	return &driver.DeleteMachineResponse{LastKnownState: string(b)}, nil
}

// GetMachineStatus answers the machine's instance; one whose network settings
// differ from the spec is Uninitialized, with its identity in the response.
func (d *Driver) GetMachineStatus(ctx context.Context, r *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	s, err := classSpec(r.MachineClass)
	if err != nil {
		return nil, err
	}
	i, err := d.theInstance(ctx, r.Machine, s)
	if err != nil {
		return nil, err
	}
	resp := &driver.GetMachineStatusResponse{ProviderID: i.ProviderID, NodeName: i.NodeName, Addresses: addresses(i)}
	if !s.initialized(i) {
		return resp, status.Error(codes.Uninitialized, fmt.Sprintf("instance %s is not initialized", i.ID))
	}
	return resp, nil
}

// ListMachines lists the instances carrying the class's cluster tag.
func (d *Driver) ListMachines(ctx context.Context, r *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	s, err := classSpec(r.MachineClass)
	if err != nil {
		return nil, err
	}
	var l instanceList
	if err := d.call(ctx, http.MethodGet, "/v1/instances?clusterTag="+url.QueryEscape(s.clusterTag()), nil, &l); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, i := range l.Instances {
		out[i.ProviderID] = i.MachineName
	}
	return &driver.ListMachinesResponse{MachineList: out}, nil
}

// GetVolumeIDs returns the handles of the local CSI driver's volumes.
func (d *Driver) GetVolumeIDs(_ context.Context, r *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	var ids []string
	for _, pv := range r.PVSpecs {
		if pv != nil && pv.CSI != nil && pv.CSI.Driver == csiDriver && pv.CSI.VolumeHandle != "" {
			ids = append(ids, pv.CSI.VolumeHandle)
		}
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: ids}, nil
}

// ListedVM is one instance with the identity CreateMachine tagged it with.
// (The same shape as the bridge's; declared here so that this package does
// not depend on the bridge.)
type ListedVM = struct {
	ProviderID  string
	MachineName string
	InstanceKey string
	Namespace   string
	UID         string
}

// ListMachineIdentities is ListMachines with each instance's ID as its key
// and the Machine namespace and UID tagged on it at creation: the bridge's
// optional IdentityLister extension (docs/design/driver.md, "The Go bridge").
func (d *Driver) ListMachineIdentities(ctx context.Context, r *driver.ListMachinesRequest) ([]ListedVM, error) {
	s, err := classSpec(r.MachineClass)
	if err != nil {
		return nil, err
	}
	var l instanceList
	if err := d.call(ctx, http.MethodGet, "/v1/instances?clusterTag="+url.QueryEscape(s.clusterTag()), nil, &l); err != nil {
		return nil, err
	}
	out := make([]ListedVM, 0, len(l.Instances))
	for _, i := range l.Instances {
		out = append(out, ListedVM{ProviderID: i.ProviderID, MachineName: i.MachineName, InstanceKey: i.ID,
			Namespace: i.Tags[namespaceTag], UID: i.Tags[uidTag]})
	}
	return out, nil
}
