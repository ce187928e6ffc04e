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
{{- with .Values.core.coordinates }}

[sites.coordinates]
{{- range $site, $at := . }}
{{ $site }} = [{{ index $at 0 }}, {{ index $at 1 }}]
{{- end }}
{{- end }}

[listen]
control = "0.0.0.0:{{ .Values.core.controlPort }}"
admin = "0.0.0.0:{{ .Values.core.adminPort }}"

[tls]
ca = "/etc/horizon/certs/ca.pem"
# The core's own certificate (core.horizon), not the site's.
cert = "/etc/horizon/certs/core.pem"
key = "/etc/horizon/certs/core.key"

[store]
path = "/var/lib/horizon/store"
{{- if eq .Values.core.store.kind "etcd" }}
{{- if not .Values.core.store.etcd.endpoints }}
{{- fail "core.store.etcd.endpoints (the etcd members, http://host:port) is required where core.store.kind is etcd" }}
{{- end }}
{{- $https := 0 }}
{{- range .Values.core.store.etcd.endpoints }}{{ if hasPrefix "https://" . }}{{ $https = add1 $https }}{{ end }}{{ end }}
{{- if and $https (not (dig "etcd" "tls" "existingSecret" "" .Values.core.store)) }}
{{- fail "core.store.etcd.tls.existingSecret (ca.crt, tls.crt, tls.key) is required with https:// etcd endpoints" }}
{{- end }}
kind = "etcd"
endpoints = [{{ range $i, $e := .Values.core.store.etcd.endpoints }}{{ if $i }}, {{ end }}{{ $e | quote }}{{ end }}]
prefix = {{ .Values.core.store.etcd.prefix | quote }}
election_ttl_s = {{ .Values.core.store.etcd.electionTtlSeconds }}
{{- with .Values.core.store.etcd.universe }}
universe = {{ . | quote }}
{{- end }}
{{- with (dig "etcd" "tls" dict .Values.core.store) }}
{{- if .existingSecret }}
tls_ca = "/etc/horizon/etcd-tls/ca.crt"
tls_cert = "/etc/horizon/etcd-tls/tls.crt"
tls_key = "/etc/horizon/etcd-tls/tls.key"
{{- with .serverName }}
tls_server_name = {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

[placement]
stage = {{ .Values.core.stage | quote }}
{{- range .Values.core.zones }}

[[zones]]
world = {{ .world | default 0 | int64 }}
min = [{{ range $i, $v := .min }}{{ if $i }}, {{ end }}{{ printf "%f" (float64 $v) }}{{ end }}]
max = [{{ range $i, $v := .max }}{{ if $i }}, {{ end }}{{ printf "%f" (float64 $v) }}{{ end }}]
{{- end }}
{{- range .Values.core.delegations }}

[[delegations]]
world = {{ .world | default 0 | int64 }}
site = {{ .site | quote }}
{{- if .min }}
min = [{{ range $i, $v := .min }}{{ if $i }}, {{ end }}{{ printf "%f" (float64 $v) }}{{ end }}]
max = [{{ range $i, $v := .max }}{{ if $i }}, {{ end }}{{ printf "%f" (float64 $v) }}{{ end }}]
{{- end }}
{{- end }}
{{- end -}}

{{- define "horizon.agentToml" -}}
site = {{ .Values.site | quote }}
{{- $core := .Values.agent.coreAddress }}
{{- if and (not $core) .Values.core.enabled }}
{{- /* The core site: this release's own core, through its Service. */}}
{{- $core = printf "%s-core:%v" (include "horizon.fullname" .) .Values.core.controlPort }}
{{- end }}
core = {{ required "agent.coreAddress (host:port of the core) is required where core.enabled is false" $core | quote }}
core_site = {{ .Values.agent.coreSite | quote }}

[listen]
{{- if eq .Values.agent.servers.driver "kubernetes" }}
servers = "0.0.0.0:{{ .Values.agent.ports.servers }}"
{{- else }}
servers = "127.0.0.1:{{ .Values.agent.ports.servers }}"
{{- end }}
players = "0.0.0.0:{{ .Values.agent.ports.players }}"
transfer = "0.0.0.0:{{ .Values.agent.ports.transfer }}"
advertise_transfer = {{ required "agent.advertiseTransfer (how other sites reach this agent) is required" .Values.agent.advertiseTransfer | quote }}
admin = "0.0.0.0:{{ .Values.agent.ports.admin }}"
beacon = "0.0.0.0:{{ .Values.agent.ports.beacon }}"
advertise_admin = "{{ include "horizon.fullname" . }}-agent-admin.{{ .Release.Namespace }}.svc:{{ .Values.agent.ports.admin }}"

[tls]
ca = "/etc/horizon/certs/ca.pem"
cert = "/etc/horizon/certs/site.pem"
key = "/etc/horizon/certs/site.key"
# The player signing keys, from tokens.existingSecret: the agent reloads them when the Secret changes.
player_keys = "/etc/horizon/keys/player-keys"

[servers]
program = "/usr/local/bin/horizon"
warm_pool = {{ .Values.agent.servers.warmPool }}
max = {{ .Values.agent.servers.max }}
players_per_server = {{ .Values.agent.servers.playersPerServer }}
pack_fill_ratio = {{ .Values.agent.servers.packFillRatio }}
tick_ms = {{ .Values.agent.servers.tickMs }}
{{- if eq .Values.agent.servers.driver "kubernetes" }}
driver = "kubernetes"

[servers.kubernetes]
namespace = {{ .Release.Namespace | quote }}
pod_template = "pod-template.json"
agent = "{{ include "horizon.fullname" . }}-agent-servers.{{ .Release.Namespace }}.svc:{{ .Values.agent.ports.servers }}"
grace_s = {{ .Values.agent.servers.graceSeconds }}
{{- end }}
{{- with .Values.agent.peers }}

[peers]
{{- range $site, $addr := . }}
{{ $site }} = {{ $addr | quote }}
{{- end }}
{{- end }}
{{- end -}}


{{/* The game servers' PodTemplateSpec (JSON): the values' template, with the chart's image for
     a container without one, and the site CA mounted at /etc/horizon/certs. */}}
{{- define "horizon.podTemplate" -}}
{{- $tpl := deepCopy .Values.agent.servers.podTemplate -}}
{{- $spec := $tpl.spec -}}
{{- $containers := list -}}
{{- range $c := $spec.containers -}}
{{- if not $c.image -}}{{- $_ := set $c "image" (include "horizon.image" $) -}}{{- end -}}
{{- $mounts := default (list) $c.volumeMounts -}}
{{- $mounts = append $mounts (dict "name" "horizon-ca" "mountPath" "/etc/horizon/certs" "readOnly" true) -}}
{{- $_ := set $c "volumeMounts" $mounts -}}
{{- $containers = append $containers $c -}}
{{- end -}}
{{- $_ := set $spec "containers" $containers -}}
{{- $volumes := default (list) $spec.volumes -}}
{{- $ca := dict "secretName" (include "horizon.tlsSecret" .) "items" (list (dict "key" "ca.crt" "path" "ca.pem")) -}}
{{- $volumes = append $volumes (dict "name" "horizon-ca" "secret" $ca) -}}
{{- $_ := set $spec "volumes" $volumes -}}
{{- toJson $tpl -}}
{{- end -}}
