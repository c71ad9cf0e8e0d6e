//! `promote` and `abort`: label the trial child of a progressive upgrade. `promote` does what
//! the reference's Argo CD "Force Promote" action does (label
//! `numaplane.numaproj.io/force-promote: "true"`: promoted at its next assessment, even after a
//! failure); `abort` labels it `numaplane.numaproj.io/abort: "true"` (failed now); `retry` labels
//! a failed trial `numaplane.numaproj.io/retry: "true"` (replaced by a new trial of the same spec).

use crate::cli::TrialArgs;
use crate::cluster::{Cluster, FIELD_MANAGER, list_or_empty};
use anyhow::{Context, Result, bail};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use numaplane_api::Kind;
use numaplane_api::keys::{labels, progressive_result_state, upgrade_state};
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

/// What `promote` and `abort` do to the trial: the label they set and how they say it.
struct TrialVerb {
    label: &'static str,
    /// "promote" or "abort", for messages.
    verb: &'static str,
    /// What a trial already carrying the label is being ("force-promoted", "aborted").
    being: &'static str,
    /// What the controller does next, printed after the label landed.
    then: &'static str,
    /// The label that makes this one moot, and why, when present on the trial.
    overridden_by: Option<(&'static str, &'static str)>,
    /// A label value the trial must carry, and what it means, for the verb to apply.
    requires: Option<(&'static str, &'static str, &'static str)>,
}

pub async fn run(cluster: &Cluster, args: &TrialArgs) -> Result<i32> {
    println!("{}", promote_trial(cluster, args).await?);
    Ok(super::EXIT_OK)
}

/// Labels the trial force-promote; returns what was done.
pub async fn promote_trial(cluster: &Cluster, args: &TrialArgs) -> Result<String> {
    label_trial(
        cluster,
        args,
        &TrialVerb {
            label: labels::FORCE_PROMOTE,
            verb: "promote",
            being: "force-promoted",
            then: "the controller promotes it at its next assessment",
            overridden_by: None,
            requires: None,
        },
    )
    .await
}

/// `abort`: end a progressive upgrade now as a failure (label `numaplane.numaproj.io/abort` on
/// the trial): the trial is scaled to zero like a failed one, the promoted child gets its scale
/// back, and the rollout stays on the promoted child until its spec changes again.
pub async fn abort(cluster: &Cluster, args: &TrialArgs) -> Result<i32> {
    println!("{}", abort_trial(cluster, args).await?);
    Ok(super::EXIT_OK)
}

/// Labels the trial abort; returns what was done.
pub async fn abort_trial(cluster: &Cluster, args: &TrialArgs) -> Result<String> {
    label_trial(
        cluster,
        args,
        &TrialVerb {
            label: labels::ABORT,
            verb: "abort",
            being: "aborted",
            then: "the controller fails it now: the trial is scaled to zero and the promoted child gets its scale back; the rollout stays on the promoted child until its spec changes",
            overridden_by: Some((
                labels::FORCE_PROMOTE,
                "it is being force-promoted, which wins over an abort",
            )),
            requires: None,
        },
    )
    .await
}

/// `retry`: re-run a failed or aborted progressive upgrade (label `numaplane.numaproj.io/retry`
/// on the failed trial): a new trial of the same spec replaces it.
pub async fn retry(cluster: &Cluster, args: &TrialArgs) -> Result<i32> {
    println!("{}", retry_trial(cluster, args).await?);
    Ok(super::EXIT_OK)
}

/// Labels a failed trial retry; returns what was done.
pub async fn retry_trial(cluster: &Cluster, args: &TrialArgs) -> Result<String> {
    label_trial(
        cluster,
        args,
        &TrialVerb {
            label: labels::RETRY,
            verb: "retry",
            being: "retried",
            then: "the controller replaces it by a new trial of the same spec, assessed from the start; the failed one is drained and deleted",
            overridden_by: Some((
                labels::FORCE_PROMOTE,
                "it is being force-promoted, which wins over a retry",
            )),
            requires: Some((
                labels::PROGRESSIVE_RESULT_STATE,
                progressive_result_state::FAILED,
                "has not failed: only a failed or aborted trial is retried (abort it first to start over)",
            )),
        },
    )
    .await
}

async fn label_trial(cluster: &Cluster, args: &TrialArgs, what: &TrialVerb) -> Result<String> {
    let verb = what.verb;
    if let Some(k) = args.kind
        && !Kind::PROGRESSIVE.contains(&k)
    {
        bail!(
            "{}s have no trial to {verb}: a NumaflowController is always updated in place",
            k.rollout_kind()
        );
    }
    let (kind, _) = match cluster
        .find(&args.rollout, &Kind::PROGRESSIVE, args.kind)
        .await
    {
        Ok(found) => found,
        Err(e) => {
            // Say so when the name belongs to a NumaflowControllerRollout.
            let ncr = Kind::NumaflowController;
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
                    "{} is a NumaflowControllerRollout: it has no trial to {verb} (always updated in place)",
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
            "{} {} has no progressive upgrade in progress: no {} labelled {}={} to {verb}",
            kind.rollout_kind(),
            args.rollout,
            kind.child_kind(),
            labels::UPGRADE_STATE,
            upgrade_state::TRIAL
        );
    };
    let trial_name = trial.metadata.name.clone().unwrap_or_default();
    let has = |label: &str| {
        trial
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(label))
    };
    if has(what.label) {
        bail!(
            "{}/{trial_name} is already being {} (label {} present)",
            kind.child_kind(),
            what.being,
            what.label
        );
    }
    if let Some((label, why)) = what.overridden_by
        && has(label)
    {
        bail!(
            "{}/{trial_name} carries label {label}: {why}",
            kind.child_kind()
        );
    }
    if let Some((label, value, why)) = what.requires {
        let carries = trial
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label))
            .is_some_and(|v| v == value);
        if !carries {
            bail!("{}/{trial_name} {why}", kind.child_kind());
        }
    }
    let patch = json!({"metadata": {"labels": {what.label: "true"}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    children
        .patch(&trial_name, &params, &Patch::Merge(patch))
        .await
        .with_context(|| format!("labelling {} {trial_name}", kind.child_kind()))?;
    Ok(format!(
        "{}/{trial_name} (trial of {}/{}) labelled {}: \"true\"; {}",
        kind.child_kind(),
        kind.rollout_kind(),
        args.rollout,
        what.label,
        what.then
    ))
}
