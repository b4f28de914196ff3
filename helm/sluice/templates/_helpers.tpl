{{/* Names, labels and the pieces both Deployments share. */}}

{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "sluice.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "sluice.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels naming one component ("operator" or "autoscaler"), beside sluice.labels: (dict "ctx" $ "component" "operator") */}}
{{- define "sluice.componentLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" .ctx }}-{{ .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Selector of one component's pods (matchLabels, Service selectors): (dict "ctx" $ "component" "operator") */}}
{{- define "sluice.selectorLabels" -}}
{{ include "sluice.componentLabels" . }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end }}

{{- define "sluice.operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-operator" (include "sluice.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sluice.autoscaler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-autoscaler" (include "sluice.fullname" .)) .Values.autoscaler.serviceAccountName }}
{{- else }}
{{- required "autoscaler.serviceAccountName: name an existing ServiceAccount when serviceAccount.create is false" .Values.autoscaler.serviceAccountName }}
{{- end }}
{{- end }}

{{- define "sluice.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{- define "sluice.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The pod spec keys both Deployments share; per-component values win over the top-level defaults.
(dict "ctx" $ "component" .Values.operator)
*/}}
{{- define "sluice.podScheduling" -}}
{{- $c := .component }}
{{- $v := .ctx.Values }}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $v.priorityClassName $c.priorityClassName) }}
priorityClassName: {{ . }}
{{- end }}
{{- with (default $v.nodeSelector $c.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $v.tolerations $c.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (default $v.affinity $c.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
