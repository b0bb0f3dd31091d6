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
request = buffer + prefetch + overhead (+ keyFilterMiB with an erasure secret: the key filter's
compiled code), prefetch = buffer / 4 clamped to 16..64 (as processor/app.py sizes librdkafka's
queue); limit = request * (100 + headroom) / 100.
*/}}
{{- define "ktp.workerMemoryRequestMiB" -}}
{{- $buffer := int .Values.worker.bufferMiB }}
{{- $prefetch := min 64 (max 16 (div $buffer 4)) }}
{{- $filters := ternary (int .Values.worker.keyFilterMiB) 0 (ne .Values.credentials.erasureSecret.existingSecret "") }}
{{- add $buffer $prefetch (int .Values.worker.overheadMiB) $filters }}
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

{{/* Does the protocol use TLS / SASL? */}}
{{- define "ktp.kafkaTls" -}}
{{- if has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL") }}true{{ end }}
{{- end }}

{{- define "ktp.kafkaSasl" -}}
{{- if has .Values.kafka.securityProtocol (list "SASL_PLAINTEXT" "SASL_SSL") }}true{{ end }}
{{- end }}

{{/* Where the Kafka TLS files are mounted. */}}
{{- define "ktp.kafkaCaDir" -}}/etc/processor/kafka/ca{{- end }}
{{- define "ktp.kafkaClientDir" -}}/etc/processor/kafka/client{{- end }}

{{/*
Values missing or that cannot go together, refused at render time with the setting to change (the
schema checks each value alone). Every problem is collected first and the render fails once, naming
them all: a first install learns every value it lacks from one try, not one per try.
*/}}
{{- define "ktp.validate" -}}
{{- $k := .Values.kafka }}
{{- $problems := list }}
{{- /* Required at install, checked here rather than by the schema's minItems: helm lint renders in
lint mode, where fail only logs, so a bare `helm lint` of the defaults passes (see ci/). */}}
{{- if not .Values.config.topics }}
{{- $problems = append $problems "config.topics is empty: list the source topics to offload, e.g. --set 'config.topics={orders,payments}' (see examples/)" }}
{{- end }}
{{- if and (eq .Values.webApi.auth "token") (not .Values.credentials.webToken.existingSecret) }}
{{- $problems = append $problems "webApi.auth is token (the default): set credentials.webToken.existingSecret to an existing Secret holding the read API's bearer token, or set webApi.auth=none to leave the read API open on purpose" }}
{{- end }}
{{- /* No image is published: the user builds and pushes one (docs/kubernetes.md "Container image"). */}}
{{- if not .Values.image.repository }}
{{- $problems = append $problems "image.repository is empty: no image is published, so build one (docker build -t REGISTRY/kafka-tiered-processor:TAG .), push it, and set image.repository=REGISTRY/kafka-tiered-processor and image.tag=TAG (see docs/kubernetes.md, \"Container image\")" }}
{{- end }}
{{- if and (include "ktp.kafkaSasl" .) (ne $k.sasl.mechanism "OAUTHBEARER") (not $k.sasl.existingSecret) }}
{{- $problems = append $problems (printf "kafka.securityProtocol is %s with mechanism %s: set kafka.sasl.existingSecret to the Secret holding the password" $k.securityProtocol $k.sasl.mechanism) }}
{{- end }}
{{- if and (include "ktp.kafkaSasl" .) (eq $k.sasl.mechanism "OAUTHBEARER") (not $k.sasl.oauthTokenProvider) }}
{{- $problems = append $problems "kafka.sasl.mechanism is OAUTHBEARER: set kafka.sasl.oauthTokenProvider (aws-msk-iam, or module:function)" }}
{{- end }}
{{- if and (eq $k.sasl.oauthTokenProvider "aws-msk-iam") (not $k.sasl.oauthAwsRegion) }}
{{- $problems = append $problems "kafka.sasl.oauthTokenProvider is aws-msk-iam: set kafka.sasl.oauthAwsRegion to the cluster's region" }}
{{- end }}
{{- if and (or $k.tls.caSecret $k.tls.clientCertSecret) (not (include "ktp.kafkaTls" .)) }}
{{- $problems = append $problems (printf "kafka.tls.caSecret/clientCertSecret are set but kafka.securityProtocol is %s: use SSL or SASL_SSL" $k.securityProtocol) }}
{{- end }}
{{- if and $k.tls.keyPasswordSecret (not $k.tls.clientCertSecret) }}
{{- $problems = append $problems "kafka.tls.keyPasswordSecret is set without kafka.tls.clientCertSecret" }}
{{- end }}
{{- /* Monitoring: which Prometheus selects the objects, and who may scrape through the policy, are
install choices with no safe default (an unselected object or a blocked scraper fails silently). */}}
{{- $m := .Values.monitoring }}
{{- if and $m.serviceMonitor.enabled (not $m.serviceMonitor.labels) }}
{{- $problems = append $problems "monitoring.serviceMonitor.enabled is true but monitoring.serviceMonitor.labels is empty: Prometheus picks ServiceMonitors by label (a default kube-prometheus-stack only those labelled release: <its release name>), so an unlabelled one is silently never scraped. Set the labels your Prometheus's serviceMonitorSelector matches, typically release: <your kube-prometheus-stack release> (--set monitoring.serviceMonitor.labels.release=<your kube-prometheus-stack release>)" }}
{{- end }}
{{- if and $m.prometheusRule.enabled (not $m.prometheusRule.labels) }}
{{- $problems = append $problems "monitoring.prometheusRule.enabled is true but monitoring.prometheusRule.labels is empty: Prometheus picks PrometheusRules by label (a default kube-prometheus-stack only those labelled release: <its release name>), so unlabelled alerts are silently never loaded. Set the labels your Prometheus's ruleSelector matches, typically release: <your kube-prometheus-stack release> (--set monitoring.prometheusRule.labels.release=<your kube-prometheus-stack release>)" }}
{{- end }}
{{- $problems = concat $problems (include "ktp.encryptionProblems" . | fromJsonArray) }}
{{- $np := .Values.networkPolicy }}
{{- if and $np.enabled $m.serviceMonitor.enabled (not (or $np.metrics.namespace $np.metrics.fromNamespaces)) }}
{{- $problems = append $problems "networkPolicy.enabled and monitoring.serviceMonitor.enabled are true but the NetworkPolicy admits no metrics scraper: set networkPolicy.metrics.namespace to the namespace Prometheus runs in (typically your kube-prometheus-stack's, e.g. --set networkPolicy.metrics.namespace=monitoring), or networkPolicy.metrics.fromNamespaces to label selectors of the scrapers' namespaces; no namespace is assumed" }}
{{- end }}
{{- if $problems }}
{{- fail (printf "%d value(s) to set or change:\n  - %s" (len $problems) (join "\n  - " $problems)) }}
{{- end }}
{{- if .Values.gateway.enabled }}
{{- $_ := include "ktp.gatewayNodeIds" . }}
{{- end }}
{{- end }}

{{/* The namespace selectors (label maps) of the metrics scrapers the NetworkPolicy admits. */}}
{{- define "ktp.metricsNamespaces" -}}
{{- $m := .Values.networkPolicy.metrics }}
{{- $selectors := list }}
{{- with $m.namespace }}
{{- $selectors = append $selectors (dict "kubernetes.io/metadata.name" .) }}
{{- end }}
{{- $selectors = concat $selectors $m.fromNamespaces }}
{{- toYaml $selectors }}
{{- end }}

{{/* The Kafka security settings that are not secret, as ConfigMap entries. */}}
{{- define "ktp.kafkaConfig" -}}
{{- $k := .Values.kafka }}
PROCESSOR_SECURITY_PROTOCOL: {{ $k.securityProtocol | quote }}
{{- if include "ktp.kafkaSasl" . }}
PROCESSOR_SASL_MECHANISM: {{ $k.sasl.mechanism | quote }}
{{- with $k.sasl.username }}
PROCESSOR_SASL_USERNAME: {{ . | quote }}
{{- end }}
{{- with $k.sasl.oauthTokenProvider }}
PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER: {{ . | quote }}
{{- end }}
{{- with $k.sasl.oauthAwsRegion }}
PROCESSOR_SASL_OAUTH_AWS_REGION: {{ . | quote }}
{{- end }}
{{- with $k.sasl.oauthAwsRoleArn }}
PROCESSOR_SASL_OAUTH_AWS_ROLE_ARN: {{ . | quote }}
{{- end }}
{{- end }}
{{- if include "ktp.kafkaTls" . }}
PROCESSOR_SSL_CHECK_HOSTNAME: {{ $k.tls.checkHostname | quote }}
{{- with $k.tls.caSecret }}
PROCESSOR_SSL_CAFILE: {{ printf "%s/%s" (include "ktp.kafkaCaDir" $) $k.tls.caKey | quote }}
{{- end }}
{{- with $k.tls.clientCertSecret }}
PROCESSOR_SSL_CERTFILE: {{ printf "%s/%s" (include "ktp.kafkaClientDir" $) $k.tls.certKey | quote }}
PROCESSOR_SSL_KEYFILE: {{ printf "%s/%s" (include "ktp.kafkaClientDir" $) $k.tls.keyKey | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Secret values as environment variables, each a reference to an existing Secret. */}}
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
{{- with .Values.credentials.erasureSecret.existingSecret }}
- name: PROCESSOR_ERASURE_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.credentials.erasureSecret.key }}
{{- end }}
{{- $sasl := .Values.kafka.sasl }}
{{- if and (include "ktp.kafkaSasl" .) $sasl.existingSecret }}
{{- if not $sasl.username }}
- name: PROCESSOR_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.usernameKey }}
{{- end }}
- name: PROCESSOR_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.passwordKey }}
{{- end }}
{{- $tls := .Values.kafka.tls }}
{{- if and (include "ktp.kafkaTls" .) $tls.keyPasswordSecret }}
- name: PROCESSOR_SSL_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $tls.keyPasswordSecret }}
      key: {{ $tls.keyPasswordKey }}
{{- end }}
{{- end }}

