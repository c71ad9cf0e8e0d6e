{{/*
numaplane.load: one object of the shipped manifests (files/ links to config/), as YAML: moved
to the release namespace when it is namespaced, with .Values.commonLabels added. Callers parse
it back (fromYaml) to change what the values say, so the defaults render config/install.yaml.
*/}}
{{- define "numaplane.load" -}}
{{- $text := .ctx.Files.Get .path -}}
{{- if not $text }}{{ fail (printf "the chart has no %s" .path) }}{{ end -}}
{{- $obj := fromYaml $text -}}
{{- if hasKey $obj "Error" }}{{ fail (printf "%s: %s" .path $obj.Error) }}{{ end -}}
{{- if $obj.metadata.namespace }}{{ $_ := set $obj.metadata "namespace" .ctx.Release.Namespace }}{{ end -}}
{{- with .ctx.Values.commonLabels }}
{{- $_ := set $obj.metadata "labels" (merge (deepCopy .) ($obj.metadata.labels | default dict)) -}}
{{- end -}}
{{- toYaml $obj -}}
{{- end -}}

{{/* numaplane.subjects: a binding whose ServiceAccount subjects are in the release namespace. */}}
{{- define "numaplane.binding" -}}
{{- $obj := include "numaplane.load" . | fromYaml -}}
{{- range $obj.subjects }}{{ $_ := set . "namespace" $.ctx.Release.Namespace }}{{ end -}}
{{- if .namespace }}{{ $_ := set $obj.metadata "namespace" .namespace }}{{ end -}}
{{- toYaml $obj -}}
{{- end -}}

{{/* numaplane.image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "numaplane.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
