//! Fail closed, as a user meets it on the real stack: an unusable controller config holds
//! everything (not ready, the reason in `/readyz`); without a USDE config every change is carried
//! by the most careful strategy, and a deleted one keeps the last one loaded; a recyclable pipeline
//! with no or an unknown reason and no start time is drained, not deleted at once; an ISB service
//! is recreated only once its pipelines have drained or data loss is allowed; a deleted
//! ISBServiceRollout keeps its ISB service while a pipeline uses it; a deleted PipelineRollout
//! drains its pipelines first. Each of these failed open before.

mod support;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use numaplane_api::numaflow::{InterStepBufferService, Pipeline};
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use numaplane_testenv::TestEnv;
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::{phase, record, rv};
use support::scenario::*;
use support::{Harness, Process, eventually, http_get, install_rbac};

const PPND: &str = "defaultUpgradeStrategy: pause-and-drain\n";
const NO_STRATEGY: &str = "defaultUpgradeStrategy: no-strategy\n";

fn pr(name: &str, spec: Value, annotations: Option<Value>) -> Value {
    let mut r = json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": spec}}
    });
    if let Some(a) = annotations {
        r["metadata"]["annotations"] = a;
    }
    r
}

fn desired_phase(p: &Pipeline) -> Option<&str> {
    p.spec
        .pointer("/lifecycle/desiredPhase")
        .and_then(Value::as_str)
}

fn drained(p: &Pipeline) -> bool {
    desired_phase(p) == Some("Paused")
        && phase(p) == "Paused"
        && p.status.as_ref().map(|s| &s["drainedOnPause"]) == Some(&json!(true))
}

/// The last recorded version of a pipeline before it went.
fn last_seen(seen: &std::sync::Mutex<Vec<Pipeline>>) -> Pipeline {
    seen.lock()
        .expect("lock")
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .max_by_key(|p| rv(*p))
        .cloned()
        .expect("the pipeline was recorded")
}

/// `UpgradeStrategyConfigured` (status, reason, message) of rollout `name` (a PipelineRollout, or
/// the ISBServiceRollout `isb`), once settled.
async fn usde_condition(h: &Harness, name: &str) -> Option<(String, String, String)> {
    fn of<R: support::scenario::Rollout>(
        r: Option<&R>,
    ) -> Option<Option<(String, String, String)>> {
        settled(r)?;
        let st = r?.common()?;
        Some(
            st.conditions
                .iter()
                .find(|c| c.type_ == "UpgradeStrategyConfigured")
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())),
        )
    }
    if name == "isb" {
        h.until("isb settled", name, of::<ISBServiceRollout>).await
    } else {
        h.until("pr settled", name, of::<PipelineRollout>).await
    }
}

async fn gone<K>(h: &Harness, what: &str, name: &str)
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    h.until::<K, _, _>(what, name, |o| o.is_none().then_some(()))
        .await;
}

/// An unusable controller config at start-up (no file, an empty one, a misspelt key, a typo in a
/// value): the operator is not ready, says why in `/readyz` and its log, and reconciles nothing
/// (the reference fell back to defaults, whose strategy is `no-strategy`); once the file is
/// fixed it starts.
#[tokio::test]
async fn an_unusable_config_at_start_up_holds_everything_until_fixed() {
    let env = TestEnv::shared_real().await;
    let client = env.client();
    install_rbac(&client).await;
    let ns = env.create_namespace("fc-config").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    let p = Process::start(env, &ns, &config, dir.path(), "typo", &[]);
    let not_ready_saying = |words: &'static [&'static str]| {
        let p = &p;
        async move {
            eventually("not ready, saying why", || async {
                match http_get(p.health, "/readyz").await {
                    Some((503, body)) if words.iter().all(|w| body.contains(w)) => Some(body),
                    _ => None,
                }
            })
            .await
        }
    };
    not_ready_saying(&["cannot read it"]).await;
    std::fs::write(&config, "# emptied\n").expect("config");
    not_ready_saying(&["config.yaml", "empty"]).await;
    std::fs::write(&config, "defaultUpgradeStratgy: pause-and-drain\n").expect("config");
    not_ready_saying(&["defaultUpgradeStratgy", "did you mean"]).await;
    std::fs::write(&config, "defaultUpgradeStrategy: pause-and-drian\n").expect("config");
    not_ready_saying(&["defaultUpgradeStrategy", "pause-and-drian"]).await;

    let isbrs: Api<ISBServiceRollout> = Api::namespaced(client.clone(), &ns);
    isbrs
        .create(
            &Default::default(),
            &serde_json::from_value(isb("2.10.17", "10Mi", None)).expect("isbr"),
        )
        .await
        .expect("create isbr");
    let isbsvcs: Api<InterStepBufferService> = Api::namespaced(client.clone(), &ns);
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let listed = isbsvcs.list(&ListParams::default()).await.expect("list");
        assert!(
            listed.items.is_empty(),
            "nothing is reconciled before the config is valid"
        );
        assert_eq!(p.probe("/readyz").await, Some(503));
    }
    assert!(
        p.log_text().contains("controller config is unusable"),
        "{}",
        p.log_text()
    );

    std::fs::write(&config, PPND).expect("config");
    eventually("ready once the config is fixed", || async {
        (p.probe("/readyz").await == Some(200)).then_some(())
    })
    .await;
    eventually("the ISB service created", || async {
        let listed = isbsvcs.list(&ListParams::default()).await.ok()?;
        (!listed.items.is_empty()).then_some(())
    })
    .await;
}

