//! Splitting pods between the promoted and the trial child (docs/strategies.md,
//! docs/strategies.md): what is saved before anything is scaled, the trial's scale,
//! the promoted child's scale-down, and the restore after a failure.
//!
//! Every function takes the child spec as the user's JSON and returns new JSON; nothing else
//! in the spec is touched. Patches are JSON merge patches (RFC 7386) on the whole child object.

use crate::json::describe;
use numaplane_api::Kind;
use numaplane_api::progressive::{ScaleDefinition, ScaleValues, VertexScaleDefinition};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// A `scale` that can't be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct ScaleError {
    pub path: String,
    pub problem: String,
}

impl ScaleError {
    pub fn reason(&self) -> &'static str {
        "InvalidScale"
    }

    fn at(path: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            problem: problem.into(),
        }
    }
}

/// `floor(initial/2)` stays on the promoted child; the trial gets the rest, at least 1.
/// Returns `(scale_to, trial)`: 4 → (2,2), 5 → (2,3), 1 → (0,1), 0 → (0,1).
pub fn split(initial: i64) -> (i64, i64) {
    let initial = initial.max(0);
    let scale_to = initial / 2;
    (scale_to, (initial - scale_to).max(1))
}

/// The reference's `originalScaleMinMax`: `{"disabled":..,"max":..,"min":..}` with keys in that
/// order and absent values as `null`, or the literal `null` when there is no `scale`. Other
/// scale fields are dropped. A non-integer min/max or non-bool disabled is an error, not a
/// silently lost setting (it would be "restored" as absent).
pub fn scale_min_max_json(scale: Option<&Value>, path: &str) -> Result<String, ScaleError> {
    let Some(scale) = scale.filter(|s| !s.is_null()) else {
        return Ok("null".to_string());
    };
    let Some(obj) = scale.as_object() else {
        return Err(ScaleError::at(
            path,
            format!("expected an object, got {}", describe(scale)),
        ));
    };
    let int = |k: &str| -> Result<Value, ScaleError> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(Value::Null),
            Some(v) if v.as_i64().is_some() => Ok(v.clone()),
            Some(v) => Err(ScaleError::at(
                format!("{path}.{k}"),
                format!("expected integer, got {}", describe(v)),
            )),
        }
    };
    let disabled = match obj.get("disabled") {
        None | Some(Value::Null) => Value::Null,
        Some(v @ Value::Bool(_)) => v.clone(),
        Some(v) => {
            return Err(ScaleError::at(
                format!("{path}.disabled"),
                format!("expected bool, got {}", describe(v)),
            ));
        }
    };
    // serde_json's map is sorted, which gives exactly the reference's key order.
    let mut out = Map::new();
    out.insert("disabled".into(), disabled);
    out.insert("max".into(), int("max")?);
    out.insert("min".into(), int("min")?);
    Ok(Value::Object(out).to_string())
}

/// The whole `scale` as JSON (`originalScaleDefinition(s)`), `null` when absent.
fn scale_definition_json(scale: Option<&Value>) -> String {
    scale.cloned().unwrap_or(Value::Null).to_string()
}

fn vertices(spec: &Value) -> &[Value] {
    spec.get("vertices")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn vertex_name(v: &Value) -> Option<&str> {
    v.get("name").and_then(Value::as_str)
}

/// What the promoted child ran before the upgrade, for [`promoted_scale_values`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromotedPods {
    /// Pods per vertex name (Pipeline) or under the MonoVertex's name; missing counts as 0.
    pub pods: BTreeMap<String, i64>,
    /// The `autoscaling/v2` HPA owned by the promoted MonoVertex, if any (as read).
    pub hpa: Option<Value>,
}

