//! Rendering a Numaflow controller definition for one NumaflowController: Go-template-style
//! `{{ .InstanceID }}` and `{{ .InstanceSuffix }}`, filled into the parsed strings (never into
//! the YAML text), multi-document split, the kinds checked against `includedResources`, then
//! the metadata Numaplane owns on every object (namespace, tracking label, controller owner).
//! Pure: no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use numaplane_api::keys::{annotations, labels};
use numaplane_core::riders::RiderRules;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// Base name of the Numaflow controller Deployment.
pub const DEPLOYMENT_BASE_NAME: &str = "numaflow-controller";

/// Why a definition could not be rendered. Messages name the line or document at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error(
        "line {line}: unsupported template action {action:?} (only {{{{ .InstanceID }}}} and {{{{ .InstanceSuffix }}}} are available)"
    )]
    UnsupportedAction { line: usize, action: String },
    #[error("line {line}: \"{{{{\" has no closing \"}}}}\"")]
    Unterminated { line: usize },
    #[error("not valid YAML: {0}")]
    Yaml(String),
    #[error("document {doc}: {problem}")]
    InvalidObject { doc: usize, problem: String },
    #[error("{kind} {name} is defined twice")]
    Duplicate { kind: String, name: String },
    #[error(
        "document {doc}: {kind} {name:?} (API group {}) is not a kind includedResources allows; nothing of this definition is applied",
        if group.is_empty() { "core" } else { group }
    )]
    KindNotAllowed {
        doc: usize,
        group: String,
        kind: String,
        name: String,
    },
    #[error("the definition contains {0:?}, which Numaplane reserves for its templating")]
    ReservedText(String),
}

/// What an object is identified by across versions of a definition (the API version may move).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// One object of a rendered definition, ready for server-side apply.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedObject {
    pub api_version: String,
    pub key: ObjKey,
    pub body: Value,
}

impl RenderedObject {
    /// The version part of `apiVersion`.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, v)| v)
    }
}

/// The NumaflowController the objects are rendered for.
#[derive(Clone, Debug)]
pub struct Target<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub instance_id: Option<&'a str>,
    /// Controller reference to the NumaflowController.
    pub owner: OwnerReference,
    /// The kinds a definition may hold (`includedResources`).
    pub allowed: &'a RiderRules,
}

/// `-<id>` when the instance ID is not blank, else empty (as the reference computes it).
pub fn instance_suffix(instance_id: Option<&str>) -> String {
    match instance_id {
        Some(id) if !id.trim().is_empty() => format!("-{id}"),
        _ => String::new(),
    }
}

/// Name of the Deployment whose health is the NumaflowController's.
pub fn deployment_name(instance_id: Option<&str>) -> String {
    format!("{DEPLOYMENT_BASE_NAME}{}", instance_suffix(instance_id))
}

/// What stands for each template field in the definition text until it has been parsed: plain
/// YAML scalar characters, so a field parses as part of whatever string it sits in. The values
/// are put into the parsed strings, never into the text: whatever an instance ID holds, it can
/// only ever be part of a string value, never YAML structure (another document, another key).
const ID_MARK: &str = "numaplane_instance_id_b3f9e1";
const SUFFIX_MARK: &str = "numaplane_instance_suffix_b3f9e1";

