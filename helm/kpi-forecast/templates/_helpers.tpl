{{/*
Chart name: kpi-forecast unless nameOverride.
*/}}
{{- define "kpi-forecast.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name. O-RAN SC xApps are named ricxapp-<xapp>, whatever the release is called, so that the
RIC platform's routing and application managers find service-ricxapp-<xapp>-rmr and -http by
convention. Two releases of this chart in one namespace therefore need fullnameOverride.
*/}}
{{- define "kpi-forecast.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "ricxapp-%s" (include "kpi-forecast.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kpi-forecast.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The O-RAN SC object names. */}}
{{- define "kpi-forecast.httpServiceName" -}}
{{- printf "service-%s-http" (include "kpi-forecast.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kpi-forecast.rmrServiceName" -}}
{{- printf "service-%s-rmr" (include "kpi-forecast.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kpi-forecast.configMapName" -}}
{{- printf "configmap-%s-appconfig" (include "kpi-forecast.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels: fixed for the life of a release (a Deployment's selector is immutable).
*/}}
{{- define "kpi-forecast.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kpi-forecast.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
Labels of every object. `app` is the label O-RAN SC xApp charts and RIC tooling select on.
*/}}
{{- define "kpi-forecast.labels" -}}
helm.sh/chart: {{ include "kpi-forecast.chart" . }}
{{ include "kpi-forecast.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ricxapp
app: {{ include "kpi-forecast.fullname" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
metadata.annotations of a top-level object: commonAnnotations merged with the object's own (the
object's win); nothing at all when both are empty. It brings its own line break and indent.
Usage, right after the labels: {{- include "kpi-forecast.annotations" (dict "ctx" $ "extra" .Values.service.http.annotations) }}
*/}}
{{- define "kpi-forecast.annotations" -}}
{{- $all := merge (deepCopy (.extra | default dict)) (.ctx.Values.commonAnnotations | default dict) -}}
{{- with $all }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end -}}

{{/*
An image reference from {registry, repository, tag, digest}; a digest wins over the tag.
Usage: include "kpi-forecast.imageRef" (dict "image" .Values.image "defaultTag" .Chart.AppVersion)
*/}}
{{- define "kpi-forecast.imageRef" -}}
{{- $repo := .image.repository -}}
{{- if .image.registry -}}
{{- $repo = printf "%s/%s" .image.registry .image.repository -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default .defaultTag | toString) -}}
{{- end -}}
{{- end -}}

{{/*
The xApp image. Without an explicit tag: the appVersion, or its -gpu variant (the image built
with onnxruntime-gpu) when gpu.enabled, since the CPU image has no CUDA provider to run.
*/}}
{{- define "kpi-forecast.defaultTag" -}}
{{- .Chart.AppVersion -}}{{- if .Values.gpu.enabled }}-gpu{{ end -}}
{{- end -}}

{{- define "kpi-forecast.image" -}}
{{- include "kpi-forecast.imageRef" (dict "image" .Values.image "defaultTag" (include "kpi-forecast.defaultTag" .)) -}}
{{- end -}}

{{- define "kpi-forecast.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kpi-forecast.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The ONNX Runtime execution provider: auto becomes cuda on GPU nodes, so a pod scheduled onto a
GPU actually uses it (auto would fall back to the CPU without a word if the CUDA provider failed
to load). cuda without a GPU is refused here rather than failing inside the pod, and so is the
int8 graph, whose kernels are the CPU's, on a GPU.
*/}}
{{- define "kpi-forecast.executionProvider" -}}
{{- $provider := .Values.xapp.executionProvider | default "auto" -}}
{{- if and (eq (.Values.xapp.precision | default "auto") "int8") (or .Values.gpu.enabled (eq $provider "cuda")) -}}
{{- fail "xapp.precision=int8 runs on the CPU: it needs gpu.enabled=false and executionProvider auto or cpu" -}}
{{- end -}}
{{- if .Values.gpu.enabled -}}
{{- if eq $provider "auto" }}cuda{{ else }}{{ $provider }}{{ end -}}
{{- else if eq $provider "cuda" -}}
{{- fail "xapp.executionProvider=cuda needs gpu.enabled=true (a GPU to run on)" -}}
{{- else -}}
{{- $provider -}}
{{- end -}}
{{- end -}}

{{/*
The xApp descriptor, config-file.json, as a dict (rendered with toPrettyJson). It follows the
packaged xapp/descriptor/config-file.json and must validate against files/schema.json, which the
chart's tests check for every values file they render.
*/}}
{{- define "kpi-forecast.descriptor" -}}
{{- /* get, not .field: a null in values.yaml removes the key, and helm lint --strict
       fails on a missing key; a missing or empty value is rendered as null. */ -}}
{{- $x := .Values.xapp -}}
{{- $e2 := $x.e2 -}}
{{- $container := include "kpi-forecast.name" . -}}
{{- $model := .Values.model -}}
{{- $controls := dict
      "modelRoot" (get $x "modelRoot" | default nil)
      "latencyBudgetMs" $x.latencyBudgetMs
      "defaultHorizon" (get $x "defaultHorizon" | default nil)
      "quantiles" (get $x "quantiles" | default nil)
      "batching" $x.batching
      "perModel" $x.perModel
      "historyLength" $x.historyLength
      "historyStore" $x.historyStore
      "recalibration" $x.recalibration
      "scoring" $x.scoring
      "guard" $x.guard
      "promotion" $x.promotion
      "executionProvider" (include "kpi-forecast.executionProvider" .)
      "precision" $x.precision
      "intraOpThreads" $x.intraOpThreads
      "maxRequestBytes" $x.maxRequestBytes
      "registration" $x.registration
      "api" $x.api
      "e2" (dict
        "enabled" $e2.enabled
        "port" .Values.containerPorts.rmrData
        "submgrUrl" (get $e2 "submgrUrl" | default nil)
        "e2mgrUrl" $e2.e2mgrUrl
        "clientHost" (get $e2 "clientHost" | default nil)
        "reportingPeriodMs" (get $e2 "reportingPeriodMs" | default nil)
        "kpis" $e2.kpis)
      "a1" $x.a1
      "publication" $x.publication -}}
{{- if $model.repository -}}
{{- $_ := set $controls "modelRepository" $model.path -}}
{{- $_ := set $controls "models" (get $model "models" | default nil) -}}
{{- $_ := set $controls "defaultModel" (get $model "defaultModel" | default nil) -}}
{{- else -}}
{{- $_ := set $controls "modelDir" $model.path -}}
{{- end -}}
{{- $image := dict
      "registry" (.Values.image.registry | default "")
      "name" .Values.image.repository
      "tag" (.Values.image.tag | default (include "kpi-forecast.defaultTag" .) | toString) -}}
{{- $descriptor := dict
      "name" (include "kpi-forecast.name" .)
      "version" (.Chart.AppVersion | toString)
      "containers" (list (dict "name" $container "image" $image))
      "livenessProbe" (dict
        "httpGet" (dict "path" "ric/v1/health/alive" "port" .Values.containerPorts.http)
        "initialDelaySeconds" .Values.livenessProbe.initialDelaySeconds
        "periodSeconds" .Values.livenessProbe.periodSeconds)
      "readinessProbe" (dict
        "httpGet" (dict "path" "ric/v1/health/ready" "port" .Values.containerPorts.http)
        "initialDelaySeconds" .Values.readinessProbe.initialDelaySeconds
        "periodSeconds" .Values.readinessProbe.periodSeconds)
      "messaging" (dict "ports" (list
        (dict "name" "http" "container" $container "port" .Values.containerPorts.http
              "description" "REST: forecasts, health probes, /ric/v1/config and Prometheus metrics")
        (dict "name" "rmr-data" "container" $container "port" .Values.containerPorts.rmrData
              "rxMessages" .Values.rmr.rxMessages "txMessages" .Values.rmr.txMessages
              "policies" .Values.rmr.policies
              "description" "RMR data: E2 subscriptions, KPM indications and A1 policies")
        (dict "name" "rmr-route" "container" $container "port" .Values.containerPorts.rmrRoute
              "description" "RMR route table updates from the routing manager")))
      "rmr" (omit .Values.rmr "routingManager" "routes")
      "controls" $controls -}}
{{- toPrettyJson $descriptor -}}
{{- end -}}
