//! [`decide`]: metadata, spec and riders evaluated independently, then combined most
//! conservatively (NoOp < DirectApply < PipelinePauseAndDrain = Progressive).

use super::path::{diff_paths, field_changed, json_eq};
use super::{ChangeClass, Decision, DecisionInput, FieldChange, RiderChangeKind};
use crate::config::{SpecField, UserStrategy};
use numaplane_api::common::UpgradeStrategy;
use numaplane_api::keys::annotations::NUMAFLOW_INSTANCE;
use std::collections::BTreeMap;

/// How to carry the desired child to the live one. Rules of docs/compatibility.md and
/// docs/strategies.md:
/// - **metadata**: a different `numaflow.numaproj.io/instance` annotation (absent = `""`) ⇒ the
///   user strategy's data-loss strategy; else desired labels/annotations not a subset of the
///   live ones ⇒ DirectApply (extra live keys are ignored);
/// - **spec**: progressive ⇒ any recreate/dataLoss/progressive field changed ⇒ Progressive;
///   pause-and-drain ⇒ recreate field ⇒ PPND + recreate, else dataLoss field ⇒ PPND;
///   no-strategy ⇒ recreate field ⇒ DirectApply + recreate; otherwise any spec difference ⇒
///   DirectApply; no config (no USDE ConfigMap ever loaded) ⇒ fail closed: every spec
///   difference is a data-loss change carried by the most careful strategy, Progressive under
///   progressive, else pause-and-drain, never a direct apply (the reference applied every change
///   directly);
/// - **riders**: added/deleted ⇒ DirectApply; modified ⇒ Progressive if the rider is
///   `progressive` and the user strategy is progressive, else DirectApply.
///
/// The recreate flag comes from the spec part only, whatever part wins.
pub fn decide(input: &DecisionInput<'_>) -> Decision {
    // Spec first so it wins ties. Equal-rank parts never actually disagree: PPND and
    // Progressive both follow from the one user strategy.
    let parts = [spec_part(input), metadata_part(input), riders_part(input)];
    let strategy = parts
        .iter()
        .map(|p| p.strategy)
        .fold(UpgradeStrategy::NoOp, |best, s| {
            if rank(s) > rank(best) { s } else { best }
        });
    if strategy == UpgradeStrategy::NoOp {
        return Decision::no_op();
    }
    let recreate = parts[0].recreate;
    let reasons = parts
        .into_iter()
        .filter(|p| rank(p.strategy) == rank(strategy))
        .flat_map(|p| p.reasons)
        .collect();
    Decision {
        strategy,
        recreate,
        reasons,
    }
}

fn rank(s: UpgradeStrategy) -> u8 {
    match s {
        UpgradeStrategy::NoOp | UpgradeStrategy::Error => 0,
        UpgradeStrategy::DirectApply => 1,
        UpgradeStrategy::PipelinePauseAndDrain | UpgradeStrategy::Progressive => 2,
    }
}

fn decision(strategy: UpgradeStrategy, recreate: bool, reasons: Vec<FieldChange>) -> Decision {
    Decision {
        strategy,
        recreate,
        reasons,
    }
}

fn spec_part(input: &DecisionInput<'_>) -> Decision {
    let changed = |fields: &[SpecField], class: ChangeClass| -> Vec<FieldChange> {
        fields
            .iter()
            .filter(|f| field_changed(f, input.desired_spec, input.live_spec))
            .map(|f| FieldChange {
                path: f.path.clone(),
                class,
            })
            .collect()
    };
    let Some(cfg) = input.config else {
        return unconfigured_spec_part(input);
    };
    let recreate = changed(&cfg.recreate, ChangeClass::Recreate);
    match input.user_strategy {
        UserStrategy::Progressive => {
            let mut all = recreate;
            all.extend(changed(&cfg.data_loss, ChangeClass::DataLoss));
            all.extend(changed(&cfg.progressive, ChangeClass::Progressive));
            if !all.is_empty() {
                return decision(UpgradeStrategy::Progressive, false, all);
            }
        }
        UserStrategy::PauseAndDrain => {
            let is_recreate = !recreate.is_empty();
            let mut all = recreate;
            all.extend(changed(&cfg.data_loss, ChangeClass::DataLoss));
            if !all.is_empty() {
                return decision(UpgradeStrategy::PipelinePauseAndDrain, is_recreate, all);
            }
        }
        UserStrategy::NoStrategy => {
            if !recreate.is_empty() {
                return decision(UpgradeStrategy::DirectApply, true, recreate);
            }
        }
    }
    if json_eq(input.desired_spec, input.live_spec) {
        return Decision::no_op();
    }
    let others = diff_paths(input.desired_spec, input.live_spec)
        .into_iter()
        .map(|path| FieldChange {
            path,
            class: ChangeClass::Other,
        })
        .collect();
    decision(UpgradeStrategy::DirectApply, false, others)
}

/// What a field counts as when no USDE config was ever loaded: it may lose data.
pub const UNCONFIGURED: &str = "no upgrade-strategy (USDE) ConfigMap loaded";