/// Replaces the two template fields by their marks. Accepts what Go's text/template accepts for
/// them: optional spaces and `{{-`/`-}}` trim markers (which trim the definition's own text). Any
/// other action is an error, as in the reference (whose template engine knows no other field).
fn mark_fields(manifest: &str) -> Result<String, RenderError> {
    if let Some(mark) = [ID_MARK, SUFFIX_MARK]
        .into_iter()
        .find(|m| manifest.contains(m))
    {
        return Err(RenderError::ReservedText(mark.to_string()));
    }
    let line_of = |offset: usize| manifest[..offset].matches('\n').count() + 1;
    let mut out = String::with_capacity(manifest.len());
    let mut rest = manifest;
    while let Some(start) = rest.find("{{") {
        let offset = manifest.len() - rest.len() + start;
        let inner_start = &rest[start + 2..];
        let Some(end) = inner_start.find("}}") else {
            return Err(RenderError::Unterminated {
                line: line_of(offset),
            });
        };
        let mut inner = &inner_start[..end];
        let mut before = &rest[..start];
        // Go requires a space after `{{-` and before `-}}` for them to be trim markers.
        let trim_left = inner.starts_with("- ");
        if trim_left {
            inner = &inner[1..];
            before = before.trim_end();
        }
        let trim_right = inner.ends_with(" -");
        if trim_right {
            inner = &inner[..inner.len() - 1];
        }
        let mark = match inner.trim() {
            ".InstanceID" => ID_MARK,
            ".InstanceSuffix" => SUFFIX_MARK,
            _ => {
                return Err(RenderError::UnsupportedAction {
                    line: line_of(offset),
                    action: format!("{{{{{}}}}}", &inner_start[..end]),
                });
            }
        };
        out.push_str(before);
        out.push_str(mark);
        rest = &inner_start[end + 2..];
        if trim_right {
            rest = rest.trim_start();
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Puts the values of the template fields into every string (mapping keys included) of a
/// parsed document.
fn fill(v: Value, id: &str, suffix: &str) -> Value {
    let put = |s: String| {
        if s.contains(ID_MARK) || s.contains(SUFFIX_MARK) {
            s.replace(ID_MARK, id).replace(SUFFIX_MARK, suffix)
        } else {
            s
        }
    };
    match v {
        Value::String(s) => Value::String(put(s)),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|i| fill(i, id, suffix)).collect())
        }
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (put(k), fill(v, id, suffix)))
                .collect(),
        ),
        other => other,
    }
}

/// Renders a definition into the objects to apply, in definition order: template fields marked,
/// split into documents (empty and `null` documents skipped) and parsed, the fields' values put
/// into the parsed strings, then each object given the NumaflowController's namespace, the
/// `tracking-id` label and a controller owner reference. `status` is dropped. A kind outside
/// `target.allowed` refuses the whole definition.
pub fn render(manifest: &str, target: &Target) -> Result<Vec<RenderedObject>, RenderError> {
    let text = mark_fields(manifest)?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| RenderError::Yaml(e.to_string()))?;
    let id = target.instance_id.unwrap_or_default();
    let suffix = instance_suffix(target.instance_id);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let obj = prepare(fill(doc, id, &suffix), target).map_err(|problem| {
            RenderError::InvalidObject {
                doc: i + 1,
                problem,
            }
        })?;
        if !target.allowed.permits(&obj.key.group, &obj.key.kind) {
            return Err(RenderError::KindNotAllowed {
                doc: i + 1,
                group: obj.key.group,
                kind: obj.key.kind,
                name: obj.key.name,
            });
        }
        if !seen.insert(obj.key.clone()) {
            return Err(RenderError::Duplicate {
                kind: obj.key.kind,
                name: obj.key.name,
            });
        }
        out.push(obj);
    }
    Ok(out)
}

fn prepare(doc: Value, target: &Target) -> Result<RenderedObject, String> {
    let Value::Object(mut obj) = doc else {
        return Err("expected a mapping (a Kubernetes object)".into());
    };
    let field = |obj: &Map<String, Value>, name: &str| -> Result<String, String> {
        match obj.get(name) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            _ => Err(format!("{name} is missing or not a string")),
        }
    };
    let api_version = field(&obj, "apiVersion")?;
    let kind = field(&obj, "kind")?;
    obj.remove("status");
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("metadata is not a mapping")?;
    let name = match meta.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(format!("{kind}: metadata.name is missing or not a string")),
    };
    meta.insert("namespace".into(), target.namespace.into());
    let labels = meta
        .entry("labels")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| format!("{kind} {name}: metadata.labels is not a mapping"))?;
    labels.insert(labels::TRACKING_ID.into(), target.name.into());
    let owner = serde_json::to_value(&target.owner).map_err(|e| e.to_string())?;
    let refs = meta
        .entry("ownerReferences")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or_else(|| format!("{kind} {name}: metadata.ownerReferences is not a list"))?;
    if !refs
        .iter()
        .any(|r| r.get("uid").and_then(Value::as_str) == Some(target.owner.uid.as_str()))
    {
        refs.push(owner);
    }
    let group = api_version
        .rsplit_once('/')
        .map_or("", |(g, _)| g)
        .to_string();
    Ok(RenderedObject {
        api_version,
        key: ObjKey { group, kind, name },
        body: stamped(obj),
    })
}

