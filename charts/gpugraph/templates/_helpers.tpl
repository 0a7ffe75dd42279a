{{/* Chart name, truncated to a DNS label. */}}
{{- define "gpugraph.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release-chart unless the release already carries the chart name. */}}
{{- define "gpugraph.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpugraph.agentName" -}}
{{- printf "%s-agent" (include "gpugraph.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpugraph.serverName" -}}
{{- printf "%s-server" (include "gpugraph.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpugraph.tokenSecretName" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else }}
{{- printf "%s-agent-token" (include "gpugraph.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "gpugraph.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "gpugraph.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gpugraph.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of the agent pods; the server discovers agents by exactly these. */}}
{{- define "gpugraph.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpugraph.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/* The agent selector labels as a label-selector string for --agent-selector. */}}
{{- define "gpugraph.agentSelector" -}}
{{- printf "app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s,app.kubernetes.io/component=agent" (include "gpugraph.name" .) .Release.Name }}
{{- end }}

{{- define "gpugraph.serverSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gpugraph.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end }}

{{/* Where the token Secret is mounted in both roles. */}}
{{- define "gpugraph.tokenDir" -}}
/var/run/secrets/gpugraph
{{- end }}

{{/* HOST:PORT for --listen from (list HOST PORT), an IPv6 host in brackets. */}}
{{- define "gpugraph.joinHostPort" -}}
{{- $host := index . 0 }}
{{- $port := index . 1 }}
{{- if contains ":" $host }}
{{- printf "[%s]:%d" $host $port }}
{{- else }}
{{- printf "%s:%d" $host $port }}
{{- end }}
{{- end }}

{{/* "true" where the ServiceMonitor and PrometheusRule can be rendered: the Prometheus Operator's API is served. */}}
{{- define "gpugraph.monitoringApi" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/* The Service's in-cluster address, the one target Prometheus scrapes for every replica. */}}
{{- define "gpugraph.serviceAddress" -}}
{{- printf "%s.%s.svc:%d" (include "gpugraph.fullname" .) .Release.Namespace (.Values.server.service.port | int64) }}
{{- end }}

{{- define "gpugraph.metricsReaderName" -}}
{{- printf "%s-metrics-reader" (include "gpugraph.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "true" where the chart makes Prometheus's identity: a ServiceMonitor under --auth kubernetes without a token Secret of one's own. */}}
{{- define "gpugraph.metricsReader" -}}
{{- $sm := .Values.metrics.serviceMonitor }}
{{- if and $sm.enabled (include "gpugraph.monitoringApi" .) (eq .Values.server.auth.mode "kubernetes") (not $sm.tokenSecret.name) }}true{{ end }}
{{- end }}

{{/* The Secret holding the token Prometheus sends to each agent's /metrics (metrics.agents). */}}
{{- define "gpugraph.agentMetricsTokenSecretName" -}}
{{- if .Values.metrics.agents.tokenSecret.name }}
{{- .Values.metrics.agents.tokenSecret.name }}
{{- else }}
{{- printf "%s-agent-metrics-token" (include "gpugraph.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Where that Secret is mounted in the agent. */}}
{{- define "gpugraph.agentMetricsTokenDir" -}}
/var/run/secrets/gpugraph-metrics
{{- end }}