/// What a rollout of `kind` in a namespace of strategy `strategy` says while no USDE config is
/// loaded: its changes are all taken as data-loss changes, carried the way this names.
pub fn unconfigured_note(kind: numaplane_api::Kind, strategy: UserStrategy) -> String {
    let careful = match strategy {
        UserStrategy::Progressive => UpgradeStrategy::Progressive,
        UserStrategy::PauseAndDrain | UserStrategy::NoStrategy => {
            UpgradeStrategy::PipelinePauseAndDrain
        }
    };
    let carried =
        match super::effective_for_kind(kind, decision(careful, false, Vec::new())).strategy {
            UpgradeStrategy::Progressive => "by a progressive upgrade".to_string(),
            UpgradeStrategy::PipelinePauseAndDrain => "by pause-and-drain".to_string(),
            _ => format!(
                "directly: a {} has no more careful strategy under {}",
                kind.child_kind(),
                strategy.as_str()
            ),
        };
    format!("{UNCONFIGURED}: every change is taken as one that may lose data and carried {carried}")
}

/// The spec part without a USDE config: nothing says which fields are safe, so every changed
/// path is taken as a data-loss change, named with why.
fn unconfigured_spec_part(input: &DecisionInput<'_>) -> Decision {
    if json_eq(input.desired_spec, input.live_spec) {
        return Decision::no_op();
    }
    let strategy = match input.user_strategy {
        UserStrategy::Progressive => UpgradeStrategy::Progressive,
        UserStrategy::PauseAndDrain | UserStrategy::NoStrategy => {
            UpgradeStrategy::PipelinePauseAndDrain
        }
    };
    let reasons = diff_paths(input.desired_spec, input.live_spec)
        .into_iter()
        .map(|path| FieldChange {
            path: format!("{path} ({UNCONFIGURED})"),
            class: ChangeClass::DataLoss,
        })
        .collect();
    decision(strategy, false, reasons)
}

fn metadata_part(input: &DecisionInput<'_>) -> Decision {
    let instance = |m: &BTreeMap<String, String>| {
        m.get(NUMAFLOW_INSTANCE)
            .map_or("", String::as_str)
            .to_owned()
    };
    if instance(input.desired_annotations) != instance(input.live_annotations) {
        let reason = FieldChange {
            path: format!("metadata.annotations[{NUMAFLOW_INSTANCE}]"),
            class: ChangeClass::Metadata,
        };
        return decision(
            input.user_strategy.data_loss_strategy(),
            false,
            vec![reason],
        );
    }
    let mut missing = missing_keys("labels", input.desired_labels, input.live_labels);
    missing.extend(missing_keys(
        "annotations",
        input.desired_annotations,
        input.live_annotations,
    ));
    if missing.is_empty() {
        Decision::no_op()
    } else {
        decision(UpgradeStrategy::DirectApply, false, missing)
    }
}

/// Desired entries the live map lacks or holds with another value.
fn missing_keys(
    what: &str,
    desired: &BTreeMap<String, String>,
    live: &BTreeMap<String, String>,
) -> Vec<FieldChange> {
    desired
        .iter()
        .filter(|(k, v)| live.get(*k) != Some(*v))
        .map(|(k, _)| FieldChange {
            path: format!("metadata.{what}[{k}]"),
            class: ChangeClass::Metadata,
        })
        .collect()
}

fn riders_part(input: &DecisionInput<'_>) -> Decision {
    let progressive_user = input.user_strategy == UserStrategy::Progressive;
    let mut strategy = UpgradeStrategy::NoOp;
    let mut reasons = Vec::new();
    for r in input.riders {
        let s = match r.change {
            RiderChangeKind::Modified { progressive: true } if progressive_user => {
                UpgradeStrategy::Progressive
            }
            _ => UpgradeStrategy::DirectApply,
        };
        if rank(s) > rank(strategy) {
            strategy = s;
        }
        reasons.push((s, r));
    }
    // Only the riders that rank with the riders' strategy decided it.
    let reasons = reasons
        .into_iter()
        .filter(|(s, _)| rank(*s) == rank(strategy))
        .map(|(_, r)| FieldChange {
            path: format!("riders/{}/{}", r.kind, r.name),
            class: ChangeClass::Rider,
        })
        .collect();
    decision(strategy, false, reasons)
}

/// Whether a pipeline must be updated at all under pause-and-drain (docs/strategies.md):
/// the specs differ once `lifecycle.desiredPhase` (and a `lifecycle` left empty) is ignored on
/// both sides, or the `numaflow.numaproj.io/instance` annotation differs. Other label and
/// annotation differences do not count: pausing is never needed for them.
pub fn pipeline_needs_update_for_ppnd(
    desired_spec: &serde_json::Value,
    live_spec: &serde_json::Value,
    desired_annotations: &BTreeMap<String, String>,
    live_annotations: &BTreeMap<String, String>,
) -> bool {
    let instance =
        |m: &BTreeMap<String, String>| m.get(NUMAFLOW_INSTANCE).cloned().unwrap_or_default();
    instance(desired_annotations) != instance(live_annotations)
        || !json_eq(
            &without_desired_phase(desired_spec),
            &without_desired_phase(live_spec),
        )
}

fn without_desired_phase(spec: &serde_json::Value) -> serde_json::Value {
    let mut spec = spec.clone();
    if let Some(map) = spec.as_object_mut() {
        let emptied = map
            .get_mut("lifecycle")
            .and_then(serde_json::Value::as_object_mut)
            .is_some_and(|lifecycle| {
                lifecycle.remove("desiredPhase");
                lifecycle.is_empty()
            });
        if emptied {
            map.remove("lifecycle");
        }
    }
    spec
}
