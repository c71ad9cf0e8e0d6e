//! `promote`: force-promote the trial child of a progressive upgrade, the way the reference's
//! Argo CD "Force Promote" action does: label `numaplane.numaproj.io/force-promote: "true"` on
//! the trial. The controller promotes it at its next assessment, even after a failure.

use crate::cli::PromoteArgs;
use crate::cluster::{Cluster, FIELD_MANAGER, list_or_empty};
use crate::kinds::RolloutKind;
use anyhow::{Context, Result, bail};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use numaplane_api::keys::{labels, upgrade_state};
use serde_json::json;

/// Whether a child is the trial of its rollout (legacy `in-progress` counts, as in the
/// reference).
pub fn is_trial(child: &DynamicObject) -> bool {
    let state = child
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::UPGRADE_STATE))
        .map(String::as_str);
    matches!(
        state,
        Some(upgrade_state::TRIAL) | Some(upgrade_state::IN_PROGRESS)
    ) && child.metadata.deletion_timestamp.is_none()
}

/// The newest trial child among `children`.
pub fn newest_trial(children: Vec<DynamicObject>) -> Option<DynamicObject> {
    children.into_iter().filter(is_trial).max_by(|a, b| {
        let t = |o: &DynamicObject| o.metadata.creation_timestamp.as_ref().map(|t| t.0);
        t(a).cmp(&t(b))
    })
}

pub async fn run(cluster: &Cluster, args: &PromoteArgs) -> Result<i32> {
    if let Some(k) = args.kind
        && !RolloutKind::PROGRESSIVE.contains(&k)
    {
        bail!(
            "{}s have no trial to promote: a NumaflowController is always updated in place",
            k.kind()
        );
    }
    let (kind, _) = match cluster
        .find(&args.rollout, &RolloutKind::PROGRESSIVE, args.kind)
        .await
    {
        Ok(found) => found,
        Err(e) => {
            // Say so when the name belongs to a NumaflowControllerRollout.
            let ncr = RolloutKind::NumaflowController;
            if args.kind.is_none()
                && cluster
                    .rollouts(ncr)
                    .get_opt(&args.rollout)
                    .await
                    .ok()
                    .flatten()
                    .is_some()
            {
                bail!(
                    "{} is a NumaflowControllerRollout: it has no trial to promote (always updated in place)",
                    args.rollout
                );
            }
            return Err(e);
        }
    };
    let children: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        &cluster.namespace,
        &kind.child_resource(),
    );
    let params =
        ListParams::default().labels(&format!("{}={}", labels::PARENT_ROLLOUT_NAME, args.rollout));
    let found = list_or_empty(&children, &params)
        .await
        .with_context(|| format!("listing the {}s of {}", kind.child_kind(), args.rollout))?;
    let Some(trial) = newest_trial(found) else {
        bail!(
            "{} {} has no progressive upgrade in progress: no {} labelled {}={} to promote",
            kind.kind(),
            args.rollout,
            kind.child_kind(),
            labels::UPGRADE_STATE,
            upgrade_state::TRIAL
        );
    };
    let trial_name = trial.metadata.name.clone().unwrap_or_default();
    let already = trial
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::FORCE_PROMOTE));
    if already {
        bail!(
            "{}/{trial_name} is already being force-promoted (label {} present)",
            kind.child_kind(),
            labels::FORCE_PROMOTE
        );
    }
    let patch = json!({"metadata": {"labels": {labels::FORCE_PROMOTE: "true"}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    children
        .patch(&trial_name, &params, &Patch::Merge(patch))
        .await
        .with_context(|| format!("labelling {} {trial_name}", kind.child_kind()))?;
    println!(
        "{}/{trial_name} (trial of {}/{}) labelled {}: \"true\"; the controller promotes it at its next assessment",
        kind.child_kind(),
        kind.kind(),
        args.rollout,
        labels::FORCE_PROMOTE
    );
    Ok(super::EXIT_OK)
}