/// The object with annotation `numaplane.numaproj.io/hash` set to the hash of the rest of it
/// (as riders carry theirs): a live object that contains the rendered one, stamp included,
/// holds everything an apply would set and nothing an earlier rendering set that this one
/// dropped, so a pass with nothing remembered (after a restart) need not re-apply it.
fn stamped(mut obj: Map<String, Value>) -> Value {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        && let Some(Value::Object(a)) = meta.get_mut("annotations")
    {
        a.remove(annotations::HASH);
        if a.is_empty() {
            meta.remove("annotations");
        }
    }
    let hash = numaplane_core::riders::rider_hash(&Value::Object(obj.clone()));
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if !ann.is_object() {
            *ann = json!({});
        }
        if let Some(ann) = ann.as_object_mut() {
            ann.insert(annotations::HASH.into(), Value::String(hash));
        }
    }
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "numaplane.numaproj.io/v1alpha1".into(),
            kind: "NumaflowController".into(),
            name: "numaflow-controller".into(),
            uid: "uid-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// The shipped `includedResources` (the default).
    static ALLOWED: std::sync::LazyLock<RiderRules> = std::sync::LazyLock::new(|| {
        numaplane_core::config::ControllerConfig::default().included_resources
    });

    fn target(id: Option<&str>) -> Target<'_> {
        Target {
            name: "numaflow-controller",
            namespace: "team-a",
            instance_id: id,
            owner: owner(),
            allowed: &ALLOWED,
        }
    }

    /// One YAML document templated as `render` does it.
    fn templated(m: &str, id: Option<&str>) -> Result<Value, RenderError> {
        let doc: Value = serde_saphyr::from_str(&mark_fields(m)?)
            .map_err(|e| RenderError::Yaml(e.to_string()))?;
        Ok(fill(doc, id.unwrap_or_default(), &instance_suffix(id)))
    }

    #[test]
    fn fills_fields_with_and_without_spaces() {
        let m = "a: {{.InstanceID}}\nb: x{{ .InstanceSuffix }}\nc: '{{  .InstanceID  }}'";
        assert_eq!(
            templated(m, Some("abc")).unwrap(),
            json!({"a": "abc", "b": "x-abc", "c": "abc"})
        );
        assert_eq!(
            templated(m, None).unwrap(),
            json!({"a": "", "b": "x", "c": ""})
        );
        // A blank ID gives no suffix but is inserted as given.
        assert_eq!(
            templated("v: '{{.InstanceSuffix}}|{{.InstanceID}}'", Some(" ")).unwrap(),
            json!({"v": "| "})
        );
        // Mapping keys too.
        assert_eq!(
            templated("'k{{ .InstanceSuffix }}': 1", Some("7")).unwrap(),
            json!({"k-7": 1})
        );
    }

    #[test]
    fn honours_trim_markers() {
        assert_eq!(
            templated("a:  {{- .InstanceID -}}  \nb", Some("x")).unwrap(),
            json!("a:xb")
        );
        // `{{-x` without a space is not a trim marker, so it is an unknown action.
        assert!(mark_fields("{{-.InstanceID}}").is_err());
    }

    #[test]
    fn rejects_other_actions_with_their_line() {
        let err = mark_fields("a: 1\nb: {{ .Invalid }}").unwrap_err();
        assert_eq!(
            err,
            RenderError::UnsupportedAction {
                line: 2,
                action: "{{ .Invalid }}".into()
            }
        );
        assert!(err.to_string().contains("line 2"));
        assert_eq!(
            mark_fields("a\n\nb: {{ .InstanceID").unwrap_err(),
            RenderError::Unterminated { line: 3 }
        );
    }

    /// An ID that is YAML structure stays a string value: it can't add a document, a key or an
    /// object to the administrator's definition (the CRD refuses such an ID; this is what
    /// rendering does with one stored before the CRD did).
    #[test]
    fn an_instance_id_cannot_inject_objects() {
        let injected = "x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: injected\n---\n";
        let objs = render(MANIFEST, &target(Some(injected))).unwrap();
        assert_eq!(objs.len(), 2, "{objs:#?}");
        assert_eq!(
            objs.iter().map(|o| o.key.kind.as_str()).collect::<Vec<_>>(),
            ["ConfigMap", "Deployment"]
        );
        assert_eq!(objs[0].body["data"]["instance"], injected);
        assert_eq!(
            objs[0].body["metadata"]["labels"]["app.kubernetes.io/instance"],
            injected
        );
        let quote = "a\"\nb: c";
        let objs = render(MANIFEST, &target(Some(quote))).unwrap();
        assert_eq!(objs[0].body["data"], json!({"instance": quote}));
    }

    #[test]
    fn a_definition_holding_the_marks_is_refused() {
        let crafted = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\ndata: {{x: {ID_MARK}}}\n"
        );
        assert_eq!(
            render(&crafted, &target(Some("id"))).unwrap_err(),
            RenderError::ReservedText(ID_MARK.into())
        );
    }

    #[test]
    fn kinds_outside_included_resources_refuse_the_definition() {
        let crb = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: take-over}\n";
        let err = render(crb, &target(None)).unwrap_err();
        assert_eq!(
            err,
            RenderError::KindNotAllowed {
                doc: 2,
                group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRoleBinding".into(),
                name: "take-over".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "document 2: ClusterRoleBinding \"take-over\" (API group rbac.authorization.k8s.io) is not a kind includedResources allows; nothing of this definition is applied"
        );
        // A rule names a group and kind exactly: core Secrets are refused when not listed.
        let no_secrets = numaplane_core::riders::parse_rules("group=,kind=ConfigMap").unwrap();
        let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n";
        let t = Target {
            allowed: &no_secrets,
            ..target(None)
        };
        assert!(matches!(
            render(secret, &t),
            Err(RenderError::KindNotAllowed { doc: 1, ref kind, .. }) if kind == "Secret"
        ));
        let nothing = RiderRules::default();
        let t = Target {
            allowed: &nothing,
            ..target(None)
        };
        assert!(render("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", &t).is_err());
    }

    #[test]
    fn suffix_and_deployment_name() {
        assert_eq!(instance_suffix(None), "");
        assert_eq!(instance_suffix(Some("")), "");
        assert_eq!(instance_suffix(Some("123")), "-123");
        assert_eq!(deployment_name(None), "numaflow-controller");
        assert_eq!(deployment_name(Some("a")), "numaflow-controller-a");
    }

    const MANIFEST: &str = r#"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg{{ .InstanceSuffix }}
  namespace: elsewhere
  labels:
    app.kubernetes.io/instance: '{{ .InstanceID }}'
