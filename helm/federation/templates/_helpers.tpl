{{/*
Names. The full name is kept short: source StatefulSets are named <fullname>-src-<source> and a
StatefulSet's pods carry a controller-revision-hash label of <statefulset name>-<10 chars>, which
must fit in 63 characters (source names are at most 20 characters, see values.schema.json).
*/}}
{{- define "fedlab.fullname" -}}
{{- if contains "fedlab" .Release.Name -}}
{{- .Release.Name | trunc 26 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-fedlab" .Release.Name | trunc 26 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fedlab.runId" -}}
{{- default .Release.Name .Values.run.id -}}
{{- end -}}

{{- define "fedlab.runDir" -}}
{{- printf "/var/fedlab/data/run/%s" (include "fedlab.runId" .) -}}
{{- end -}}

{{- define "fedlab.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "fedlab.selectorLabels" -}}
app.kubernetes.io/name: fedlab
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fedlab.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fedlab.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fedlab
{{- end -}}

{{/* Labels of one component: (dict "ctx" $ "component" "warehouse") */}}
{{- define "fedlab.componentLabels" -}}
{{ include "fedlab.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "fedlab.componentSelector" -}}
{{ include "fedlab.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "fedlab.warehouseName" -}}{{ include "fedlab.fullname" . }}-warehouse{{- end -}}

{{/* The name of one warehouse's StatefulSet and Service: (dict "ctx" $ "name" "wh2"); the first's,
named "warehouse", is fedlab.warehouseName. */}}
{{- define "fedlab.warehouseNameOf" -}}
{{- if eq .name "warehouse" }}{{ include "fedlab.warehouseName" .ctx }}{{ else }}{{ include "fedlab.fullname" .ctx }}-wh-{{ .name }}{{ end -}}
{{- end -}}

{{/* Labels and selector of one warehouse's pods: (dict "ctx" $ "component" "warehouse" "warehouse" "wh2") */}}
{{- define "fedlab.warehouseLabels" -}}
{{ include "fedlab.componentLabels" . }}
fedlab.io/warehouse: {{ .warehouse }}
{{- end -}}

{{- define "fedlab.warehouseSelector" -}}
{{ include "fedlab.componentSelector" . }}
fedlab.io/warehouse: {{ .warehouse }}
{{- end -}}
{{- define "fedlab.warehouseAddress" -}}{{ include "fedlab.warehouseName" . }}:{{ .Values.warehouse.port }}{{- end -}}
{{- define "fedlab.warehouseDataClaim" -}}data-{{ include "fedlab.warehouseName" . }}-0{{- end -}}
{{- define "fedlab.rayHeadName" -}}{{ include "fedlab.fullname" . }}-ray-head{{- end -}}
{{- define "fedlab.raySecretName" -}}{{ default (printf "%s-ray-auth" (include "fedlab.fullname" .)) .Values.ray.auth.existingSecret }}{{- end -}}
{{- define "fedlab.faultsName" -}}{{ include "fedlab.fullname" . }}-faults{{- end -}}

{{/* The name of one source's StatefulSet and Service: (dict "ctx" $ "name" "s1") */}}
{{- define "fedlab.sourceName" -}}{{ include "fedlab.fullname" .ctx }}-src-{{ .name }}{{- end -}}

{{/* The Ray custom resource that exists only on one source's node: (source name) */}}
{{- define "fedlab.sourceRayResource" -}}fedlab_source_{{ . | replace "-" "_" }}{{- end -}}

{{- define "fedlab.podSecurityContext" -}}
{{ toYaml .Values.podSecurityContext }}
{{- end -}}

{{- define "fedlab.containerSecurityContext" -}}
{{ toYaml .Values.containerSecurityContext }}
{{- end -}}

{{/* Environment every fedlab process gets. */}}
{{- define "fedlab.commonEnv" -}}
- name: HOME
  value: /tmp
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
- name: PYTHONUNBUFFERED
  value: "1"
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end -}}

{{/* Ray's settings for a node or a driver (token auth from the Secret). */}}
{{- define "fedlab.rayEnv" -}}
- name: RAY_AUTH_MODE
  value: {{ .Values.ray.auth.mode | quote }}
{{- if eq .Values.ray.auth.mode "token" }}
- name: RAY_AUTH_TOKEN_PATH
  value: /etc/fedlab/ray-auth/token
{{- end }}
- name: RAY_USAGE_STATS_ENABLED
  value: "0"
{{- range $name, $value := .Values.ray.config }}
- name: RAY_{{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{- define "fedlab.rayAuthVolumeMount" -}}
{{- if eq .Values.ray.auth.mode "token" -}}
- name: ray-auth
  mountPath: /etc/fedlab/ray-auth
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "fedlab.rayAuthVolume" -}}
{{- if eq .Values.ray.auth.mode "token" -}}
- name: ray-auth
  secret:
    secretName: {{ include "fedlab.raySecretName" . }}
    defaultMode: 0440
{{- end -}}
{{- end -}}

{{/* The --tls-* flags of a gRPC client or server, as a YAML list fragment. */}}
{{- define "fedlab.tlsArgs" -}}
{{- if .Values.tls.enabled -}}
- --tls-cert
- /etc/fedlab/tls/tls.crt
- --tls-key
- /etc/fedlab/tls/tls.key
- --tls-ca
- /etc/fedlab/tls/ca.crt
{{- end -}}
{{- end -}}

{{/* The same flags for a shell command line. */}}
{{- define "fedlab.tlsShellArgs" -}}
{{- if .Values.tls.enabled }} --tls-cert /etc/fedlab/tls/tls.crt --tls-key /etc/fedlab/tls/tls.key --tls-ca /etc/fedlab/tls/ca.crt{{- end }}
{{- end -}}

{{- define "fedlab.tlsVolumeMount" -}}
{{- if .Values.tls.enabled -}}
- name: tls
  mountPath: /etc/fedlab/tls
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "fedlab.tlsVolume" -}}
{{- if .Values.tls.enabled -}}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
    defaultMode: 0440
{{- end -}}
{{- end -}}

{{/* Metrics (metrics.enabled): each role's process serves Prometheus's /metrics on metrics.port
of its pod. Its flag as a YAML list fragment, and for a shell command line. */}}
{{- define "fedlab.metricsArgs" -}}
{{- if .Values.metrics.enabled -}}
- --metrics-port
- {{ .Values.metrics.port | quote }}
{{- end -}}
{{- end -}}

{{- define "fedlab.metricsShellArgs" -}}
{{- if .Values.metrics.enabled }} --metrics-port {{ .Values.metrics.port }}{{- end }}
{{- end -}}

{{/* The annotations that annotation-based scrape configs read (the Prometheus community chart's
kubernetes-pods job and its kind). */}}
{{- define "fedlab.metricsAnnotations" -}}
{{- if .Values.metrics.enabled -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{- define "fedlab.metricsContainerPort" -}}
{{- if .Values.metrics.enabled -}}
- name: metrics
  containerPort: {{ .Values.metrics.port }}
{{- end -}}
{{- end -}}

{{/* A Service's metrics port, and the label the ServiceMonitor selects such a Service by. */}}
{{- define "fedlab.metricsServicePort" -}}
{{- if .Values.metrics.enabled -}}
- name: metrics
  port: {{ .Values.metrics.port }}
  targetPort: metrics
{{- end -}}
{{- end -}}

{{- define "fedlab.metricsServiceLabel" -}}
{{- if .Values.metrics.enabled -}}
fedlab.io/metrics: "true"
{{- end -}}
{{- end -}}

{{- define "fedlab.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end -}}

{{- define "fedlab.tmpVolumeMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/*
Whether pods that share the warehouse's volume must run on the warehouse's node: true unless the
volume's access modes allow ReadWriteMany.
*/}}
{{- define "fedlab.colocateWithWarehouse" -}}
{{- if not (has "ReadWriteMany" .Values.warehouse.storage.accessModes) }}true{{- end -}}
{{- end -}}

{{/* A required pod affinity to the first warehouse's node (for pods mounting its ReadWriteOnce volume). */}}
{{- define "fedlab.warehouseAffinity" -}}
podAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "fedlab.warehouseSelector" (dict "ctx" . "component" "warehouse" "warehouse" "warehouse") | nindent 10 }}
{{- end -}}

{{/* A pod anti-affinity that keeps a pod off the nodes of a component's pods, by `mode` (none,
preferred, required): (dict "ctx" $ "mode" "required" "component" "source"). Renders nothing for
none; the caller writes `affinity:` only when this is not empty. */}}
{{- define "fedlab.antiAffinity" -}}
{{- if eq .mode "required" }}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "fedlab.componentSelector" . | nindent 10 }}
{{- else if eq .mode "preferred" }}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "fedlab.componentSelector" . | nindent 12 }}
{{- end }}
{{- end -}}