/// `promoted…Status.scaleValues`: per vertex (Pipeline) or keyed by the promoted MonoVertex's
/// name. Empty for InterStepBufferService, which is never rescaled.
pub fn promoted_scale_values(
    kind: Kind,
    promoted_name: &str,
    promoted_spec: &Value,
    observed: &PromotedPods,
) -> Result<BTreeMap<String, ScaleValues>, ScaleError> {
    let count = |k: &str| observed.pods.get(k).copied().unwrap_or(0).max(0);
    let values = |initial: i64, scale: Option<&Value>, path: &str, hpa: Option<Value>| {
        let (scale_to, _) = split(initial);
        Ok::<_, ScaleError>(ScaleValues {
            original_scale_min_max: scale_min_max_json(scale, path)?,
            original_hpa_definition: hpa,
            scale_to,
            initial,
        })
    };
    let mut out = BTreeMap::new();
    match kind {
        Kind::IsbService | Kind::NumaflowController => {}
        Kind::MonoVertex => {
            let hpa = observed.hpa.as_ref().map(stripped_hpa);
            out.insert(
                promoted_name.to_string(),
                values(
                    count(promoted_name),
                    promoted_spec.get("scale"),
                    "spec.scale",
                    hpa,
                )?,
            );
        }
        Kind::Pipeline => {
            for (i, v) in vertices(promoted_spec).iter().enumerate() {
                let Some(name) = vertex_name(v) else { continue };
                let path = format!("spec.vertices[{i}].scale");
                out.insert(
                    name.to_string(),
                    values(count(name), v.get("scale"), &path, None)?,
                );
            }
        }
    }
    Ok(out)
}

/// The HPA as it can be re-created: without status and server-set metadata.
pub fn stripped_hpa(hpa: &Value) -> Value {
    let mut hpa = hpa.clone();
    if let Some(obj) = hpa.as_object_mut() {
        obj.remove("status");
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "generation",
                "managedFields",
            ] {
                meta.remove(k);
            }
        }
    }
    hpa
}

/// The trial's own scale, saved in the upgrading status before it is rescaled (so the trial can
/// be compared with the rollout later).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum TrialScaleRecord {
    #[default]
    None,
    MonoVertex {
        /// `originalScaleMinMax`.
        min_max: String,
        /// `originalScaleDefinition`.
        definition: String,
    },
    Pipeline {
        /// `originalScaleMinMax`, one per vertex in spec order.
        min_max: Vec<VertexScaleDefinition>,
        /// `originalScaleDefinitions`, one per vertex in spec order.
        definitions: Vec<String>,
    },
}

/// What [`TrialScaleRecord`] saves for a trial built from `desired_spec`.
pub fn trial_scale_record(
    kind: Kind,
    desired_spec: &Value,
) -> Result<TrialScaleRecord, ScaleError> {
    Ok(match kind {
        Kind::IsbService | Kind::NumaflowController => TrialScaleRecord::None,
        Kind::MonoVertex => TrialScaleRecord::MonoVertex {
            min_max: scale_min_max_json(desired_spec.get("scale"), "spec.scale")?,
            definition: scale_definition_json(desired_spec.get("scale")),
        },
        Kind::Pipeline => {
            let vs = vertices(desired_spec);
            let mut min_max = Vec::with_capacity(vs.len());
            for (i, v) in vs.iter().enumerate() {
                let path = format!("spec.vertices[{i}].scale");
                // Validate with the same reader as the promoted side.
                scale_min_max_json(v.get("scale"), &path)?;
                min_max.push(VertexScaleDefinition {
                    vertex_name: vertex_name(v).unwrap_or_default().to_string(),
                    scale_definition: v.get("scale").filter(|s| s.is_object()).map(|s| {
                        ScaleDefinition {
                            min: s.get("min").and_then(Value::as_i64),
                            max: s.get("max").and_then(Value::as_i64),
                            disabled: s.get("disabled").and_then(Value::as_bool).unwrap_or(false),
                        }
                    }),
                });
            }
            TrialScaleRecord::Pipeline {
                min_max,
                definitions: vs
                    .iter()
                    .map(|v| scale_definition_json(v.get("scale")))
                    .collect(),
            }
        }
    })
}

