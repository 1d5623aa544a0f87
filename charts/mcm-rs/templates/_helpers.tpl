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
