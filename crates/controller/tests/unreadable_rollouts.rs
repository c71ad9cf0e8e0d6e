//! A rollout the API server accepts and Numaplane's types refuse (a cluster still on a looser
//! CustomResourceDefinition, e.g. one installed before ours): it is named, with the field, in a
//! Warning Event, left alone until it changes, and stops no other rollout. Its own binary: the
//! test loosens the PipelineRollout CRD of its control plane.

mod support;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use numaplane_api::PipelineRollout;
use serde_json::{Value, json};
use support::{Harness, eventually};

const CRD: &str = "pipelinerollouts.numaplane.numaproj.io";

fn pr(name: &str) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": {
            "interStepBufferServiceName": "isb",
            "vertices": [
                {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {"rpu": 1}}},
                {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
            ],
            "edges": [{"from": "in", "to": "out"}]
        }}}
    })
}

/// The rollout as the API server has it, untyped.
async fn raw(api: &Api<DynamicObject>, name: &str) -> Value {
    serde_json::to_value(api.get(name).await.expect("get")).expect("json")
}

#[tokio::test]
async fn a_rollout_our_types_refuse_is_reported_and_stops_nothing_else() {
    let h = Harness::start_real_with_config("unreadable", support::TEST_CONFIG).await;
    h.apply::<numaplane_api::ISBServiceRollout>(support::fixtures::isb_rollout(
        "isb",
        json!({"version": "2.10.17"}),
    ))
    .await;

    // The CRD as an older install might have it: any string as `status.phase`.
    let crds: Api<CustomResourceDefinition> = Api::all(h.client.clone());
    let crd = crds.get(CRD).await.expect("the PipelineRollout CRD");
    let path = "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/phase/enum";
    let has_enum = serde_json::to_value(&crd)
        .expect("json")
        .pointer(path)
        .is_some();
    assert!(has_enum, "the shipped CRD restricts status.phase");
    let remove: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": path}])).expect("patch");
    crds.patch(CRD, &PatchParams::default(), &Patch::<()>::Json(remove))
        .await
        .expect("loosen the CRD");

    let ar = ApiResource::erase::<PipelineRollout>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), &h.ns, &ar);
    h.apply::<PipelineRollout>(pr("odd")).await;
    // Written once the loosened schema is in force (the API server switches over shortly).
    eventually("a status.phase our types refuse, accepted", || async {
        api.patch_status(
            "odd",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Paused"}})),
        )
        .await
        .ok()
    })
    .await;

    // Named, with its field and value, in a Warning Event (`status`: the common fields are
    // flattened into it, which hides the deeper path from the parser).
    let note = eventually("a Warning Event naming status.phase", || async {
        h.events_about("odd")
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("InvalidSpec"))
            .and_then(|e| Some((e.type_?, e.note?)))
    })
    .await;
    assert_eq!(note.0, "Warning");
    assert_eq!(
        note.1,
        "PipelineRollout odd cannot be read: status: unknown variant `Paused`, expected one of \
         ``, `Pending`, `Deployed`, `Failed`"
    );
    // Left alone: its status is not overwritten.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(raw(&api, "odd").await["status"]["phase"], "Paused");

    // Another rollout is deployed meanwhile.
    h.apply::<PipelineRollout>(pr("fine")).await;
    h.until::<PipelineRollout, _, _>("fine deployed", "fine", |r| {
        (r?.status.as_ref()?.status.phase == numaplane_api::common::Phase::Deployed).then_some(())
    })
    .await;

    // Once readable again it is reconciled like any other.
    api.patch_status(
        "odd",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Pending"}})),
    )
    .await
    .expect("a readable phase");
    eventually("odd deployed once readable", || async {
        (raw(&api, "odd").await["status"]["phase"] == "Deployed").then_some(())
    })
    .await;
    h.assert_invariants().await;
}
