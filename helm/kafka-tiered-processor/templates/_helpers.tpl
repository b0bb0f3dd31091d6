{{/* Names. */}}
{{- define "ktp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ktp.fullname" -}}
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

{{- define "ktp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ktp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "ktp.selector" -}}
app.kubernetes.io/name: {{ include "ktp.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "ktp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ktp.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ktp.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
Memory of a worker in MiB, from the buffer bound (see worker.bufferMiB in values.yaml):
request = buffer + prefetch + overhead, prefetch = buffer / 4 clamped to 16..64 (as processor/app.py
sizes librdkafka's queue); limit = request * (100 + headroom) / 100.
*/}}
{{- define "ktp.workerMemoryRequestMiB" -}}
{{- $buffer := int .Values.worker.bufferMiB }}
{{- $prefetch := min 64 (max 16 (div $buffer 4)) }}
{{- add $buffer $prefetch (int .Values.worker.overheadMiB) }}
{{- end }}

{{- define "ktp.workerMemoryLimitMiB" -}}
{{- $request := int (include "ktp.workerMemoryRequestMiB" .) }}
{{- div (mul $request (add 100 (int .Values.worker.limitHeadroomPercent))) 100 }}
{{- end }}

{{/* Hardened security contexts: non-root, read-only root fs, no capabilities, seccomp. */}}
{{- define "ktp.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "ktp.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Environment shared by every container: settings, secret references, nothing secret inline. */}}
{{- define "ktp.envFrom" -}}
- configMapRef:
    name: {{ include "ktp.fullname" . }}
{{- range .Values.credentials.extraEnvFromSecrets }}
- secretRef:
    name: {{ . }}
{{- end }}
{{- end }}

{{- define "ktp.secretEnv" -}}
{{- with .Values.credentials.s3.existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.credentials.s3.accessKeyIdKey }}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.credentials.s3.secretAccessKeyKey }}
{{- end }}
{{- with .Values.credentials.webToken.existingSecret }}
- name: PROCESSOR_WEB_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.credentials.webToken.key }}
{{- end }}
{{- end }}

{{- define "ktp.probes" -}}
startupProbe:
  httpGet:
    path: /livez
    port: http
  periodSeconds: 5
  failureThreshold: 60
livenessProbe:
  httpGet:
    path: /livez
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}

{{/* The audit's pod spec (CronJob or Deployment); .root is the chart context. */}}
{{- define "ktp.auditPod" -}}
serviceAccountName: {{ include "ktp.serviceAccountName" .root }}
automountServiceAccountToken: {{ .root.Values.serviceAccount.automountToken }}
securityContext:
  {{- include "ktp.podSecurityContext" .root | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- if eq .root.Values.audit.mode "cronjob" }}
restartPolicy: OnFailure
{{- end }}
containers:
  - name: audit
    image: {{ .image }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    args: {{ toJson .args }}
    envFrom:
      {{- include "ktp.envFrom" .root | nindent 6 }}
    env:
      {{- include "ktp.secretEnv" .root | nindent 6 }}
      - name: SPARK_LOCAL_IP
        value: "127.0.0.1"
    resources:
      requests:
        cpu: {{ .root.Values.audit.cpuRequest | quote }}
        memory: {{ .root.Values.audit.memory | quote }}
      limits:
        memory: {{ .root.Values.audit.memory | quote }}
    securityContext:
      {{- include "ktp.containerSecurityContext" .root | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      - name: data
        mountPath: /data
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 4Gi
  - name: data
    emptyDir:
      sizeLimit: 4Gi
{{- end }}
