{{/* Names and labels shared by every object. */}}
{{- define "kubegpu.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubegpu.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{- define "kubegpu.labels" -}}
{{ include "kubegpu.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kubegpu.serviceAccountName" -}}
{{- default (include "kubegpu.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "kubegpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The agent talks to the API server (node labels or quarantine on). */}}
{{- define "kubegpu.usesApi" -}}
{{- if or .Values.node.labels .Values.quarantine.enabled .Values.migManager.enabled .Values.fractional.enabled }}true{{ end }}
{{- end }}

{{/* The Lease that counts quarantined nodes fleet-wide. */}}
{{- define "kubegpu.quarantineLease" -}}
{{- include "kubegpu.fullname" . }}-quarantine
{{- end }}

{{/* kubelet's PodResources socket is read (metrics' pod labels, the quarantine's and the MIG manager's pods). */}}
{{- define "kubegpu.podResources" -}}
{{- if or .Values.metrics.enabled .Values.quarantine.enabled .Values.migManager.enabled }}true{{ end }}
{{- end }}
