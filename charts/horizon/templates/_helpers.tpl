{{/* The release's base name: <release>-<chart>, cut to 52 characters (suffixes follow). */}}
{{- define "horizon.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "horizon.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
horizon.dev/site: {{ .Values.site }}
{{- end -}}

{{- define "horizon.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "horizon.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret holding the site's certificate. */}}
{{- define "horizon.tlsSecret" -}}
{{- if .Values.tls.certManager.enabled -}}
{{ include "horizon.fullname" . }}-tls
{{- else -}}
{{ required "tls.existingSecret (or tls.certManager.enabled) is required" .Values.tls.existingSecret }}
{{- end -}}
{{- end -}}

{{/* tokens.existingSecret as files at /etc/horizon/keys (the agent: player-keys, admin-token). */}}
{{- define "horizon.keysVolume" -}}
- name: keys
  secret:
    secretName: {{ .Values.tokens.existingSecret }}
{{- end -}}

{{/* The core needs only the admin token (optional), never the player keys. */}}
{{- define "horizon.coreKeysVolume" -}}
- name: keys
  secret:
    secretName: {{ .Values.tokens.existingSecret }}
    optional: true
    items:
      - { key: admin-token, path: admin-token }
{{- end -}}

{{/* The core's own certificate (naming core.horizon). */}}
{{- define "horizon.coreTlsSecret" -}}
{{- if .Values.tls.certManager.enabled -}}
{{ include "horizon.fullname" . }}-core-tls
{{- else -}}
{{ required "core.tls.existingSecret (the core's own certificate, naming core.horizon; or tls.certManager.enabled) is required" .Values.core.tls.existingSecret }}
{{- end -}}
{{- end -}}

{{/* The core's certificate files mounted at /etc/horizon/certs. */}}
{{- define "horizon.coreTlsVolume" -}}
- name: certs
  secret:
    secretName: {{ include "horizon.coreTlsSecret" . }}
    items:
      - { key: ca.crt, path: ca.pem }
      - { key: tls.crt, path: core.pem }
      - { key: tls.key, path: core.key }
{{- end -}}

{{/* Site certificate files mounted at /etc/horizon/certs. */}}
{{- define "horizon.tlsVolume" -}}
- name: certs
  secret:
    secretName: {{ include "horizon.tlsSecret" . }}
    items:
      - { key: ca.crt, path: ca.pem }
      - { key: tls.crt, path: site.pem }
      - { key: tls.key, path: site.key }
{{- end -}}
