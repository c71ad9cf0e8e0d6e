//! Keeps Numaplane's AnalysisRuns in a cache a pass reads, and wakes a rollout the moment its
//! trial's run finishes; without this watch it would look only at its next assessment sample,
//! up to the schedule's interval (10 s by default) after Argo Rollouts decided. The verdict a
//! finished run brings is due at once: its pass is taken beside the workers (`due_steps.rs`). Only
//! Numaplane's runs are watched (`app.kubernetes.io/part-of=numaplane`), and only a final
//! phase wakes anyone: Argo rewrites a running run's status at every measurement. A run is
//! cached as its owners and outcome only ([`AnalysisRunPhase`]).

use crate::child_cache::ChildCache;
use crate::due_steps::{DueSteps, StepOf};
use crate::rollout::Rollout;
use crate::watches::Announced;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use numaplane_api::keys::{labels, upgrade_state};
use numaplane_api::narrow::AnalysisRunPhase;
use numaplane_api::numaflow::{MonoVertex, Pipeline};
use numaplane_api::{MonoVertexRollout, PipelineRollout};
use std::sync::Arc;
use std::time::Instant;
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

/// Starts the watch; each finished run of a trial is announced on `announced`, its rollout's
/// pass marked due in `due`.
pub(crate) fn spawn(
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    api: Api<AnalysisRunPhase>,
    trials: Trials,
    store: reflector::store::Writer<AnalysisRunPhase>,
    announced: broadcast::Sender<Announced>,
    due: Arc<DueSteps>,
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
                    if let Some((a, step)) = finished(&run, &trials) {
                        if let Some(step) = step {
                            due.schedule(step, Some(Instant::now()));
                        }
                        let _ = announced.send(a);
                    }
                }
            }
        }
    });
}

/// The announcement for `run` if it is finished and its trial is a cached child, with the
/// trial's rollout's step while the child is still a trial (a verdict waits on the run; a
/// relist also announces the runs of children promoted long ago).
fn finished(run: &AnalysisRunPhase, trials: &Trials) -> Option<(Announced, Option<StepOf>)> {
    if !FINAL.contains(&run.phase.as_deref()?) {
        return None;
    }
    let ns = run.namespace()?;
    let owner = run
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    let (read, kind, controller) = match owner.kind.as_str() {
        "Pipeline" => (
            trials.pipelines.read_meta(&ns, &owner.name, trial_of),
            PIPELINE_RUN,
            PipelineRollout::KIND.controller(),
        ),
        "MonoVertex" => (
            trials.monovertices.read_meta(&ns, &owner.name, trial_of),
            MONOVERTEX_RUN,
            MonoVertexRollout::KIND.controller(),
        ),
        _ => return None,
    };
    let (parent, rollout_uid) = read?;
    let parent = parent?;
    let step = rollout_uid.map(|uid| StepOf {
        controller,
        namespace: ns.clone(),
        name: parent.clone(),
        uid,
    });
    let announced = Announced {
        kind: kind.to_string(),
        parent,
        namespace: ns,
        isb_rollout: None,
    };
    Some((announced, step))
}

/// A run's owner as the announcement reads it: its rollout's name and, while it is still a
/// trial, its rollout's UID (its controller).
fn trial_of(meta: &ObjectMeta) -> (Option<String>, Option<String>) {
    let label = |k: &str| meta.labels.as_ref()?.get(k).cloned();
    let uid = (label(labels::UPGRADE_STATE).as_deref() == Some(upgrade_state::TRIAL))
        .then(|| {
            meta.owner_references
                .as_ref()?
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.clone())
        })
        .flatten();
    (label(labels::PARENT_ROLLOUT_NAME), uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::child_cache::INDEXED_LABELS;
    use kube::runtime::watcher::Event;
    use numaplane_api::compact::Compact;
    use numaplane_api::label_index::LabelIndex;
    use serde_json::{Value, json};

    fn cache<K>(objects: &[Value]) -> ChildCache<K>
    where
        K: numaplane_api::compact::RawObject + Clone + 'static,
    {
        let (reader, mut writer) = reflector::store();
        for o in objects {
            let c: Compact<K> = serde_json::from_str(&o.to_string()).expect("compact");
            writer.apply_watcher_event(&Event::Apply(c));
        }
        ChildCache::new(reader, Arc::new(LabelIndex::of_keys(INDEXED_LABELS)))
    }

    fn run(phase: &str, owner_kind: &str, owner: &str) -> AnalysisRunPhase {
        serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun",
            "metadata": {"name": "run", "namespace": "ns", "ownerReferences": [{
                "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": owner_kind,
                "name": owner, "uid": "trial-uid", "controller": true}]},
            "spec": {"metrics": []},
            "status": {"phase": phase},
        }))
        .expect("run")
    }

    /// Pipeline `p-1` of PipelineRollout `p` (UID `rollout-uid`), labelled `state`.
    fn trials(state: &str) -> Trials {
        let child = json!({
            "metadata": {"name": "p-1", "namespace": "ns",
                "labels": {labels::PARENT_ROLLOUT_NAME: "p", labels::UPGRADE_STATE: state},
                "ownerReferences": [{"apiVersion": "numaplane.numaproj.io/v1alpha1",
                    "kind": "PipelineRollout", "name": "p", "uid": "rollout-uid",
                    "controller": true}]},
            "spec": {"vertices": []},
        });
        Trials {
            pipelines: cache(&[child]),
            monovertices: cache(&[]),
        }
    }

    #[test]
    fn a_finished_run_names_its_trial_s_rollout_and_that_rollout_s_uid() {
        let trial = trials("trial");
        let (a, step) = finished(&run("Successful", "Pipeline", "p-1"), &trial).expect("finished");
        assert_eq!((a.kind.as_str(), a.parent.as_str()), (PIPELINE_RUN, "p"));
        let step = step.expect("a verdict is due");
        assert_eq!(
            (step.controller, step.namespace.as_str(), step.name.as_str()),
            ("pipeline-rollout-controller", "ns", "p")
        );
        assert_eq!(step.uid, "rollout-uid");
        // A run still measuring wakes nobody; nor one whose trial is not cached.
        assert!(finished(&run("Running", "Pipeline", "p-1"), &trial).is_none());
        assert!(finished(&run("Failed", "MonoVertex", "p-1"), &trial).is_none());
        // The run of a child promoted since (a relist announces it again): no verdict is due.
        let (a, step) =
            finished(&run("Successful", "Pipeline", "p-1"), &trials("promoted")).expect("finished");
        assert_eq!(a.parent, "p");
        assert_eq!(step, None);
    }
}