{{/*
Encryption at rest (docs/encryption.md): the key ring a Secret mounted read-only, the mode and KMS
key ids as environment variables of every container that reads or writes the archive (workers,
followers, the gateway, the audit, `helm test`'s verify). Nothing at all with the defaults.
*/}}
{{- define "ktp.keyringDir" -}}/etc/processor/keyring{{- end }}

{{/* The encryption values that cannot work, as a JSON list of problems for ktp.validate (the schema
checks each value alone; the enums are checked here too, for renders with schema validation skipped). */}}
{{- define "ktp.encryptionProblems" -}}
{{- $e := .Values.encryption }}
{{- $problems := list }}
{{- $mode := toString $e.mode }}
{{- if not (has $mode (list "none" "keyring" "kms")) }}
{{- $problems = append $problems (printf "encryption.mode is %q: use none, keyring (a key ring from encryption.keyring.existingSecret) or kms (AWS KMS, encryption.kms.keyId)" $mode) }}
{{- end }}
{{- if and (eq $mode "keyring") (not $e.keyring.existingSecret) }}
{{- $problems = append $problems (printf "encryption.mode is keyring: set encryption.keyring.existingSecret to an existing Secret whose files are the key ring (kubectl create secret generic processor-keyring --from-file=<key ring directory>, made with `processor keyring new`); it is mounted read-only at %s, see docs/encryption.md" (include "ktp.keyringDir" .)) }}
{{- end }}
{{- if and (eq $mode "kms") (not $e.kms.keyId) }}
{{- $problems = append $problems "encryption.mode is kms: set encryption.kms.keyId to the KMS key id or key ARN new data keys are made under (not an alias; see docs/encryption.md)" }}
{{- end }}
{{- if and (ne $mode "kms") (or $e.kms.keyId $e.kms.topicKeyIds) }}
{{- $problems = append $problems (printf "encryption.kms.keyId/topicKeyIds are set but encryption.mode is %s: set encryption.mode=kms, or clear them (readers unwrap KMS-encrypted segments without a key id)" $mode) }}
{{- end }}
{{- $c := .Values.config }}
{{- $sse := toString $c.s3Sse }}
{{- if not (has $sse (list "none" "AES256" "aws:kms")) }}
{{- $problems = append $problems (printf "config.s3Sse is %q: use none, AES256 (SSE-S3) or aws:kms (SSE-KMS)" $sse) }}
{{- end }}
{{- if and $c.s3SseKmsKeyId (ne $sse "aws:kms") }}
{{- $problems = append $problems (printf "config.s3SseKmsKeyId is set but config.s3Sse is %s: set config.s3Sse=aws:kms, or clear it" $sse) }}
{{- end }}
{{- $problems | toJson }}
{{- end }}

