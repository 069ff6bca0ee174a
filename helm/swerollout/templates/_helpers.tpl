{{- define "swerollout.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "swerollout.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "swerollout.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A label value: at most 63 characters, no "+" (SemVer build metadata is allowed in chart versions). */}}
{{- define "swerollout.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | trimSuffix "_" | trimSuffix "." -}}
{{- end -}}

{{- define "swerollout.labels" -}}
app.kubernetes.io/name: {{ include "swerollout.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "swerollout.chart" . }}
{{- end -}}

{{- define "swerollout.selectorLabels" -}}
app.kubernetes.io/name: {{ include "swerollout.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "swerollout.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "swerollout.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "swerollout.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "swerollout.tokenKeySecret" -}}
{{- default (printf "%s-token-key" (include "swerollout.fullname" .)) .Values.operator.tokenKeySecret -}}
{{- end -}}

{{- define "swerollout.watchNamespaces" -}}
{{- $ns := list .Release.Namespace -}}
{{- range .Values.rbac.watchNamespaces -}}{{- if ne . $.Release.Namespace -}}{{- $ns = append $ns . -}}{{- end -}}{{- end -}}
{{- join "," $ns -}}
{{- end -}}

{{/* The operator's permissions: exactly what it uses, nothing more. */}}
{{- define "swerollout.rules" -}}
- apiGroups: ["swerollout.io"]
  resources: ["swerollouts"]
  # patch: finalizers and kopf's handler-progress annotations.
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["swerollout.io"]
  resources: ["swerollouts/status"]
  verbs: ["get", "patch"]
- apiGroups: ["swerollout.io"]
  resources: ["swerolloutbatches"]
  # Read only: a batch's spec is its users' (abort/resume); the operator never writes it.
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  # No list/watch: the operator reads only the Secrets it names.
  verbs: ["get", "create", "delete"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}
