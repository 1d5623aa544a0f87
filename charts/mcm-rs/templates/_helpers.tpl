{{- define "mcm-rs.namespace" -}}
{{- default .Release.Namespace .Values.controlNamespace -}}
{{- end -}}

{{- define "mcm-rs.labels" -}}
app.kubernetes.io/name: mcm-rs
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "mcm-rs.target" -}}
{{- if .Values.target.secretName -}}
/etc/mcm-rs/target/{{ .Values.target.secretKey }}
{{- else -}}
{{ .Values.target.kubeconfig }}
{{- end -}}
{{- end -}}

{{- define "mcm-rs.commonArgs" -}}
- --namespace={{ include "mcm-rs.namespace" . }}
- --target-kubeconfig={{ include "mcm-rs.target" . }}
- --kube-api-qps={{ .Values.common.kubeAPIQPS }}
- --kube-api-burst={{ .Values.common.kubeAPIBurst }}
- --leader-elect={{ .Values.common.leaderElect }}
- --v={{ .Values.common.verbosity }}
{{- range .Values.common.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "mcm-rs.managerArgs" -}}
- --safety-up={{ .Values.manager.safetyUp }}
- --safety-down={{ .Values.manager.safetyDown }}
- --machine-safety-overshooting-period={{ .Values.manager.machineSafetyOvershootingPeriod }}
{{- range .Values.manager.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "mcm-rs.controllerArgs" -}}
- --machine-creation-timeout={{ .Values.controller.machineCreationTimeout }}
- --machine-drain-timeout={{ .Values.controller.machineDrainTimeout }}
- --machine-health-timeout={{ .Values.controller.machineHealthTimeout }}
- --machine-safety-apiserver-statuscheck-timeout={{ .Values.controller.machineSafetyApiserverStatuscheckTimeout }}
- --machine-safety-apiserver-statuscheck-period={{ .Values.controller.machineSafetyApiserverStatuscheckPeriod }}
- --machine-safety-orphan-vms-period={{ .Values.controller.machineSafetyOrphanVMsPeriod }}
{{- range .Values.controller.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- include "mcm-rs.driverEndpointArgs" . }}
{{- end -}}

{{- /* The socket of a driver sidecar; the argument is (list $ $sidecar). */ -}}
{{- define "mcm-rs.driverSocket" -}}
{{- $root := index . 0 -}}{{- $d := index . 1 -}}
{{ trimSuffix "/" $root.Values.drivers.socketDir }}/{{ lower $d.provider }}.sock
{{- end -}}

{{- /* The machine controller's flags for the driver sidecars. */ -}}
{{- define "mcm-rs.driverEndpointArgs" -}}
{{- $root := . -}}
{{- range .Values.drivers.sidecars }}
- --driver-endpoint={{ lower .provider }}=unix://{{ include "mcm-rs.driverSocket" (list $root .) }}
{{- end }}
{{- if .Values.drivers.sidecars }}
- --driver-call-timeout={{ .Values.drivers.callTimeout }}
{{- end }}
{{- end -}}

{{- /* The machine controller's volume mounts (none: empty). */ -}}
{{- define "mcm-rs.controllerMounts" -}}
{{- if .Values.target.secretName }}
- name: target
  mountPath: /etc/mcm-rs/target
  readOnly: true
{{- end }}
{{- if .Values.drivers.sidecars }}
- name: driver-socket
  mountPath: {{ .Values.drivers.socketDir }}
{{- end }}
{{- end -}}

{{- /* One container per driver sidecar. */ -}}
{{- define "mcm-rs.driverContainers" -}}
{{- $root := . -}}
{{- range .Values.drivers.sidecars }}
{{- if not .provider }}{{ fail "every drivers.sidecars entry needs a provider" }}{{ end }}
- name: driver-{{ lower .provider }}
  image: {{ default (printf "%s:%s" $root.Values.image.repository $root.Values.image.tag) .image | quote }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    {{- if .args }}
    {{- range .args }}
    - {{ . | quote }}
    {{- end }}
    {{- else }}
    - driver
    - serve
    - --provider={{ lower .provider }}
    - --listen=unix://{{ include "mcm-rs.driverSocket" (list $root .) }}
    - --socket-mode=600
    {{- range .extraArgs }}
    - {{ . | quote }}
    {{- end }}
    {{- end }}
  {{- with .env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: driver-socket
      mountPath: {{ $root.Values.drivers.socketDir }}
  resources:
    {{- toYaml (default dict .resources) | nindent 4 }}
  {{- include "mcm-rs.securityContext" $root | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "mcm-rs.probe" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ . }}
  initialDelaySeconds: 30
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end -}}

{{- define "mcm-rs.securityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{- /* The ClusterRole (and kube-system Role) of one release: unique per release namespace and name. */ -}}
{{- define "mcm-rs.clusterRoleName" -}}
mcm-rs:{{ .Release.Namespace }}:{{ .Release.Name }}
{{- end -}}
