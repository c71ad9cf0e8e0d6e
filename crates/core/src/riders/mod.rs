//! Riders (docs/compatibility.md, docs/install.md): extra objects deployed beside each
//! child, rendered from `spec.riders[]`, gated by `permittedRiders`, and diffed by a content hash.

mod hash;
mod rules;

pub use hash::rider_hash;
pub use rules::{RiderRules, RuleError, parse_rules};

use crate::json::{describe, str_at};
use crate::template::{TemplateError, TemplateVars, render_json};
use numaplane_api::common::{GroupVersionKind, RiderStatus};
use numaplane_api::keys::annotations;
use numaplane_api::strategy::{PipelineRider, Rider};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// A rider as written in a rollout spec, whichever kind of rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct RiderSpec {
    pub definition: Value,
    /// A change to it triggers a progressive upgrade under the progressive strategy.
    pub progressive: bool,
    /// One instance per pipeline vertex (PipelineRollout only).
    pub per_vertex: bool,
}

impl From<&Rider> for RiderSpec {
    fn from(r: &Rider) -> Self {
        Self {
            definition: r.definition.clone(),
            progressive: r.progressive.unwrap_or(false),
            per_vertex: false,
        }
    }
}

impl From<&PipelineRider> for RiderSpec {
    fn from(r: &PipelineRider) -> Self {
        Self {
            definition: r.definition.clone(),
            progressive: r.progressive.unwrap_or(false),
            per_vertex: r.per_vertex.unwrap_or(false),
        }
    }
}

/// A rider object ready to apply. `object` is templated, named, namespaced and carries the hash
/// annotation; it has **no** ownerReferences (the controller sets exactly one, to the child).
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredRider {
    pub gvk: GroupVersionKind,
    pub name: String,
    pub object: Value,
    pub hash: String,
    pub progressive: bool,
    /// The vertex of a per-vertex rider.
    pub vertex: Option<String>,
    /// The other namespace its definition named (`metadata.namespace`), as (field, namespace):
    /// riders are created in the rollout's namespace only.
    pub namespace_ignored: Option<(String, String)>,
}

/// A rider that exists in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExistingRider {
    pub gvk: GroupVersionKind,
    pub name: String,
    /// Its `numaplane.numaproj.io/hash` annotation.
    pub hash: Option<String>,
}

impl ExistingRider {
    /// Reads a live object; `None` if it lacks apiVersion, kind or name.
    pub fn from_object(obj: &Value) -> Option<Self> {
        let api_version = str_at(obj, &["apiVersion"])?;
        let kind = str_at(obj, &["kind"])?;
        let name = str_at(obj, &["metadata", "name"])?;
        Some(Self {
            gvk: gvk_of(api_version, kind),
            name: name.to_string(),
            hash: str_at(obj, &["metadata", "annotations", annotations::HASH]).map(String::from),
        })
    }
}

/// Why riders could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RiderError {
    /// The reference's words, after the field (`spec.riders[i].definition.kind`).
    #[error("{path}: rider definitions contained unpermitted Kind {}/{kind} (not in permittedRiders)", if group.is_empty() { "core" } else { group })]
    Unpermitted {
        path: String,
        group: String,
        kind: String,
    },
    #[error("{path}: {problem}")]
    InvalidDefinition { path: String, problem: String },
    /// `source` names the field under `path`.
    #[error("{source}")]
    Template { path: String, source: TemplateError },
}

impl RiderError {
    /// Stable short reason for conditions, events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            RiderError::Unpermitted { .. } => "UnpermittedRider",
            RiderError::InvalidDefinition { .. } => "InvalidRider",
            RiderError::Template { source, .. } => source.reason(),
        }
    }
}