data:
  instance: "{{ .InstanceID }}"
---
---
null
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: numaflow-controller{{ .InstanceSuffix }}
  ownerReferences:
    - {apiVersion: v1, kind: ConfigMap, name: other, uid: uid-other}
    - {apiVersion: x/v1, kind: Y, name: same, uid: uid-1}
spec:
  replicas: 1
status:
  replicas: 3
"#;

    #[test]
    fn renders_objects_with_namespace_owner_and_label() {
        let objs = render(MANIFEST, &target(Some("7"))).unwrap();
        assert_eq!(objs.len(), 2, "empty and null documents are skipped");
        let cm = &objs[0];
        assert_eq!(
            cm.key,
            ObjKey {
                group: "".into(),
                kind: "ConfigMap".into(),
                name: "cfg-7".into()
            }
        );
        assert_eq!(cm.version(), "v1");
        // Stamped with the hash of the rest of the object.
        let mut body = cm.body.clone();
        let stamp = body["metadata"]
            .as_object_mut()
            .and_then(|m| m.remove("annotations"))
            .unwrap();
        assert_eq!(
            stamp,
            json!({annotations::HASH: numaplane_core::riders::rider_hash(&body)})
        );
        assert_eq!(
            body,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "cfg-7",
                    "namespace": "team-a",
                    "labels": {
                        "app.kubernetes.io/instance": "7",
                        "numaplane.numaproj.io/tracking-id": "numaflow-controller"
                    },
                    "ownerReferences": [{
                        "apiVersion": "numaplane.numaproj.io/v1alpha1",
                        "kind": "NumaflowController",
                        "name": "numaflow-controller",
                        "uid": "uid-1",
                        "controller": true,
                        "blockOwnerDeletion": true
                    }]
                },
                "data": {"instance": "7"}
            })
        );
        let d = &objs[1];
        assert_eq!(d.key.group, "apps");
        assert_eq!(d.key.name, "numaflow-controller-7");
        assert_eq!(d.version(), "v1");
        assert!(d.body.get("status").is_none(), "status is never applied");
        // An existing reference with our UID is not duplicated; others are kept.
        let refs = d.body["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0]["uid"], "uid-other");
        assert_eq!(refs[1]["uid"], "uid-1");
        assert_eq!(d.body["spec"]["replicas"], 1);
    }

    #[test]
    fn the_stamp_follows_the_rendering() {
        let stamp = |objs: &[RenderedObject]| objs[0].body["metadata"]["annotations"].clone();
        let seven = render(MANIFEST, &target(Some("7"))).unwrap();
        assert_eq!(
            stamp(&seven),
            stamp(&render(MANIFEST, &target(Some("7"))).unwrap())
        );
        assert_ne!(
            stamp(&seven),
            stamp(&render(MANIFEST, &target(Some("8"))).unwrap())
        );
        // A stamp in the definition itself is replaced, not hashed.
        let stamped = MANIFEST.replacen(
            "kind: ConfigMap\nmetadata:\n",
            "kind: ConfigMap\nmetadata:\n  annotations:\n    numaplane.numaproj.io/hash: old\n",
            1,
        );
        assert_ne!(stamped, MANIFEST);
        assert_eq!(
            stamp(&render(&stamped, &target(Some("7"))).unwrap()),
            stamp(&seven)
        );
    }

    #[test]
    fn renders_without_instance_id() {
        let objs = render(MANIFEST, &target(None)).unwrap();
        assert_eq!(objs[0].key.name, "cfg");
        assert_eq!(objs[0].body["data"]["instance"], "");
        assert_eq!(objs[1].key.name, "numaflow-controller");
    }

    #[test]
    fn names_the_bad_document() {
        let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: Secret\nmetadata: {name: b}\n";
        let err = render(bad, &target(None)).unwrap_err();
        assert_eq!(
            err,
            RenderError::InvalidObject {
                doc: 2,
                problem: "apiVersion is missing or not a string".into()
            }
        );
        let noname = "apiVersion: v1\nkind: Secret\nmetadata: {}\n";
        assert!(
            render(noname, &target(None))
                .unwrap_err()
                .to_string()
                .contains("Secret: metadata.name is missing")
        );
        let twice = "apiVersion: v1\nkind: Secret\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: a}\n";
        assert_eq!(
            render(twice, &target(None)).unwrap_err(),
            RenderError::Duplicate {
                kind: "Secret".into(),
                name: "a".into()
            }
        );
        assert!(matches!(
            render("a: [", &target(None)),
            Err(RenderError::Yaml(_))
        ));
        assert!(render("- 1\n- 2\n", &target(None)).is_err());
    }

    #[test]
    fn renders_the_shipped_fixture() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/numaflow-controller-definitions/controller_def_1.8.1.yaml"
        );
        let cm: k8s_openapi::api::core::v1::ConfigMap =
            serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let defs = numaplane_core::config::parse_controller_definitions(&cm.data.unwrap()).unwrap();
        let (version, spec) = &defs[0];
        assert_eq!(version, "1.8.1");
        let objs = render(spec, &target(Some("x"))).unwrap();
        let count = |k: &str| objs.iter().filter(|o| o.key.kind == k).count();
        assert_eq!(
            (
                count("ServiceAccount"),
                count("Role"),
                count("RoleBinding"),
                count("ConfigMap"),
                count("Secret"),
                count("Service"),
                count("Deployment")
            ),
            (3, 4, 4, 6, 2, 2, 3)
        );
        let d = objs
            .iter()
            .find(|o| o.key.name == "numaflow-controller-x")
            .unwrap();
        assert_eq!(
            d.body.pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("quay.io/numaproj/numaflow:v1.8.1"))
        );
        let cfg = objs
            .iter()
            .find(|o| o.key.name == "numaflow-controller-config-x")
            .unwrap();
        assert!(
            cfg.body["data"]["controller-config.yaml"]
                .as_str()
                .unwrap()
                .contains("instance: \"x\"")
        );
        assert!(
            objs.iter()
                .all(|o| o.body["metadata"]["namespace"] == "team-a")
        );
    }
}
