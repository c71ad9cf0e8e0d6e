//! Progressive upgrades against the real control plane and the simulator (scenarios.md A.2 and
//! A.8 under `progressive`): a trial child beside the promoted one with the pods split between
//! them, promotion on success, rollback to the saved scale on failure, force promote by label.

mod support;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use numaplane_api::MonoVertexRollout;
use numaplane_api::common::{Phase, UpgradeStrategy};
use numaplane_api::numaflow::MonoVertex;
use serde_json::{Value, json};
use std::time::Duration;
use support::fixtures::record;
use support::{Harness, condition};

const CONFIG: &str = r#"
defaultUpgradeStrategy: "progressive"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,30,3,1"
    - kind: MonoVertex
      schedule: "0,30,3,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

const GO: &str = "quay.io/numaio/numaflow-go/source-simple-source:stable";
const JAVA: &str = "quay.io/numaio/numaflow-java/source-simple-source:stable";
const BAD: &str = "quay.io/numaio/numaflow-java/source-simple-source:invalid";

fn mvr(image: &str, schedule: Option<&str>) -> Value {
    let mut r = json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "MonoVertexRollout",
        "metadata": {"name": "mvr"},
        "spec": {"monoVertex": {"spec": {
            "scale": {"min": 4, "max": 5},
            "source": {"udsource": {"container": {"image": image}}},
            "sink": {"blackhole": {}}
        }}}
    });
    if let Some(s) = schedule {
        r["spec"]["strategy"] = json!({"progressive": {"assessmentSchedule": s}});
    }
    r
}

fn settled(r: Option<&MonoVertexRollout>) -> Option<MonoVertexRollout> {
    let r = r?;
    let st = r.status.as_ref()?;
    (st.status.phase == Phase::Deployed
        && st.status.upgrade_in_progress == UpgradeStrategy::NoOp
        && st.status.observed_generation == r.metadata.generation?
        && condition(&st.status.conditions, "ChildResourcesHealthy")?.0 == "True")
        .then(|| r.clone())
}