/// Metadata fields the API server owns. Dropped from definitions so a definition copied from a
/// live object still applies, and so the hash only covers what the user controls (the
/// reference hashed a live `resourceVersion` and then saw every rider as changed).
const SERVER_METADATA: &[&str] = &[
    "ownerReferences",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Renders the riders of one child. `vars_for(None)` gives the child's template variables,
/// `vars_for(Some(vertex))` those of a per-vertex instance; `vertices` are the vertex names of
/// the *desired* spec. Names are `<definition name>-<child>` or `<definition name>-<child>-<vertex>`.
pub fn desired_riders(
    riders: &[RiderSpec],
    child_name: &str,
    namespace: &str,
    vars_for: impl Fn(Option<&str>) -> TemplateVars,
    vertices: &[String],
    rules: &RiderRules,
) -> Result<Vec<DesiredRider>, RiderError> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, spec) in riders.iter().enumerate() {
        let path = format!("spec.riders[{i}].definition");
        check_definition(&spec.definition, &path, "")?;
        let instances: Vec<Option<&str>> = if spec.per_vertex {
            vertices.iter().map(|v| Some(v.as_str())).collect()
        } else {
            vec![None]
        };
        for vertex in instances {
            let rider = render_one(
                spec,
                &path,
                child_name,
                namespace,
                vertex,
                &vars_for(vertex),
                rules,
            )?;
            if !seen.insert((rider.gvk.clone(), rider.name.clone())) {
                return Err(RiderError::InvalidDefinition {
                    path,
                    problem: format!(
                        "renders {} {:?}, which an earlier rider already renders",
                        rider.gvk.kind, rider.name
                    ),
                });
            }
            out.push(rider);
        }
    }
    Ok(out)
}

/// Requires non-empty `apiVersion`, `kind`, `metadata.name`; returns them.
fn check_definition<'a>(
    def: &'a Value,
    path: &str,
    when: &str,
) -> Result<(&'a str, &'a str, &'a str), RiderError> {
    let invalid = |field: &str, problem: String| RiderError::InvalidDefinition {
        path: if field.is_empty() {
            path.to_string()
        } else {
            format!("{path}.{field}")
        },
        problem,
    };
    if let Some(why) = numaplane_api::free_form::unreadable(def) {
        return Err(invalid("", format!("cannot be read: {why}")));
    }
    if let Err(e) = crate::child::validate_applyable(def, path) {
        return Err(RiderError::InvalidDefinition {
            path: e.path,
            problem: e.problem,
        });
    }
    if !def.is_object() {
        return Err(invalid(
            "",
            format!("expected object, got {}", describe(def)),
        ));
    }
    let field = |field: &str, keys: &[&str]| -> Result<&'a str, RiderError> {
        let v = keys.iter().try_fold(def, |cur, k| cur.get(*k));
        match v {
            None | Some(Value::Null) => {
                Err(invalid(field, format!("required string is missing{when}")))
            }
            Some(Value::String(s)) if s.is_empty() => {
                Err(invalid(field, format!("must not be empty{when}")))
            }
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(other) => Err(invalid(
                field,
                format!("expected string, got {}", describe(other)),
            )),
        }
    };
    Ok((
        field("apiVersion", &["apiVersion"])?,
        field("kind", &["kind"])?,
        field("metadata.name", &["metadata", "name"])?,
    ))
}

