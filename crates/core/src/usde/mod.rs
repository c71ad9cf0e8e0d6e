//! The upgrade strategy decision (USDE, docs/compatibility.md, docs/strategies.md): how to carry a
//! change of a rollout to its child — not at all, by a direct apply, by pause-and-drain, or by a
//! progressive upgrade — from the user's strategy, the USDE field lists of the child's kind, the
//! desired and live child, and the rider changes.
//!
//! - [`decide`]: the decision, with the fields that made it ([`FieldChange`]).
//! - [`effective_for_kind`]: the per-kind degradations of docs/compatibility.md
//! - [`pipeline_needs_update_for_ppnd`]: whether pause-and-drain has anything to apply.
//! - [`field_changed`], [`json_eq`], [`diff_paths`]: the comparisons, also useful on their own.
//! - [`inert_fields`]: configured paths that can never match a kind, for a warning at load time.
//!
//! Compatibility with the reference's shipped `usde-config.yaml`:
//! - The lowercase `...container.envfrom` paths now match the real `envFrom` field (a path
//!   segment falls back to a case-insensitive key match when the exact key is absent), so an
//!   `envFrom` change of a udf/udsource/transformer/udsink/sideInputs container is a data-loss
//!   (pipeline) or progressive (MonoVertex) change, as the config intends. See [`field_changed`].
//! - The MonoVertex list's copied pipeline paths (`spec.vertices.source.*`, `spec.vertices.sink.*`)
//!   are left inert, as in the reference (a change of a MonoVertex's `spec.source.kafka` stays a
//!   DirectApply); [`inert_fields`] reports them so the controller can log it.

mod decision;
mod path;

pub use decision::{UNCONFIGURED, decide, pipeline_needs_update_for_ppnd, unconfigured_note};
pub use path::{diff_paths, field_changed, json_eq, strip_nulls};

use crate::config::{SpecField, UsdeKindConfig, UserStrategy};
use crate::riders::RiderDiff;
use numaplane_api::Kind;
use numaplane_api::common::UpgradeStrategy;
use std::collections::BTreeMap;

/// Why a field counted in a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeClass {
    /// In the kind's `recreate` list.
    Recreate,
    /// In the kind's `dataLoss` list.
    DataLoss,
    /// In the kind's `progressive` list.
    Progressive,
    /// A spec difference in no list that applies to the user strategy.
    Other,
    /// A label or annotation of the child.
    Metadata,
    /// A rider added, deleted or modified.
    Rider,
}

/// One changed field (or label, annotation, rider) that decided a [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    /// A configured USDE path (`spec.vertices.udf.container.image`), a concrete spec path
    /// (`spec.vertices[0].scale.min`), `metadata.labels[key]` / `metadata.annotations[key]`, or
    /// `riders/<Kind>/<name>`.
    pub path: String,
    pub class: ChangeClass,
}

/// How to carry the change, and which changes decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// `NoOp`, `DirectApply`, `PipelinePauseAndDrain` or `Progressive`; never `Error`.
    pub strategy: UpgradeStrategy,
    /// A `recreate`-list field changed: delete and recreate the child (honoured by
    /// ISBServiceRollout only, docs/compatibility.md).
    pub recreate: bool,
    /// The changes of the parts (metadata, spec, riders) whose strategy ranks with `strategy`:
    /// empty for `NoOp`.
    pub reasons: Vec<FieldChange>,
}

impl Decision {
    pub fn no_op() -> Self {
        Self {
            strategy: UpgradeStrategy::NoOp,
            recreate: false,
            reasons: Vec::new(),
        }
    }

    pub fn needs_update(&self) -> bool {
        self.strategy != UpgradeStrategy::NoOp
    }
}

/// What happened to one rider between the live and the desired riders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RiderChangeKind {
    Added,
    Deleted,
    /// The hash differs; `progressive` is the rider's `progressive` flag.
    Modified {
        progressive: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RiderChange {
    pub kind: String,
    pub name: String,
    pub change: RiderChangeKind,
}

/// The rider changes of a [`RiderDiff`], for [`DecisionInput::riders`].
pub fn rider_changes(diff: &RiderDiff) -> Vec<RiderChange> {
    let added = diff.add.iter().map(|r| RiderChange {
        kind: r.gvk.kind.clone(),
        name: r.name.clone(),
        change: RiderChangeKind::Added,
    });
    let modified = diff.modify.iter().map(|r| RiderChange {
        kind: r.gvk.kind.clone(),
        name: r.name.clone(),
        change: RiderChangeKind::Modified {
            progressive: r.progressive,
        },
    });
    let deleted = diff.delete.iter().map(|r| RiderChange {
        kind: r.gvk.kind.clone(),
        name: r.name.clone(),
        change: RiderChangeKind::Deleted,
    });
    added.chain(modified).chain(deleted).collect()
}

/// Everything [`decide`] looks at. Specs are the values of the children's `spec`.
#[derive(Debug, Clone, Copy)]
pub struct DecisionInput<'a> {
    pub user_strategy: UserStrategy,
    /// The field lists of the child's kind; `None` (no USDE ConfigMap loaded) makes every spec
    /// change a data-loss change (see [`decide`]).
    pub config: Option<&'a UsdeKindConfig>,
    pub desired_spec: &'a serde_json::Value,
    pub live_spec: &'a serde_json::Value,
    pub desired_labels: &'a BTreeMap<String, String>,
    pub live_labels: &'a BTreeMap<String, String>,
    pub desired_annotations: &'a BTreeMap<String, String>,
    pub live_annotations: &'a BTreeMap<String, String>,
    pub riders: &'a [RiderChange],
}

/// Applies the degradations of docs/compatibility.md that every caller would otherwise repeat:
/// MonoVertex has no pause-and-drain (PPND ⇒ DirectApply) and NumaflowController no progressive
/// upgrade (Progressive ⇒ DirectApply, silently, as in the reference). Reasons are kept.
pub fn effective_for_kind(kind: Kind, decision: Decision) -> Decision {
    let degrade = matches!(
        (kind, decision.strategy),
        (Kind::MonoVertex, UpgradeStrategy::PipelinePauseAndDrain)
            | (Kind::NumaflowController, UpgradeStrategy::Progressive)
    );
    if degrade {
        Decision {
            strategy: UpgradeStrategy::DirectApply,
            ..decision
        }
    } else {
        decision
    }
}

/// Configured fields that can never match a child of `kind`: paths not under `spec.`, and for
/// MonoVertex the pipeline paths under `spec.vertices` copied into the shipped config.
pub fn inert_fields(kind: Kind, config: &UsdeKindConfig) -> Vec<&SpecField> {
    all_fields(config)
        .filter(|f| match path::spec_segments(&f.path) {
            None => true,
            Some(segs) => {
                kind == Kind::MonoVertex
                    && segs
                        .first()
                        .is_some_and(|s| s.eq_ignore_ascii_case("vertices"))
            }
        })
        .collect()
}

fn all_fields(config: &UsdeKindConfig) -> impl Iterator<Item = &SpecField> {
    config
        .recreate
        .iter()
        .chain(&config.data_loss)
        .chain(&config.progressive)
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