/// Sets `min = max = n`, `disabled = false` on a `scale` (created if absent), keeping its other
/// fields (lookbackSeconds, zeroReplicaSleepSeconds, …).
fn fix_scale(holder: &mut Value, n: i64) {
    let Some(obj) = holder.as_object_mut() else {
        return;
    };
    let scale = obj
        .entry("scale")
        .or_insert_with(|| Value::Object(Map::new()));
    if !scale.is_object() {
        *scale = Value::Object(Map::new());
    }
    if let Some(s) = scale.as_object_mut() {
        s.insert("min".into(), json!(n));
        s.insert("max".into(), json!(n));
        s.insert("disabled".into(), json!(false));
    }
}

fn explicit_max_zero(holder: &Value) -> bool {
    holder.pointer("/scale/max").and_then(Value::as_i64) == Some(0)
}

/// The trial's spec: `desired_spec` with each vertex (or the MonoVertex) fixed at
/// `initial - scaleTo` pods (at least 1; new vertices 1), autoscaling off.
///
/// Not rescaled: a MonoVertex whose rollout `scale.max` is 0, a Pipeline whose every source has
/// an explicit `scale.max: 0` (it can't ingest and will be force-promoted as
/// `no_data_ingestion`), and InterStepBufferServices.
pub fn trial_spec(
    kind: Kind,
    desired_spec: &Value,
    promoted_values: &BTreeMap<String, ScaleValues>,
) -> Value {
    let mut spec = desired_spec.clone();
    match kind {
        Kind::IsbService | Kind::NumaflowController => {}
        Kind::MonoVertex => {
            if !explicit_max_zero(&spec) {
                // Keyed by the promoted child's name: the only entry.
                let n = promoted_values
                    .values()
                    .next()
                    .map_or(1, |v| split(v.initial).1);
                fix_scale(&mut spec, n);
            }
        }
        Kind::Pipeline => {
            let sources: Vec<&Value> = vertices(&spec)
                .iter()
                .filter(|v| v.get("source").is_some_and(|s| !s.is_null()))
                .collect();
            if !sources.is_empty() && sources.iter().all(|v| explicit_max_zero(v)) {
                return spec;
            }
            if let Some(vs) = spec.get_mut("vertices").and_then(Value::as_array_mut) {
                for v in vs {
                    let n = match vertex_name(v).and_then(|n| promoted_values.get(n)) {
                        // `initial - scaleTo` is 0 only when no pod ran; a vertex the user
                        // scaled to 0 stays at 0, any other gets 1.
                        Some(sv) if sv.initial <= 0 && explicit_max_zero(v) => 0,
                        Some(sv) => split(sv.initial).1,
                        None => 1,
                    };
                    fix_scale(v, n);
                }
            }
        }
    }
    spec
}

/// Merge patch fixing the promoted child at `scaleTo` (min = max, autoscaling off), or `None`
/// when the live spec already is (so re-running it is free).
pub fn promoted_scale_down_patch(
    kind: Kind,
    promoted_spec: &Value,
    values: &BTreeMap<String, ScaleValues>,
) -> Option<Value> {
    let fixed = |holder: &Value, n: i64| {
        holder.pointer("/scale/min").and_then(Value::as_i64) == Some(n)
            && holder.pointer("/scale/max").and_then(Value::as_i64) == Some(n)
            && holder.pointer("/scale/disabled").and_then(Value::as_bool) == Some(false)
    };
    match kind {
        Kind::IsbService | Kind::NumaflowController => None,
        Kind::MonoVertex => {
            let n = values.values().next()?.scale_to;
            (!fixed(promoted_spec, n))
                .then(|| json!({"spec": {"scale": {"min": n, "max": n, "disabled": false}}}))
        }
        Kind::Pipeline => {
            let mut vs = vertices(promoted_spec).to_vec();
            let mut changed = false;
            for v in &mut vs {
                if let Some(sv) = vertex_name(v).and_then(|n| values.get(n))
                    && !fixed(v, sv.scale_to)
                {
                    fix_scale(v, sv.scale_to);
                    changed = true;
                }
            }
            changed.then(|| json!({"spec": {"vertices": vs}}))
        }
    }
}