{{/* The volume with the run directory (the first warehouse's claim; the others keep theirs there too). */}}
{{- define "fedlab.dataVolume" -}}
- name: data
  persistentVolumeClaim:
    claimName: {{ include "fedlab.warehouseDataClaim" . }}
{{- end -}}

{{/* Validations the schema cannot express. */}}
{{- define "fedlab.validate" -}}
{{- $names := list -}}
{{- range .Values.sources -}}
{{- if has .name $names -}}
{{- fail (printf "sources: the source name %q appears twice" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- $warehouses := list "warehouse" -}}
{{- range .Values.warehouses -}}
{{- if has .name $warehouses -}}
{{- fail (printf "warehouses: the warehouse name %q appears twice (the first warehouse is \"warehouse\")" .name) -}}
{{- end -}}
{{- $warehouses = append $warehouses .name -}}
{{- end -}}
{{- $keeping := list "warehouse" -}}
{{- range .Values.views -}}
{{- $at := default "warehouse" .warehouse -}}
{{- if not (has $at $warehouses) -}}
{{- fail (printf "views: %q names the warehouse %q, which is not in warehouses (%s)" .name $at (join ", " $warehouses)) -}}
{{- end -}}
{{- $keeping = append $keeping $at -}}
{{- end -}}
{{- range .Values.warehouses -}}
{{- if not (has .name $keeping) -}}
{{- fail (printf "warehouses: %q keeps no view (name it in a view's warehouse)" .name) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.secretName: must name a Secret (tls.crt, tls.key, ca.crt) when tls.enabled is true" -}}
{{- end -}}
{{- if .Values.metrics.enabled -}}
{{- $m := int .Values.metrics.port -}}
{{- $r := .Values.ray.ports -}}
{{- $taken := list (int .Values.sourceDefaults.port) (int .Values.warehouse.port) (int .Values.warehouse.spark.driverPort) (int .Values.warehouse.spark.blockManagerPort) (int $r.gcs) (int $r.nodeManager) (int $r.objectManager) (int $r.dashboardAgentGrpc) (int $r.dashboardAgentListen) (int $r.metricsExport) (int $r.runtimeEnvAgent) (int $r.dashboard) -}}
{{- range .Values.sources -}}{{- if .port -}}{{- $taken = append $taken (int .port) -}}{{- end -}}{{- end -}}
{{- if or (has $m $taken) (and (ge $m (int $r.minWorker)) (le $m (int $r.maxWorker))) -}}
{{- fail (printf "metrics.port: %d is taken by another port of a fedlab pod (a source's or the warehouse's gRPC port, Spark's, or Ray's ray.ports)" $m) -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.warehouse.storage.type "objectStore") (not .Values.warehouse.storage.uri) -}}
{{- fail "warehouse.storage.uri: must be set (s3a://..., gs://..., abfss://...) when warehouse.storage.type is objectStore" -}}
{{- end -}}
{{- end -}}

{{/* The ports of a Ray node (besides the head's GCS), as NetworkPolicy port entries. */}}
{{- define "fedlab.rayNodePorts" -}}
{{- $p := .Values.ray.ports -}}
{{- range (list $p.nodeManager $p.objectManager $p.dashboardAgentGrpc $p.dashboardAgentListen $p.metricsExport $p.runtimeEnvAgent) }}
- protocol: TCP
  port: {{ . }}
{{- end }}
- protocol: TCP
  port: {{ $p.minWorker }}
  endPort: {{ $p.maxWorker }}
{{- end -}}

{{/* The ServiceAccount token of a pod that calls the Kubernetes API: Kubernetes' own mount, or,
with kubeApiCaConfigMap, the same three files mounted by the chart with that CA. */}}
{{- define "fedlab.apiTokenAutomount" -}}
{{ if .Values.kubeApiCaConfigMap }}false{{ else }}true{{ end }}
{{- end -}}

{{- define "fedlab.apiTokenVolumeMount" -}}
{{- if .Values.kubeApiCaConfigMap }}
- name: kube-api-access
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end }}
{{- end -}}

{{- define "fedlab.apiTokenVolume" -}}
{{- if .Values.kubeApiCaConfigMap }}
- name: kube-api-access
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: {{ .Values.kubeApiCaConfigMap }}
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- end }}
{{- end -}}
