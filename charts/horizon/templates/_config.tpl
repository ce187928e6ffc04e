{{/* The daemons' configuration files, rendered from the values. */}}
{{- define "horizon.coreToml" -}}
tick_s = {{ .Values.core.tickSeconds }}

[sites]
core = {{ .Values.site | quote }}
list = [{{ range $i, $s := .Values.core.sites }}{{ if $i }}, {{ end }}{{ $s | quote }}{{ end }}]

[sites.backbone_rtt_ms]
{{- range $pair, $ms := .Values.core.backboneRttMs }}
{{ $pair }} = {{ $ms }}
{{- end }}

[listen]
control = "0.0.0.0:{{ .Values.core.controlPort }}"
admin = "0.0.0.0:{{ .Values.core.adminPort }}"

[tls]
ca = "/etc/horizon/certs/ca.pem"
cert = "/etc/horizon/certs/site.pem"
key = "/etc/horizon/certs/site.key"

[store]
path = "/var/lib/horizon/store"
{{- end -}}

{{- define "horizon.agentToml" -}}
site = {{ .Values.site | quote }}
core = {{ required "agent.coreAddress (host:port of the core) is required" .Values.agent.coreAddress | quote }}
core_site = {{ .Values.agent.coreSite | quote }}

[listen]
servers = "127.0.0.1:{{ .Values.agent.ports.servers }}"
players = "0.0.0.0:{{ .Values.agent.ports.players }}"
transfer = "0.0.0.0:{{ .Values.agent.ports.transfer }}"
advertise_transfer = {{ required "agent.advertiseTransfer (how other sites reach this agent) is required" .Values.agent.advertiseTransfer | quote }}
admin = "0.0.0.0:{{ .Values.agent.ports.admin }}"

[tls]
ca = "/etc/horizon/certs/ca.pem"
cert = "/etc/horizon/certs/site.pem"
key = "/etc/horizon/certs/site.key"

[servers]
program = "/usr/local/bin/horizon"
warm_pool = {{ .Values.agent.servers.warmPool }}
max = {{ .Values.agent.servers.max }}
tick_ms = {{ .Values.agent.servers.tickMs }}
{{- with .Values.agent.peers }}

[peers]
{{- range $site, $addr := . }}
{{ $site }} = {{ $addr | quote }}
{{- end }}
{{- end }}
{{- end -}}