/// No USDE ConfigMap ever loaded: a change no list names is carried by pause-and-drain under
/// `no-strategy`, and the rollout says why (the reference applied every change directly).
#[tokio::test]
async fn without_a_usde_config_every_change_pauses_and_drains() {
    let h = Harness::start_real_without_usde("fc-nousde", NO_STRATEGY).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr("pr", two_vertices(30), None))
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    for rollout in ["pr", "isb"] {
        let note = usde_condition(&h, rollout).await;
        assert!(
            note.as_ref()
                .is_some_and(|(status, reason, message)| status == "False"
                    && reason == "NoUSDEConfig"
                    && message.contains("carried by pause-and-drain")),
            "{rollout}: {note:?}"
        );
    }
    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<PipelineRollout>(pr("pr", two_vertices(31), None))
        .await;
    eventually("the pause Event names why", || async {
        h.events_about("pr-0")
            .await
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("PipelinePause")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("no upgrade-strategy (USDE) ConfigMap loaded"))
            })
            .then_some(())
    })
    .await;
    h.until::<Pipeline, _, _>("updated and running", "pr-0", |p| {
        let p = p?;
        (p.spec["lifecycle"]["pauseGracePeriodSeconds"] == json!(31)
            && desired_phase(p).is_none()
            && phase(p) == "Running")
            .then_some(())
    })
    .await;
    let seen = seen.lock().expect("lock").clone();
    let update = seen
        .iter()
        .find(|p| p.spec["lifecycle"]["pauseGracePeriodSeconds"] == json!(31))
        .expect("update seen");
    assert!(
        seen.iter().any(|p| drained(p) && rv(p) < rv(update)),
        "paused and drained before the update"
    );
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    let r: PipelineRollout = h.api().get("pr").await.expect("pr");
    let last = r
        .status
        .as_ref()
        .and_then(|s| s.status.upgrade_history.last().cloned())
        .expect("an upgrade recorded");
    assert_eq!(
        last.strategy,
        numaplane_api::common::UpgradeStrategy::PipelinePauseAndDrain,
        "{last:?}"
    );
    h.assert_invariants().await;
}

/// A deleted USDE ConfigMap keeps the last one loaded: a data-loss change still pauses and
/// drains (the reference switched to direct applies), a change no list names stays direct.
#[tokio::test]
async fn a_deleted_usde_config_keeps_the_last_one_loaded() {
    let h = Harness::start_real("fc-delusde", PPND).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr("pr", two_vertices(30), None))
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.delete_usde().await;
    eventually("a Warning Event on the deleted ConfigMap", || async {
        h.events_about(support::USDE_NAME)
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("ConfigDeleted"))
            .then_some(())
    })
    .await;

    // The kept config is a loaded one: no condition says otherwise.
    assert_eq!(usde_condition(&h, "pr").await, None);
    // Not in any list: applied directly, never paused.
    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<PipelineRollout>(pr("pr", two_vertices(31), None))
        .await;
    h.until::<Pipeline, _, _>("direct update", "pr-0", |p| {
        (p?.spec["lifecycle"]["pauseGracePeriodSeconds"] == json!(31)).then_some(())
    })
    .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    assert!(
        seen.lock()
            .expect("lock")
            .iter()
            .all(|p| desired_phase(p).is_none()),
        "a change the kept config calls safe is not paused"
    );

    // A topology change (dataLoss in the kept config): paused and drained first.
    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.apply::<PipelineRollout>(pr("pr", three_vertices(CAT, 31), None))
        .await;
    h.until::<Pipeline, _, _>("three vertices, running", "pr-0", |p| {
        let p = p?;
        (vertex_count(p) == 3 && phase(p) == "Running" && desired_phase(p).is_none()).then_some(())
    })
    .await;
    let seen = seen.lock().expect("lock").clone();
    let update = seen
        .iter()
        .find(|p| vertex_count(p) == 3)
        .expect("update seen");
    assert!(
        seen.iter().any(|p| drained(p) && rv(p) < rv(update)),
        "paused and drained before the topology change"
    );
    h.assert_invariants().await;
}