{{/* encryption.kms.topicKeyIds (topic: key id) as PROCESSOR_KMS_TOPIC_KEY_IDS, "topic=key-id,...". */}}
{{- define "ktp.kmsTopicKeyIds" -}}
{{- $pairs := list }}
{{- range $topic, $key := .Values.encryption.kms.topicKeyIds }}
{{- $pairs = append $pairs (printf "%s=%s" $topic $key) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* Encryption settings as env entries. The key ring's directory whenever its Secret is set, whatever
the mode: readers unwrap with every key provider configured, so segments sealed under the key ring
stay readable after a move to kms or none. */}}
{{- define "ktp.encryptionEnv" -}}
{{- $e := .Values.encryption }}
{{- if ne $e.mode "none" }}
- name: PROCESSOR_ENCRYPTION
  value: {{ $e.mode | quote }}
{{- end }}
{{- if $e.keyring.existingSecret }}
- name: PROCESSOR_ENCRYPTION_KEYRING
  value: {{ include "ktp.keyringDir" . | quote }}
{{- end }}
{{- if eq $e.mode "kms" }}
- name: PROCESSOR_KMS_KEY_ID
  value: {{ $e.kms.keyId | quote }}
{{- if $e.kms.topicKeyIds }}
- name: PROCESSOR_KMS_TOPIC_KEY_IDS
  value: {{ include "ktp.kmsTopicKeyIds" . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The key ring's mount (read-only) and volume (the Secret, files mode 0400: with the pods' fsGroup,
readable by the processor's user and group only). */}}
{{- define "ktp.encryptionMounts" -}}
{{- if .Values.encryption.keyring.existingSecret }}
- name: encryption-keyring
  mountPath: {{ include "ktp.keyringDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "ktp.encryptionVolumes" -}}
{{- with .Values.encryption.keyring.existingSecret }}
- name: encryption-keyring
  secret:
    secretName: {{ . }}
    defaultMode: 0400
{{- end }}
{{- end }}

{{/* Volume mounts every processor container gets besides /data and /tmp. */}}
{{- define "ktp.extraMounts" -}}
{{- $tls := .Values.kafka.tls }}
{{- if include "ktp.kafkaTls" . }}
{{- if $tls.caSecret }}
- name: kafka-ca
  mountPath: {{ include "ktp.kafkaCaDir" . }}
  readOnly: true
{{- end }}
{{- if $tls.clientCertSecret }}
- name: kafka-client-cert
  mountPath: {{ include "ktp.kafkaClientDir" . }}
  readOnly: true
{{- end }}
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes every pod gets besides its data and tmp volumes. */}}
{{- define "ktp.extraVolumes" -}}
{{- $tls := .Values.kafka.tls }}
{{- if include "ktp.kafkaTls" . }}
{{- if $tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ $tls.caSecret }}
    defaultMode: 0440
    items:
      - key: {{ $tls.caKey }}
        path: {{ $tls.caKey }}
{{- end }}
{{- if $tls.clientCertSecret }}
- name: kafka-client-cert
  secret:
    secretName: {{ $tls.clientCertSecret }}
    defaultMode: 0440
    items:
      - key: {{ $tls.certKey }}
        path: {{ $tls.certKey }}
      - key: {{ $tls.keyKey }}
        path: {{ $tls.keyKey }}
{{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Scheduling of one component's pods: .values is the component's values (nodeSelector, tolerations,
affinity, topologySpreadConstraints), .selector its selector labels (dict), .defaultAffinity the
affinity used when .values.affinity is empty (may be empty).
*/}}
{{- define "ktp.scheduling" -}}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.affinity }}
affinity:
  {{- toYaml .values.affinity | nindent 2 }}
{{- else if .defaultAffinity }}
affinity:
  {{- .defaultAffinity | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  {{- $constraint := deepCopy . }}
  {{- if not (hasKey $constraint "labelSelector") }}
  {{- $_ := set $constraint "labelSelector" (dict "matchLabels" $.selector) }}
  {{- end }}
  - {{- toYaml $constraint | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Selector labels of a component as a dict (for ktp.scheduling). */}}
{{- define "ktp.selectorDict" -}}
{{- include "ktp.selector" . | fromYaml | toJson }}
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
{{- $a := .root.Values.audit }}
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
{{- if eq $a.mode "cronjob" }}
restartPolicy: Never
{{- end }}
{{- $selector := include "ktp.selectorDict" (dict "root" .root "component" "audit") | fromJson }}
{{- include "ktp.scheduling" (dict "values" $a "selector" $selector "defaultAffinity" "") }}
containers:
  - name: audit
    image: {{ .image }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    args: {{ toJson .args }}
    envFrom:
      {{- include "ktp.envFrom" .root | nindent 6 }}
    env:
      {{- include "ktp.secretEnv" .root | nindent 6 }}
      {{- include "ktp.encryptionEnv" .root | nindent 6 }}
      - name: SPARK_LOCAL_IP
        value: "127.0.0.1"
    resources:
      {{- if $a.resources }}
      {{- toYaml $a.resources | nindent 6 }}
      {{- else }}
      requests:
        cpu: {{ $a.cpuRequest | quote }}
        memory: {{ $a.memory | quote }}
      limits:
        memory: {{ $a.memory | quote }}
      {{- end }}
    securityContext:
      {{- include "ktp.containerSecurityContext" .root | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      - name: data
        mountPath: /data
      {{- include "ktp.extraMounts" .root | nindent 6 }}
      {{- include "ktp.encryptionMounts" .root | nindent 6 }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 4Gi
  - name: data
    {{- if $a.persistence.enabled }}
    persistentVolumeClaim:
      claimName: {{ default (printf "%s-audit" (include "ktp.fullname" .root)) $a.persistence.existingClaim }}
    {{- else }}
    emptyDir:
      sizeLimit: 4Gi
    {{- end }}
  {{- include "ktp.extraVolumes" .root | nindent 2 }}
  {{- include "ktp.encryptionVolumes" .root | nindent 2 }}
{{- end }}

{{/* Pod-level settings of the `helm test` pods. */}}
{{- define "ktp.testPod" -}}
restartPolicy: Never
serviceAccountName: {{ include "ktp.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
securityContext:
  {{- include "ktp.podSecurityContext" . | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 256Mi
  - name: data
    emptyDir:
      sizeLimit: 256Mi
  {{- include "ktp.extraVolumes" . | nindent 2 }}
{{- end }}

{{/* Container-level settings of the `helm test` pods (after command, args, env). */}}
{{- define "ktp.testContainer" -}}
resources:
  requests:
    cpu: 100m
    memory: 256Mi
  limits:
    memory: 512Mi
securityContext:
  {{- include "ktp.containerSecurityContext" . | nindent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  - name: data
    mountPath: /data
  {{- include "ktp.extraMounts" . | nindent 2 }}
{{- end }}

{{/* A label map as "k=v, k=v" (keys sorted), for NOTES.txt. */}}
{{- define "ktp.labelList" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) }}
{{- end }}
{{- join ", " $pairs }}
{{- end }}

{{/* An alert's runbook annotation; the argument is (list $ "<AlertName>"). With
monitoring.prometheusRule.runbookBaseUrl set: runbook_url <base>/<AlertName>.md. Empty (the
default): `runbook`, the kubectl command printing the page from the <fullname>-runbooks ConfigMap
(runbooks-configmap.yaml); jsonpath needs the key's dot escaped: {.data.<AlertName>\.md}. */}}
{{- define "ktp.runbookAnnotation" -}}
{{- $ctx := index . 0 }}{{- $alert := index . 1 }}
{{- $base := trimSuffix "/" $ctx.Values.monitoring.prometheusRule.runbookBaseUrl }}
{{- if $base -}}
runbook_url: {{ printf "%s/%s.md" $base $alert | quote }}
{{- else -}}
runbook: {{ printf "kubectl -n %s get configmap %s-runbooks -o jsonpath='{.data.%s\\.md}'" $ctx.Release.Namespace (include "ktp.fullname" $ctx) $alert | quote }}
{{- end }}
{{- end }}

{{/*
The gateway's node id range (gateway.nodeIds, "first-last") as JSON {"first","last","count"}; the
render stops on a malformed range, more than 100 ids, ports past 65535, a clash with the web port, or
an unknown gateway.archiveReads (the schema refuses these too; this holds with schema validation skipped).
*/}}
{{- define "ktp.gatewayNodeIds" -}}
{{- $g := .Values.gateway }}
{{- $ids := toString $g.nodeIds }}
{{- if not (regexMatch "^[0-9]{1,10}-[0-9]{1,10}$" $ids) }}
{{- fail (printf "gateway.nodeIds is %q: give the upstream brokers' node ids as first-last, e.g. gateway.nodeIds=0-63 (the broker with node id n is reached on gateway.port + 1 + n - first)" $ids) }}
{{- end }}
{{- $parts := splitList "-" $ids }}
{{- $first := atoi (index $parts 0) }}
{{- $last := atoi (index $parts 1) }}
{{- if gt $first $last }}
{{- fail (printf "gateway.nodeIds is %q: first must not exceed last (first-last, e.g. 0-63)" $ids) }}
{{- end }}
{{- $count := add1 (sub $last $first) }}
{{- if gt $count 100 }}
{{- fail (printf "gateway.nodeIds is %q: %d node ids, at most 100 (each opens a port on the pods and the Service); narrow it to the broker ids of your cluster" $ids $count) }}
{{- end }}
{{- $port := int $g.port }}
{{- if gt (add $port $count) 65535 }}
{{- fail (printf "gateway.port %d with gateway.nodeIds %q: the node ports end at %d, past 65535; lower gateway.port" $port $ids (add $port $count)) }}
{{- end }}
{{- $web := int .Values.worker.webPort }}
{{- if and (ge $web $port) (le $web (add $port $count)) }}
{{- fail (printf "worker.webPort %d falls within the gateway's Kafka ports %d-%d (gateway.port, gateway.nodeIds %q): move gateway.port" $web $port (add $port $count) $ids) }}
{{- end }}
{{- if not (has $g.archiveReads (list "below-log-start" "archived")) }}
{{- fail (printf "gateway.archiveReads is %q: use below-log-start (offsets the brokers no longer hold) or archived (every archived offset)" (toString $g.archiveReads)) }}
{{- end }}
{{- dict "first" $first "last" $last "count" $count | toJson }}
{{- end }}

{{/* The gateway's Kafka ports as a JSON list of {"name","port"}: the bootstrap port (kafka), then one
per node id n (node-<n>) at gateway.port + 1 + n - first. Names fit a container port's 15 characters. */}}
{{- define "ktp.gatewayPorts" -}}
{{- $ids := include "ktp.gatewayNodeIds" . | fromJson }}
{{- $port := int .Values.gateway.port }}
{{- $ports := list (dict "name" "kafka" "port" $port) }}
{{- range $i := until (int $ids.count) }}
{{- $ports = append $ports (dict "name" (printf "node-%d" (add (int $ids.first) $i)) "port" (add $port 1 $i)) }}
{{- end }}
{{- toJson $ports }}
{{- end }}

{{/* The host name clients reach the gateway by: gateway.advertisedHost, or the Service's DNS name. */}}
{{- define "ktp.gatewayAdvertisedHost" -}}
{{- default (printf "%s-gateway.%s.svc" (include "ktp.fullname" .) .Release.Namespace) .Values.gateway.advertisedHost }}
{{- end }}
