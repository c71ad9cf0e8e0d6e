//! Keeps Numaplane's AnalysisRuns in a cache a pass reads, and wakes a rollout the moment its
//! trial's run finishes; without this watch it would look only at its next assessment sample,
//! up to the schedule's interval (10 s by default) after Argo Rollouts decided. Only
//! Numaplane's runs are watched (`app.kubernetes.io/part-of=numaplane`), and only a final
//! phase wakes anyone: Argo rewrites a running run's status at every measurement.

use crate::child_cache::ChildCache;
use crate::watches::Announced;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Resource, ResourceExt};
use numaplane_api::keys::labels;
use numaplane_api::numaflow::{AnalysisRun, MonoVertex, Pipeline};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::debug;

/// The phases Argo Rollouts ends a run in.
const FINAL: [&str; 4] = ["Successful", "Failed", "Error", "Inconclusive"];

/// The announcement kinds of a finished run whose trial is a Pipeline, or a MonoVertex.
pub(crate) const PIPELINE_RUN: &str = "AnalysisRun/Pipeline";
pub(crate) const MONOVERTEX_RUN: &str = "AnalysisRun/MonoVertex";

/// The trial children a run can belong to.
pub(crate) struct Trials {
    pub pipelines: ChildCache<Pipeline>,
    pub monovertices: ChildCache<MonoVertex>,
}

/// Starts the watch; each finished run of a trial is announced on `announced`.
pub(crate) fn spawn(
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    api: Api<AnalysisRun>,
    trials: Trials,
    store: reflector::store::Writer<AnalysisRun>,
    announced: broadcast::Sender<Announced>,
) {
    let cfg = watcher::Config::default().labels(&format!(
        "{}={}",
        labels::PART_OF,
        labels::PART_OF_NUMAPLANE
    ));
    let token = cancel.clone();
    tasks.spawn(async move {
        // (A cluster without Argo Rollouts' CRDs fails the list; the backoff retries quietly.)
        // The store is written before a finished run is announced, so the woken pass reads it
        // there.
        let stream = watcher(api, cfg)
            .default_backoff()
            .modify(|r: &mut AnalysisRun| r.meta_mut().managed_fields = None)
            .reflect(store)
            .applied_objects();
        let mut stream = std::pin::pin!(stream);
        loop {
            let next = tokio::select! {
                _ = token.cancelled() => return,
                next = stream.next() => next,
            };
            match next {
                None => return,
                Some(Err(e)) => debug!(error = %e, "AnalysisRun watch"),
                Some(Ok(run)) => {
                    if let Some(a) = finished(&run, &trials) {
                        let _ = announced.send(a);
                    }
                }
            }
        }
    });
}

/// The announcement for `run` if it is finished and its trial is a cached child.
fn finished(run: &AnalysisRun, trials: &Trials) -> Option<Announced> {
    let phase = run.status.as_ref()?.get("phase").and_then(Value::as_str)?;
    if !FINAL.contains(&phase) {
        return None;
    }
    let ns = run.namespace()?;
    let owner = run
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    let (parent, kind) = match owner.kind.as_str() {
        "Pipeline" => (
            trials
                .pipelines
                .label_of(&ns, &owner.name, labels::PARENT_ROLLOUT_NAME),
            PIPELINE_RUN,
        ),
        "MonoVertex" => (
            trials
                .monovertices
                .label_of(&ns, &owner.name, labels::PARENT_ROLLOUT_NAME),
            MONOVERTEX_RUN,
        ),
        _ => return None,
    };
    Some(Announced {
        kind: kind.to_string(),
        parent: parent?,
        namespace: ns,
        isb_rollout: None,
    })
}
