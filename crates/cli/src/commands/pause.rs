//! `pause`, `resume` and `allow-data-loss`: the spec fields and annotation the reference's Argo CD
//! actions write, as JSON merge patches under the field manager `kubectl-numaplane`.

use crate::cli::{AllowDataLossArgs, PauseArgs, ResumeArgs};
use crate::cluster::{Cluster, FIELD_MANAGER};
use anyhow::{Context, Result, bail};
use kube::api::{DynamicObject, Patch, PatchParams};
use numaplane_api::Kind;
use numaplane_api::keys::annotations;
use serde_json::{Value, json};

const PAUSED: &str = "Paused";
const RUNNING: &str = "Running";

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// `spec.<pipeline|monoVertex>.spec.lifecycle.desiredPhase`, `Running` when unset.
pub fn desired_phase(kind: Kind, rollout: &Value) -> String {
    rollout
        .pointer(&format!(
            "/spec/{}/spec/lifecycle/desiredPhase",
            kind.template_field()
        ))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(RUNNING)
        .to_string()
}

/// The merge patch that sets the desired phase (and, for a fast resume, `fastResume: true`).
pub fn phase_patch(kind: Kind, phase: &str, fast_resume: bool) -> Value {
    let mut patch =
        json!({"spec": {kind.template_field(): {"spec": {"lifecycle": {"desiredPhase": phase}}}}});
    if fast_resume {
        patch["spec"]["strategy"] = json!({"pauseResume": {"fastResume": true}});
    }
    patch
}

fn data(obj: &DynamicObject) -> Result<Value> {
    Ok(serde_json::to_value(obj)?)
}

pub async fn pause(cluster: &Cluster, args: &PauseArgs) -> Result<i32> {
    println!("{}", pause_rollout(cluster, args).await?);
    Ok(super::EXIT_OK)
}

/// Pauses the rollout; returns what was done.
pub async fn pause_rollout(cluster: &Cluster, args: &PauseArgs) -> Result<String> {
    check_pausable(args.kind)?;
    let (kind, obj) = cluster
        .find(&args.rollout, &Kind::PAUSABLE, args.kind)
        .await?;
    let current = desired_phase(kind, &data(&obj)?);
    if current == PAUSED {
        bail!(
            "{} {} is already paused (desiredPhase Paused)",
            kind.rollout_kind(),
            args.rollout
        );
    }
    cluster
        .rollouts(kind)
        .patch(
            &args.rollout,
            &params(),
            &Patch::Merge(phase_patch(kind, PAUSED, false)),
        )
        .await
        .with_context(|| format!("patching {} {}", kind.rollout_kind(), args.rollout))?;
    Ok(format!(
        "{}/{} paused (spec.{}.spec.lifecycle.desiredPhase: Paused)",
        kind.rollout_kind(),
        args.rollout,
        kind.template_field()
    ))
}

pub async fn resume(cluster: &Cluster, args: &ResumeArgs) -> Result<i32> {
    println!("{}", resume_rollout(cluster, args).await?);
    Ok(super::EXIT_OK)
}

/// Resumes the rollout; returns what was done.
pub async fn resume_rollout(cluster: &Cluster, args: &ResumeArgs) -> Result<String> {
    check_pausable(args.kind)?;
    let (kind, obj) = cluster
        .find(&args.rollout, &Kind::PAUSABLE, args.kind)
        .await?;
    let value = data(&obj)?;
    let current = desired_phase(kind, &value);
    if current != PAUSED {
        bail!(
            "{} {} is not paused (desiredPhase {current})",
            kind.rollout_kind(),
            args.rollout
        );
    }
    cluster
        .rollouts(kind)
        .patch(
            &args.rollout,
            &params(),
            &Patch::Merge(phase_patch(kind, RUNNING, args.fast)),
        )
        .await
        .with_context(|| format!("patching {} {}", kind.rollout_kind(), args.rollout))?;
    let fast_already = value
        .pointer("/spec/strategy/pauseResume/fastResume")
        .and_then(Value::as_bool)
        == Some(true);
    let how = if args.fast {
        " fast (spec.strategy.pauseResume.fastResume: true)"
    } else if fast_already {
        " fast (the rollout already sets spec.strategy.pauseResume.fastResume: true)"
    } else {
        ""
    };
    Ok(format!(
        "{}/{} resumed{how} (spec.{}.spec.lifecycle.desiredPhase: Running)",
        kind.rollout_kind(),
        args.rollout,
        kind.template_field()
    ))
}