/// Applies a saved `originalScaleMinMax` to `holder.scale`: null values remove their key, and
/// `null` as a whole removes min/max/disabled. An emptied `scale` is removed, so a child that had
/// no scale gets none back (the reference leaves `{"disabled":false}` on pipeline vertices).
fn restore_scale(holder: &mut Value, saved: &str, path: &str) -> Result<(), ScaleError> {
    let saved: Value = serde_json::from_str(saved)
        .map_err(|e| ScaleError::at(path, format!("saved scale is not JSON: {e}")))?;
    let Some(obj) = holder.as_object_mut() else {
        return Ok(());
    };
    let mut scale = obj
        .remove("scale")
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    if let Some(s) = scale.as_object_mut() {
        for k in ["min", "max", "disabled"] {
            match saved.get(k) {
                Some(v) if !v.is_null() => {
                    s.insert(k.into(), v.clone());
                }
                _ => {
                    s.remove(k);
                }
            }
        }
        if !s.is_empty() {
            obj.insert("scale".into(), scale);
        }
    }
    Ok(())
}

/// Merge patch putting the promoted child back to its saved scale. For a MonoVertex the saved
/// HPA must be re-created too (see [`ScaleValues::original_hpa_definition`]).
pub fn promoted_restore_patch(
    kind: Kind,
    promoted_spec: &Value,
    values: &BTreeMap<String, ScaleValues>,
) -> Result<Option<Value>, ScaleError> {
    match kind {
        Kind::IsbService | Kind::NumaflowController => Ok(None),
        Kind::MonoVertex => {
            let Some(sv) = values.values().next() else {
                return Ok(None);
            };
            let mut holder = promoted_spec.clone();
            restore_scale(&mut holder, &sv.original_scale_min_max, "scaleValues")?;
            // `scale: null` deletes it in a merge patch; an object replaces the keys it names,
            // so name the removed ones as null.
            let patch = match holder.get("scale") {
                None => Value::Null,
                Some(s) => {
                    let mut s = s.clone();
                    if let Some(o) = s.as_object_mut() {
                        for k in ["min", "max", "disabled"] {
                            o.entry(k).or_insert(Value::Null);
                        }
                    }
                    s
                }
            };
            Ok(Some(json!({"spec": {"scale": patch}})))
        }
        Kind::Pipeline => {
            let mut vs = vertices(promoted_spec).to_vec();
            for v in &mut vs {
                let Some(name) = vertex_name(v).map(str::to_string) else {
                    continue;
                };
                if let Some(sv) = values.get(&name) {
                    restore_scale(
                        v,
                        &sv.original_scale_min_max,
                        &format!("scaleValues[{name}]"),
                    )?;
                }
            }
            Ok(Some(json!({"spec": {"vertices": vs}})))
        }
    }
}

/// Merge patch scaling a failed trial to zero (min = max = 0, autoscaling off), or `None` when
/// it already is.
pub fn trial_zero_patch(kind: Kind, trial_spec: &Value) -> Option<Value> {
    let zero = |holder: &Value| {
        holder.pointer("/scale/min").and_then(Value::as_i64) == Some(0)
            && holder.pointer("/scale/max").and_then(Value::as_i64) == Some(0)
    };
    match kind {
        Kind::IsbService | Kind::NumaflowController => None,
        Kind::MonoVertex => (!zero(trial_spec))
            .then(|| json!({"spec": {"scale": {"min": 0, "max": 0, "disabled": false}}})),
        Kind::Pipeline => {
            let mut vs = vertices(trial_spec).to_vec();
            if vs.iter().all(zero) {
                return None;
            }
            for v in &mut vs {
                fix_scale(v, 0);
            }
            Some(json!({"spec": {"vertices": vs}}))
        }
    }
}

/// Whether `spec` has the min/max/disabled saved in `values` (confirms a restore; tests).
pub fn has_saved_scale(kind: Kind, spec: &Value, values: &BTreeMap<String, ScaleValues>) -> bool {
    let same = |holder: &Value, saved: &str| {
        let saved: Value = serde_json::from_str(saved).unwrap_or(Value::Null);
        ["min", "max", "disabled"].iter().all(|k| {
            let want = saved.get(*k).filter(|v| !v.is_null());
            let have = holder
                .get("scale")
                .and_then(|s| s.get(*k))
                .filter(|v| !v.is_null());
            want == have
        })
    };
    match kind {
        Kind::IsbService | Kind::NumaflowController => true,
        Kind::MonoVertex => values
            .values()
            .next()
            .is_none_or(|sv| same(spec, &sv.original_scale_min_max)),
        Kind::Pipeline => vertices(spec).iter().all(|v| {
            vertex_name(v)
                .and_then(|n| values.get(n))
                .is_none_or(|sv| same(v, &sv.original_scale_min_max))
        }),
    }
}