/// A pipeline labelled recyclable with an empty reason and no start time (another version, or
/// a hand edit): its start time is stamped and it is drained before it goes (the reference
/// deleted it at once, undrained, and took the missing time as expired).
#[tokio::test]
async fn an_unknown_recycle_reason_drains_instead_of_deleting() {
    let h = Harness::start_real("fc-reason", PPND).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr("pr", two_vertices(5), None))
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.until::<Pipeline, _, _>("requires-drain recorded", "pr-0", |p| {
        (p?.annotations()
            .get("numaplane.numaproj.io/requires-drain")?
            == "true")
            .then_some(())
    })
    .await;
    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.merge::<Pipeline>(
        "pr-0",
        json!({"metadata": {"labels": {
            "numaplane.numaproj.io/upgrade-state": "recyclable",
            "numaplane.numaproj.io/upgrade-state-reason": "",
        }}}),
    )
    .await;
    gone::<Pipeline>(&h, "the relabelled pipeline drained and deleted", "pr-0").await;
    let last = last_seen(&seen);
    assert!(drained(&last), "deleted only once drained: {last:?}");
    assert!(
        last.annotations()
            .contains_key("numaplane.numaproj.io/recyclable-start-time"),
        "its start time was stamped"
    );
    assert!(
        !last
            .annotations()
            .contains_key("numaplane.numaproj.io/deletion-reason"),
        "a drained pipeline needs no reason"
    );
    h.assert_invariants().await;
}

/// An ISB service recreate under a Failed pipeline waits until it drains or data loss is
/// allowed (the reference counted Failed as "won't pause", recreated, and deleted the pipeline
/// undrained); with the allowance the reason is written on the pipeline before it goes.
#[tokio::test]
async fn an_isb_recreate_waits_for_a_failed_pipeline_until_data_loss_is_allowed() {
    let h = Harness::start_real("fc-recreate", PPND).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    // A pipeline Numaflow fails: an edge between vertices that do not exist.
    let mut failing = two_vertices(30);
    failing["edges"]
        .as_array_mut()
        .expect("edges")
        .push(json!({"from": "not", "to": "valid"}));
    h.apply::<PipelineRollout>(pr("pr", failing.clone(), None))
        .await;
    h.until::<Pipeline, _, _>("pipeline Failed", "pr-0", |p| {
        (phase(p?) == "Failed").then_some(())
    })
    .await;
    let seen = record::<Pipeline>(&h, "pr-0").await;
    // persistence.volumeSize is a recreate field.
    h.apply::<ISBServiceRollout>(isb("2.10.17", "20Mi", None))
        .await;
    h.until::<ISBServiceRollout, _, _>("the recreate waits, naming the pipeline", ISB, |r| {
        let msg = &r?.status.as_ref()?.status.message;
        (msg.contains("pr-0 (Failed)") && msg.contains("to pause and drain")).then_some(())
    })
    .await;
    h.stays::<Pipeline, _>(
        "the Failed pipeline is kept",
        "pr-0",
        Duration::from_secs(4),
        |p| p.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
    )
    .await;
    let isbs = h
        .api::<InterStepBufferService>()
        .list(&ListParams::default())
        .await
        .expect("list");
    assert!(
        isbs.items
            .iter()
            .all(|i| i.labels().get("numaplane.numaproj.io/upgrade-state")
                != Some(&"recyclable".to_string())),
        "the ISB service is not marked for recreation yet"
    );

    let allow = json!({"numaplane.numaproj.io/allow-data-loss": "true"});
    h.apply::<PipelineRollout>(pr("pr", failing, Some(allow)))
        .await;
    gone::<Pipeline>(&h, "the Failed pipeline deleted by allowance", "pr-0").await;
    let last = last_seen(&seen);
    let reason = last
        .annotations()
        .get("numaplane.numaproj.io/deletion-reason")
        .cloned()
        .unwrap_or_default();
    assert!(
        reason.contains("allow-data-loss"),
        "why it went undrained is on it before it goes: {reason:?}"
    );
    eventually("the Event says data loss was allowed", || async {
        h.events_about(ISB)
            .await
            .iter()
            .any(|e| {
                e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("data loss allowed") && n.contains("pr-0"))
            })
            .then_some(())
    })
    .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    h.assert_invariants().await;
}

