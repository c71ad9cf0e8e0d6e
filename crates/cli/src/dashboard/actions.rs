//! The page's buttons: the plugin's own commands, run with the user's client, answered with the
//! API server's verdict (a 403 stays a 403).

use crate::cli::{AllowDataLossArgs, PauseArgs, ResumeArgs, TrialArgs};
use crate::cluster::Cluster;
use crate::commands::{pause, promote};
use kube::Client;
use numaplane_api::Kind;
use serde::Serialize;

/// The actions a page offers.
pub const ACTIONS: [&str; 5] = ["promote", "abort", "pause", "resume", "allow-data-loss"];

/// What an action answers: `status` is the HTTP status the dashboard replies with.
#[derive(Serialize, Debug, PartialEq)]
pub struct Outcome {
    pub ok: bool,
    pub status: u16,
    pub message: String,
}

pub async fn run(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
    action: &str,
) -> Outcome {
    let cluster = Cluster {
        client: client.clone(),
        namespace: namespace.to_string(),
    };
    let rollout = name.to_string();
    let trial = || TrialArgs {
        rollout: rollout.clone(),
        kind: Some(kind),
    };
    let result = match action {
        "promote" => promote::promote_trial(&cluster, &trial()).await,
        "abort" => promote::abort_trial(&cluster, &trial()).await,
        "pause" => {
            let args = PauseArgs {
                rollout,
                kind: Some(kind),
            };
            pause::pause_rollout(&cluster, &args).await
        }
        "resume" => {
            let args = ResumeArgs {
                rollout,
                kind: Some(kind),
                fast: false,
            };
            pause::resume_rollout(&cluster, &args).await
        }
        "allow-data-loss" if kind == Kind::Pipeline => {
            let args = AllowDataLossArgs {
                rollout,
                off: false,
            };
            pause::set_allow_data_loss(&cluster, &args).await
        }
        "allow-data-loss" => {
            return Outcome {
                ok: false,
                status: 400,
                message: format!(
                    "allow-data-loss applies only to PipelineRollouts; {name} is a {}",
                    kind.rollout_kind()
                ),
            };
        }
        other => {
            return Outcome {
                ok: false,
                status: 404,
                message: format!("no action {other:?}: use one of {}", ACTIONS.join(", ")),
            };
        }
    };
    match result {
        Ok(message) => Outcome {
            ok: true,
            status: 200,
            message,
        },
        Err(e) => failure(&e),
    }
}

/// An API error keeps its status code and the API server's words; a refusal of the command
/// itself (already paused, no trial) is a conflict with the rollout's state.
fn failure(e: &anyhow::Error) -> Outcome {
    let api = e
        .chain()
        .find_map(|c| match c.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => Some(status.clone()),
            _ => None,
        });
    match api {
        Some(status) => Outcome {
            ok: false,
            status: if status.code == 0 { 502 } else { status.code },
            message: format!(
                "the API server refused it ({} {}): {}",
                status.code, status.reason, status.message
            ),
        },
        None => Outcome {
            ok: false,
            status: 409,
            message: format!("{e:#}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn api_refusals_keep_their_code_and_words() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "pipelinerollouts.numaplane.numaproj.io \"p\" is forbidden: User \"viewer\" cannot patch resource"
        }))
        .expect("status");
        let e = Err::<(), _>(kube::Error::Api(Box::new(status)))
            .context("patching PipelineRollout p")
            .expect_err("error");
        let out = failure(&e);
        assert_eq!((out.ok, out.status), (false, 403));
        assert!(
            out.message
                .starts_with("the API server refused it (403 Forbidden): ")
                && out.message.contains("cannot patch resource"),
            "{}",
            out.message
        );
        let refusal = failure(&anyhow::anyhow!("PipelineRollout p is already paused"));
        assert_eq!(refusal.status, 409);
        assert_eq!(refusal.message, "PipelineRollout p is already paused");
    }
}