/// The promoted child's spec as compared with the rollout's: the scale fields the engine
/// changes (`min`, `max`, `disabled`) and MonoVertex `replicas` removed, an emptied `scale` too.
pub fn comparable_promoted_spec(kind: Kind, spec: &Value) -> Value {
    let mut spec = spec.clone();
    // Nulls first, so a `scale` left with only null keys counts as empty.
    crate::usde::strip_nulls(&mut spec);
    let strip = |holder: &mut Value| {
        if let Some(obj) = holder.as_object_mut()
            && let Some(s) = obj.get_mut("scale").and_then(Value::as_object_mut)
        {
            for k in ["min", "max", "disabled"] {
                s.remove(k);
            }
            if s.is_empty() {
                obj.remove("scale");
            }
        }
    };
    match kind {
        Kind::IsbService | Kind::NumaflowController => {}
        Kind::MonoVertex => {
            if let Some(o) = spec.as_object_mut() {
                o.remove("replicas");
            }
            strip(&mut spec);
        }
        Kind::Pipeline => {
            if let Some(vs) = spec.get_mut("vertices").and_then(Value::as_array_mut) {
                vs.iter_mut().for_each(strip);
            }
        }
    }
    spec
}

/// Whether the promoted child differs from the spec the rollout asks for, the scale the engine
/// itself changes on it set aside (`differs_from_promoted`).
pub fn promoted_differs(kind: Kind, promoted: &Value, want: &Value) -> bool {
    !crate::usde::json_eq(
        &comparable_promoted_spec(kind, promoted),
        &comparable_promoted_spec(kind, want),
    )
}

/// Whether a trial no longer matches the spec the rollout asks for (`want`, rendered under the
/// trial's name), its own scale set aside as [`comparable_trial_spec`] does: such a trial is
/// replaced (`differs_from_rollout`).
pub fn trial_differs(kind: Kind, trial: &Value, want: &Value, saved: &TrialScaleRecord) -> bool {
    !crate::usde::json_eq(
        &comparable_trial_spec(kind, trial, saved),
        &comparable_trial_spec(kind, want, &TrialScaleRecord::None),
    )
}

/// The trial's spec as compared with the rollout's: its `scale` replaced by the saved
/// original definition (removed when that is `null`), MonoVertex `replicas` removed. Without a
/// saved definition (legacy status) the trial's scale is compared as it is.
pub fn comparable_trial_spec(kind: Kind, spec: &Value, saved: &TrialScaleRecord) -> Value {
    let mut spec = spec.clone();
    crate::usde::strip_nulls(&mut spec);
    let put = |holder: &mut Value, def: &str| {
        let Some(obj) = holder.as_object_mut() else {
            return;
        };
        match serde_json::from_str::<Value>(def) {
            Ok(Value::Null) => {
                obj.remove("scale");
            }
            Ok(v) => {
                obj.insert("scale".into(), v);
            }
            // A corrupted record: leave the live scale, so it shows up as a difference.
            Err(_) => {}
        }
    };
    match (kind, saved) {
        (Kind::MonoVertex, _) => {
            if let Some(o) = spec.as_object_mut() {
                o.remove("replicas");
            }
            if let TrialScaleRecord::MonoVertex { definition, .. } = saved
                && !definition.is_empty()
            {
                put(&mut spec, definition);
            }
        }
        (Kind::Pipeline, TrialScaleRecord::Pipeline { definitions, .. }) => {
            if let Some(vs) = spec.get_mut("vertices").and_then(Value::as_array_mut) {
                for (v, def) in vs.iter_mut().zip(definitions) {
                    put(v, def);
                }
            }
        }
        _ => {}
    }
    spec
}