/// An ISB service recreate under a pipeline that no PipelineRollout manages, which Numaplane
/// cannot pause, waits until its owner deletes it (or pauses and drains it), naming it; the ISB
/// service is neither deleted nor marked for it meanwhile. Before, only Numaplane's pipelines
/// counted, and the recreate deleted the buffers under it.
#[tokio::test]
async fn an_isb_recreate_waits_for_a_pipeline_numaplane_does_not_manage() {
    let h = Harness::start_real("fc-unmanaged", PPND).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    let child = format!("{ISB}-0");
    let mut spec = two_vertices(30);
    spec["interStepBufferServiceName"] = json!(child);
    h.api::<Pipeline>()
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "numaflow.numaproj.io/v1alpha1",
                "kind": "Pipeline",
                "metadata": {"name": "by-hand"},
                "spec": spec,
            }))
            .expect("pipeline"),
        )
        .await
        .expect("create the pipeline by hand");
    h.until::<Pipeline, _, _>("the pipeline by hand runs", "by-hand", |p| {
        (phase(p?) == "Running").then_some(())
    })
    .await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "20Mi", None))
        .await;
    h.until::<ISBServiceRollout, _, _>("the recreate waits, naming the pipeline", ISB, |r| {
        let msg = &r?.status.as_ref()?.status.message;
        msg.contains("by-hand (Running), not managed by Numaplane")
            .then_some(())
    })
    .await;
    h.stays::<InterStepBufferService, _>(
        "the ISB service under it stays, not marked for recreation",
        &child,
        Duration::from_secs(4),
        |i| {
            i.is_some_and(|i| {
                i.metadata.deletion_timestamp.is_none()
                    && i.labels().get("numaplane.numaproj.io/upgrade-state")
                        != Some(&"recyclable".to_string())
            })
        },
    )
    .await;
    h.history.deleted_by_test("Pipeline", "by-hand");
    h.api::<Pipeline>()
        .delete("by-hand", &DeleteParams::default())
        .await
        .expect("delete the pipeline by hand");
    gone::<Pipeline>(&h, "the pipeline by hand gone", "by-hand").await;
    eventually("recreated at 20Mi", || async {
        let isbs = h
            .api::<InterStepBufferService>()
            .list(&ListParams::default())
            .await
            .ok()?;
        isbs.items
            .iter()
            .any(|i| {
                i.name_any() != child
                    && i.spec["jetstream"]["persistence"]["volumeSize"] == json!("20Mi")
            })
            .then_some(())
    })
    .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    h.assert_invariants().await;
}