fn image(mv: &MonoVertex) -> &str {
    mv.spec
        .pointer("/source/udsource/container/image")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn state(mv: &MonoVertex) -> Option<&str> {
    mv.labels()
        .get("numaplane.numaproj.io/upgrade-state")
        .map(String::as_str)
}

async fn pods(h: &Harness, mv: &str) -> usize {
    h.api::<Pod>()
        .list(&ListParams::default().labels(&format!(
            "app.kubernetes.io/name={mv},numaflow.numaproj.io/mono-vertex-name={mv}"
        )))
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count()
}

#[tokio::test]
async fn monovertex_success_then_failure_and_force_promote() {
    let h = Harness::start_with_usde("prog-mv", CONFIG).await;
    h.apply::<MonoVertexRollout>(mvr(GO, None)).await;
    h.until("deployed", "mvr", settled).await;
    h.until::<MonoVertex, _, _>("4 pods", "mvr-0", |m| {
        (m?.status.as_ref()?["replicas"] == json!(4)).then_some(())
    })
    .await;
    let promoted_seen = record::<MonoVertex>(&h, "mvr-0");
    let trial_seen = record::<MonoVertex>(&h, "mvr-1");
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Success: a trial mvr-1 beside mvr-0, pods split 2/2, then promoted.
    h.apply::<MonoVertexRollout>(mvr(JAVA, None)).await;
    let st = h
        .until::<MonoVertexRollout, _, _>("trial recorded", "mvr", |r| {
            let p = r?.status.as_ref()?.progressive_status.as_ref()?;
            let sv = p
                .promoted_mono_vertex_status
                .as_ref()?
                .scale_values
                .as_ref()?;
            p.upgrading_mono_vertex_status.as_ref()?;
            Some((sv.clone(), p.clone()))
        })
        .await;
    let values = &st.0["mvr-0"];
    assert_eq!(
        values.original_scale_min_max,
        r#"{"disabled":null,"max":5,"min":4}"#
    );
    assert_eq!(values.scale_to, 2);
    assert_eq!(
        st.1.upgrading_mono_vertex_status
            .as_ref()
            .map(|u| u.child.name.as_str()),
        Some("mvr-1")
    );
    let promoted = h.until("deployed on mvr-1", "mvr", settled).await;
    let last = promoted
        .status
        .as_ref()
        .and_then(|s| s.progressive_status.as_ref())
        .and_then(|p| p.upgrading_mono_vertex_status.as_ref())
        .expect("upgrading status");
    assert_eq!(last.child.name, "mvr-1");
    assert_eq!(
        last.child.assessment_result,
        Some(numaplane_api::progressive::AssessmentResult::Success)
    );
    let mv1: MonoVertex = h.api().get("mvr-1").await.expect("mvr-1");
    assert_eq!(state(&mv1), Some("promoted"));
    assert_eq!(image(&mv1), JAVA);
    assert_eq!(
        mv1.spec["scale"],
        json!({"min": 4, "max": 5}),
        "scale restored"
    );
    h.until::<MonoVertex, _, _>("old promoted deleted", "mvr-0", |m| {
        m.is_none().then_some(())
    })
    .await;
    let scaled_down = promoted_seen
        .lock()
        .expect("lock")
        .iter()
        .any(|m| m.spec["scale"]["min"] == json!(2) && m.spec["scale"]["max"] == json!(2));
    assert!(
        scaled_down,
        "promoted scaled to scaleTo=2 while the trial ran"
    );
    let trial_split = trial_seen.lock().expect("lock").iter().any(|m| {
        state(m) == Some("trial")
            && m.spec["scale"]["min"] == json!(2)
            && m.spec["scale"]["max"] == json!(2)
    });
    assert!(
        trial_split,
        "trial ran initial - scaleTo = 2 pods: {:?}",
        trial_seen
            .lock()
            .expect("lock")
            .iter()
            .map(|m| (state(m).map(str::to_string), m.spec["scale"].clone()))
            .collect::<Vec<_>>()
    );
    let cond = condition(
        &promoted.status.as_ref().expect("status").status.conditions,
        "ProgressiveUpgradeSucceeded",
    )
    .expect("condition");
    assert_eq!(cond.0, "True");

    // Failure: a bad image; the trial never becomes healthy before `end`.
    let failed_seen = record::<MonoVertex>(&h, "mvr-2");
    h.apply::<MonoVertexRollout>(mvr(BAD, Some("0,6,2,1")))
        .await;
    let failed = h
        .until::<MonoVertexRollout, _, _>("failed assessment", "mvr", |r| {
            let r = r?;
            let st = r.status.as_ref()?;
            let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
            (s == "False" && reason == "Failed").then(|| r.clone())
        })
        .await;
    let st = failed.status.as_ref().expect("status");
    assert_eq!(st.status.upgrade_in_progress, UpgradeStrategy::Progressive);
    let up = st
        .progressive_status
        .as_ref()
        .and_then(|p| p.upgrading_mono_vertex_status.as_ref())
        .expect("upgrading");
    assert_eq!(up.child.name, "mvr-2");
    assert!(
        !up.child.failure_reasons.is_empty(),
        "failure reasons recorded"
    );
    // The promoted child is back at its saved scale, the trial at zero.
    h.until::<MonoVertex, _, _>("promoted restored", "mvr-1", |m| {
        (m?.spec["scale"] == json!({"min": 4, "max": 5})).then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("trial at zero", "mvr-2", |m| {
        let m = m?;
        (m.spec["scale"]["max"] == json!(0)).then_some(())
    })
    .await;
    assert!(failed_seen.lock().expect("lock").iter().any(|m| {
        m.labels()
            .get("numaplane.numaproj.io/progressive-result-state")
            == Some(&"failed".to_string())
            || state(m) == Some("trial")
    }));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pods(&h, "mvr-1").await,
        4,
        "promoted runs its original pods again"
    );

    // Force promote by label: the failed trial becomes the promoted child.
    h.api::<MonoVertex>()
        .patch(
            "mvr-2",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"numaplane.numaproj.io/force-promote": "true"}}}),
            ),
        )
        .await
        .expect("label");
    h.until::<MonoVertex, _, _>("force promoted", "mvr-2", |m| {
        let m = m?;
        (state(m) == Some("promoted")
            && m.labels()
                .get("numaplane.numaproj.io/progressive-result-state")
                == Some(&"force-promoted".to_string()))
        .then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("previous deleted", "mvr-1", |m| m.is_none().then_some(()))
        .await;
    h.until::<MonoVertexRollout, _, _>("nothing in progress", "mvr", |r| {
        let st = r?.status.as_ref()?;
        (st.status.upgrade_in_progress == UpgradeStrategy::NoOp).then_some(())
    })
    .await;
}