fn check_pausable(kind: Option<Kind>) -> Result<()> {
    match kind {
        Some(k) if !Kind::PAUSABLE.contains(&k) => bail!(
            "{}s cannot be paused: only PipelineRollouts and MonoVertexRollouts can",
            k.rollout_kind()
        ),
        _ => Ok(()),
    }
}

pub async fn allow_data_loss(cluster: &Cluster, args: &AllowDataLossArgs) -> Result<i32> {
    println!("{}", set_allow_data_loss(cluster, args).await?);
    Ok(super::EXIT_OK)
}

/// Sets (or with `off` removes) the allow-data-loss annotation; returns what was done.
pub async fn set_allow_data_loss(cluster: &Cluster, args: &AllowDataLossArgs) -> Result<String> {
    let kind = Kind::Pipeline;
    let Some(obj) = cluster
        .rollouts(kind)
        .get_opt(&args.rollout)
        .await
        .with_context(|| format!("getting PipelineRollout {}", args.rollout))?
    else {
        // Say so when the name belongs to a rollout of another kind.
        let others = [Kind::MonoVertex, Kind::IsbService, Kind::NumaflowController];
        if let Ok((other, _)) = cluster.find(&args.rollout, &others, None).await {
            bail!(
                "allow-data-loss applies only to PipelineRollouts; {} is a {}",
                args.rollout,
                other.rollout_kind()
            );
        }
        bail!(
            "no PipelineRollout named {:?} in namespace {}",
            args.rollout,
            cluster.namespace
        );
    };
    let current = obj
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::ALLOW_DATA_LOSS))
        .cloned();
    let patch = if args.off {
        if current.is_none() {
            bail!(
                "PipelineRollout {} does not have the annotation {}",
                args.rollout,
                annotations::ALLOW_DATA_LOSS
            );
        }
        json!({"metadata": {"annotations": {annotations::ALLOW_DATA_LOSS: null}}})
    } else {
        if current.as_deref() == Some("true") {
            bail!(
                "PipelineRollout {} already allows data loss ({}: \"true\")",
                args.rollout,
                annotations::ALLOW_DATA_LOSS
            );
        }
        json!({"metadata": {"annotations": {annotations::ALLOW_DATA_LOSS: "true"}}})
    };
    cluster
        .rollouts(kind)
        .patch(&args.rollout, &params(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("patching PipelineRollout {}", args.rollout))?;
    Ok(if args.off {
        format!(
            "PipelineRollout/{}: annotation {} removed",
            args.rollout,
            annotations::ALLOW_DATA_LOSS
        )
    } else {
        format!(
            "PipelineRollout/{}: annotation {}: \"true\" set (pause-and-drain no longer waits for the pipeline to pause)",
            args.rollout,
            annotations::ALLOW_DATA_LOSS
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches() {
        assert_eq!(
            phase_patch(Kind::MonoVertex, "Paused", false),
            json!({"spec": {"monoVertex": {"spec": {"lifecycle": {"desiredPhase": "Paused"}}}}})
        );
        assert_eq!(
            phase_patch(Kind::Pipeline, "Running", true),
            json!({"spec": {
                "pipeline": {"spec": {"lifecycle": {"desiredPhase": "Running"}}},
                "strategy": {"pauseResume": {"fastResume": true}}
            }})
        );
        let pr = json!({"spec": {"pipeline": {"spec": {}}}});
        assert_eq!(desired_phase(Kind::Pipeline, &pr), "Running");
    }
}