/// An ISB service recreate under a pipeline that paused without draining (its grace period
/// ended first) resumes it to drain again, up to three times, then holds saying so; a drain on
/// a later attempt lets the recreate go on. Before, the recreate waited for good.
#[tokio::test]
async fn a_pipeline_paused_without_draining_is_resumed_to_drain_again() {
    let h = Harness::start_real("fc-redrain", PPND).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    // A short grace period: each pause that does not drain ends Paused undrained quickly.
    h.apply::<PipelineRollout>(pr("pr", two_vertices(3), None))
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    let seen = record::<Pipeline>(&h, "pr-0").await;
    // Messages stuck for good: no pause drains.
    h.daemon().set_pending(&h.ns, "pr-0", 100);
    h.apply::<ISBServiceRollout>(isb("2.10.17", "20Mi", None))
        .await;
    h.until::<ISBServiceRollout, _, _>("held after the last attempt", ISB, |r| {
        let msg = &r?.status.as_ref()?.status.message;
        msg.contains("pr-0 (Paused without draining; resumed to drain again 3 of 3 times)")
            .then_some(())
    })
    .await;
    let attempts = |p: &Pipeline| {
        p.annotations()
            .get("numaplane.numaproj.io/drain-attempts")
            .and_then(|a| a.split(' ').next()?.parse::<u32>().ok())
    };
    // Each attempt is a real resume (Running) followed by a new pause, observed on the pipeline.
    let resumed = seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|p| phase(p) == "Running" && attempts(p).is_some())
        .filter_map(attempts)
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(resumed, [1, 2, 3].into(), "resumed once per attempt");
    h.stays::<Pipeline, _>(
        "no fourth resume: it stays paused",
        "pr-0",
        Duration::from_secs(8),
        |p| p.is_some_and(|p| desired_phase(p) == Some("Paused") && attempts(p) == Some(3)),
    )
    .await;
    // One Event per resume; the API server's Event series counts the repeats of one reason.
    let resumes: i32 = h
        .events_about("pr-0")
        .await
        .iter()
        .filter(|e| e.reason.as_deref() == Some("PipelineDrainAgain"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    assert_eq!(resumes, 3, "one Event per resume");

    // Allowed to go on by the user, the recreate follows (and the ISB service is new).
    let allow = json!({"numaplane.numaproj.io/allow-data-loss": "true"});
    h.apply::<PipelineRollout>(pr("pr", two_vertices(3), Some(allow)))
        .await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    h.apply::<PipelineRollout>(pr("pr", two_vertices(3), None))
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;

    // Another recreate: stuck at first, drained on the second attempt, recreated without help.
    let child = current_pipeline(&h).await;
    h.daemon().set_pending(&h.ns, &child, 100);
    h.apply::<ISBServiceRollout>(isb("2.10.17", "30Mi", None))
        .await;
    h.until::<Pipeline, _, _>("resumed to drain again", &child, |p| {
        (attempts(p?) == Some(1)).then_some(())
    })
    .await;
    h.daemon().set_pending(&h.ns, &child, 0);
    gone::<Pipeline>(&h, "the drained pipeline goes with the recreate", &child).await;
    h.until("isb settled", ISB, settled::<ISBServiceRollout>)
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    h.assert_invariants().await;
}

async fn current_pipeline(h: &Harness) -> String {
    let list = h
        .api::<Pipeline>()
        .list(&ListParams::default())
        .await
        .expect("list");
    let names: Vec<String> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    assert_eq!(names.len(), 1, "one pipeline: {names:?}");
    names[0].clone()
}

/// Deleting an ISBServiceRollout keeps its ISB service while a pipeline uses it; deleting the
/// PipelineRollout pauses and drains its pipeline first; then both go.
#[tokio::test]
async fn deletions_protect_data() {
    let h = Harness::start_real("fc-delete", PPND).await;
    h.apply::<ISBServiceRollout>(isb("2.10.17", "10Mi", None))
        .await;
    h.apply::<PipelineRollout>(pr("pr", two_vertices(5), None))
        .await;
    h.until("pr settled", "pr", settled::<PipelineRollout>)
        .await;
    let isbsvc = h
        .api::<InterStepBufferService>()
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .first()
        .map(|i| i.name_any())
        .expect("an ISB service");

    h.api::<ISBServiceRollout>()
        .delete(ISB, &DeleteParams::default())
        .await
        .expect("delete isbr");
    h.until::<ISBServiceRollout, _, _>("the deletion waits, saying why", ISB, |r| {
        let msg = &r?.status.as_ref()?.status.message;
        (msg.contains("pr-0") && msg.contains("kept while pipelines")).then_some(())
    })
    .await;
    h.stays::<InterStepBufferService, _>(
        "the ISB service stays under its pipeline",
        &isbsvc,
        Duration::from_secs(4),
        |i| i.is_some_and(|i| i.metadata.deletion_timestamp.is_none()),
    )
    .await;
    assert!(
        h.events_about(ISB)
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("DeletionBlocked")),
        "a Warning Event says the deletion is blocked"
    );

    let seen = record::<Pipeline>(&h, "pr-0").await;
    h.api::<PipelineRollout>()
        .delete("pr", &DeleteParams::default())
        .await
        .expect("delete pr");
    gone::<Pipeline>(&h, "the pipeline drained and deleted", "pr-0").await;
    let last = last_seen(&seen);
    assert!(
        drained(&last),
        "paused and drained before deletion: {last:?}"
    );
    gone::<PipelineRollout>(&h, "the PipelineRollout gone", "pr").await;
    gone::<InterStepBufferService>(&h, "the ISB service gone once unused", &isbsvc).await;
    gone::<ISBServiceRollout>(&h, "the ISBServiceRollout gone", ISB).await;
    h.assert_invariants().await;
}