fn render_one(
    spec: &RiderSpec,
    path: &str,
    child_name: &str,
    namespace: &str,
    vertex: Option<&str>,
    vars: &TemplateVars,
    rules: &RiderRules,
) -> Result<DesiredRider, RiderError> {
    let mut object = render_json(&spec.definition, vars).map_err(|e| RiderError::Template {
        path: path.to_string(),
        source: e.under(path),
    })?;
    let (api_version, kind, def_name) = check_definition(&object, path, " after templating")?;
    // The name goes into request paths: what no object name may hold is refused here, naming
    // the field, instead of failing to build the request.
    if let Some(c) = def_name
        .chars()
        .find(|c| !c.is_ascii_graphic() || matches!(c, '/' | '%' | '?' | '#'))
    {
        return Err(RiderError::InvalidDefinition {
            path: format!("{path}.metadata.name"),
            problem: format!("{c:?} is not allowed in an object name"),
        });
    }
    let gvk = gvk_of(api_version, kind);
    if !rules.permits(&gvk.group, &gvk.kind) {
        return Err(RiderError::Unpermitted {
            path: format!("{path}.kind"),
            group: gvk.group,
            kind: gvk.kind,
        });
    }
    let name = match vertex {
        Some(v) => format!("{def_name}-{child_name}-{v}"),
        None => format!("{def_name}-{child_name}"),
    };

    let metadata = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| RiderError::InvalidDefinition {
            path: format!("{path}.metadata"),
            problem: "expected object".into(),
        })?;
    let namespace_ignored = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty() && *n != namespace)
        .map(|n| (format!("{path}.metadata.namespace"), n.to_string()));
    metadata.insert("name".into(), Value::String(name.clone()));
    metadata.insert("namespace".into(), Value::String(namespace.to_string()));
    for key in SERVER_METADATA {
        metadata.remove(*key);
    }
    if let Some(Value::Object(ann)) = metadata.get_mut("annotations") {
        ann.remove(annotations::HASH);
    }
    if let Some(obj) = object.as_object_mut() {
        obj.remove("status");
    }

    let hash = rider_hash(&object);
    set_hash_annotation(&mut object, &hash);
    Ok(DesiredRider {
        gvk,
        name,
        object,
        hash,
        progressive: spec.progressive,
        vertex: vertex.map(String::from),
        namespace_ignored,
    })
}

fn set_hash_annotation(object: &mut Value, hash: &str) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let ann = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !ann.is_object() {
        *ann = Value::Object(Map::new());
    }
    if let Some(ann) = ann.as_object_mut() {
        ann.insert(annotations::HASH.into(), Value::String(hash.to_string()));
    }
}

/// Splits `apiVersion` into group and version (`v1` is the core group).
pub fn gvk_of(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
    }
}

/// HorizontalPodAutoscaler riders are never created for trial children and make pipeline
/// assessment unsupported.
pub fn is_hpa(gvk: &GroupVersionKind) -> bool {
    gvk.group == "autoscaling" && gvk.kind == "HorizontalPodAutoscaler"
}

/// The riders a trial child gets: all but HPAs.
pub fn without_hpa(riders: Vec<DesiredRider>) -> Vec<DesiredRider> {
    riders.into_iter().filter(|r| !is_hpa(&r.gvk)).collect()
}

/// Changes needed to go from the existing riders to the desired ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RiderDiff {
    pub add: Vec<DesiredRider>,
    pub modify: Vec<DesiredRider>,
    pub delete: Vec<ExistingRider>,
}

impl RiderDiff {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.modify.is_empty() && self.delete.is_empty()
    }

    /// Whether a rider marked `progressive` was modified. Additions and deletions never require
    /// a progressive upgrade; whether the namespace strategy is progressive is the caller's call.
    pub fn has_progressive_modification(&self) -> bool {
        self.modify.iter().any(|r| r.progressive)
    }
}

/// Diffs by group/version/kind + name. A missing or different hash annotation is a modification.
pub fn diff_riders(desired: &[DesiredRider], existing: &[ExistingRider]) -> RiderDiff {
    let existing_by_key: BTreeMap<_, _> = existing.iter().map(|e| ((&e.gvk, &e.name), e)).collect();
    let desired_keys: BTreeSet<_> = desired.iter().map(|d| (&d.gvk, &d.name)).collect();
    let mut diff = RiderDiff::default();
    for d in desired {
        match existing_by_key.get(&(&d.gvk, &d.name)) {
            None => diff.add.push(d.clone()),
            Some(e) if e.hash.as_deref() != Some(d.hash.as_str()) => diff.modify.push(d.clone()),
            Some(_) => {}
        }
    }
    diff.delete = existing
        .iter()
        .filter(|e| !desired_keys.contains(&(&e.gvk, &e.name)))
        .cloned()
        .collect();
    diff
}

/// `status.riders` entries for the given riders.
pub fn rider_status(desired: &[DesiredRider]) -> Vec<RiderStatus> {
    desired
        .iter()
        .map(|d| RiderStatus {
            group_version_kind: d.gvk.clone(),
            name: d.name.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests;
