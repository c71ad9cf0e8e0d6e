//! Bad input is reported in status (naming the field) and as an Event, never crashes the
//! operator, never touches objects that aren't ours, and doesn't stop other rollouts.

mod support;

use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use numaplane_api::common::Phase;
use numaplane_api::numaflow::Pipeline;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use serde_json::{Value, json};
use support::{Harness, condition, eventually};

fn pr(name: &str, spec: Value, riders: Value) -> Value {
    json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": name},
        "spec": {"pipeline": {"spec": spec}, "riders": riders}
    })
}

fn good_spec() -> Value {
    json!({
        "interStepBufferServiceName": "isb",
        "vertices": [
            {"name": "in", "scale": {"min": 1, "max": 1}, "source": {"generator": {"rpu": 1}}},
            {"name": "out", "scale": {"min": 1, "max": 1}, "sink": {"log": {}}}
        ],
        "edges": [{"from": "in", "to": "out"}]
    })
}

/// The ISB service `isb` the pipelines of these tests use.
async fn install_isb(h: &Harness) {
    h.apply::<ISBServiceRollout>(support::fixtures::isb_rollout(
        "isb",
        json!({"version": "2.10.17"}),
    ))
    .await;
}

fn failed_with(msg: &'static str) -> impl FnMut(Option<&PipelineRollout>) -> Option<String> {
    move |pr| {
        let st = pr?.status.as_ref()?;
        (st.status.phase == Phase::Failed && st.status.message.contains(msg))
            .then(|| st.status.message.clone())
    }
}

#[tokio::test]
async fn invalid_input_is_reported_and_isolated() {
    let h = Harness::start_real_with_config("invalid", support::TEST_CONFIG).await;
    install_isb(&h).await;

    // A wrong type in scale: Failed, naming the field; no child is created.
    let mut bad_scale = good_spec();
    bad_scale["vertices"][0]["scale"]["min"] = "3x".into();
    h.apply::<PipelineRollout>(pr("bad-scale", bad_scale, json!([])))
        .await;
    let msg = h
        .until(
            "bad scale reported",
            "bad-scale",
            failed_with("spec.pipeline.spec.vertices[0].scale.min"),
        )
        .await;
    assert!(msg.contains("invalid Numaflow Pipeline spec"), "{msg}");

    // A spec that is not an object.
    h.apply::<PipelineRollout>(pr("not-object", json!({"vertices": "in"}), json!([])))
        .await;
    h.until(
        "non-array vertices reported",
        "not-object",
        failed_with("spec.pipeline.spec.vertices"),
    )
    .await;

    // A template tag left open in one value: named at its field, and it swallows nothing
    // around it (the reference's text-level templating turned the image into "").
    let mut open_tag = good_spec();
    open_tag["vertices"][1]["sink"] =
        json!({"udsink": {"container": {"image": "my-sink:{{.pipeline-name"}}});
    open_tag["vertices"][1]["scale"]["max"] = json!(1);
    h.apply::<PipelineRollout>(pr("open-tag", open_tag, json!([])))
        .await;
    let msg = h
        .until(
            "open template tag reported at its field",
            "open-tag",
            failed_with(
                r#"spec.pipeline.spec.vertices[1].sink.udsink.container.image: "{{" is not closed"#,
            ),
        )
        .await;
    assert!(
        !msg.contains("interStepBufferServiceName"),
        "only the one value: {msg}"
    );

    // A key server-side apply refuses (U+FFFF): named at its field, escaped, so the status
    // quoting it can be written (it once could not: the rollout had no status at all; found by
    // hostile_input.rs).
    let mut refused_key = good_spec();
    refused_key["vertices"][1]["sink"]["log"] = json!({"\u{ffff}": "x"});
    // Created as JSON: an apply (YAML) would be refused by the API server itself.
    let mut created = pr("refused-key", refused_key, json!([]));
    created["metadata"]["namespace"] = h.ns.clone().into();
    h.api::<PipelineRollout>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(created).expect("rollout"),
        )
        .await
        .expect("create");
    h.until(
        "a refused character reported at its field",
        "refused-key",
        failed_with(
            r#"spec.pipeline.spec.vertices[1].sink.log.\u{FFFF}: contains the character U+FFFF, which server-side apply (read as YAML) refuses"#,
        ),
    )
    .await;

    // A rider kind the configuration doesn't permit.
    let secret_rider = json!([{"definition": {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "b"}
    }}]);
    h.apply::<PipelineRollout>(pr("bad-rider", good_spec(), secret_rider))
        .await;
    h.until(
        "unpermitted rider reported",
        "bad-rider",
        failed_with("spec.riders[0].definition.kind: rider definitions contained unpermitted Kind core/Secret"),
    )
    .await;

    // A rider naming another namespace: created in the rollout's namespace only, and a
    // Warning Event names the field (the reference moves it silently).
    let elsewhere = json!([{"definition": {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "kube-system"}, "data": {"a": "b"}
    }}]);
    h.apply::<PipelineRollout>(pr("elsewhere", good_spec(), elsewhere))
        .await;
    let cms = |ns: &str| {
        kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(h.client.clone(), ns)
    };
    eventually("the rider in the rollout's namespace", || async {
        cms(&h.ns).get_opt("cm-elsewhere-0").await.ok().flatten()
    })
    .await;
    assert!(
        cms("kube-system")
            .get_opt("cm-elsewhere-0")
            .await
            .expect("get")
            .is_none(),
        "nothing created in the namespace the rider named"
    );
    let note = eventually("a Warning Event naming the field", || async {
        warnings(&h, "elsewhere")
            .await
            .into_iter()
            .find(|(reason, _)| reason == "RiderNamespaceIgnored")
            .map(|(_, note)| note)
    })
    .await;
    assert!(
        note.contains("spec.riders[0].definition.metadata.namespace")
            && note.contains("kube-system"),
        "{note}"
    );

    // A child name taken by someone else's Pipeline: never taken over; the next name is used.
    let foreign = json!({
        "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "Pipeline",
        "metadata": {"name": "taken-0", "namespace": h.ns},
        "spec": {"vertices": []}
    });
    let foreign: Pipeline = serde_json::from_value(foreign).expect("pipeline");
    h.api::<Pipeline>()
        .create(&PostParams::default(), &foreign)
        .await
        .expect("create foreign pipeline");
    h.apply::<PipelineRollout>(pr("taken", good_spec(), json!([])))
        .await;
    h.until::<Pipeline, _, _>("rollout moves on to the next name", "taken-1", |p| {
        p.map(|_| ())
    })
    .await;
    let untouched: Pipeline = h.api().get("taken-0").await.expect("foreign pipeline");
    assert!(untouched.labels().is_empty(), "{:?}", untouched.labels());
    assert!(untouched.owner_references().is_empty());
    assert_eq!(untouched.spec, json!({"vertices": []}));

    // A 32-bit field past its range is refused by the API server, naming the field: stored, it
    // would fail every list of PipelineRollouts in the operator (found by hostile_input.rs).
    let mut out_of_range = pr("too-big", good_spec(), json!([]));
    out_of_range["metadata"]["namespace"] = h.ns.clone().into();
    out_of_range["spec"]["strategy"] = json!({"recycleStrategy": {"scaleFactor": 2147483648i64}});
    let refused = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        h.client.clone(),
        &h.ns,
        &kube::api::ApiResource::erase::<PipelineRollout>(&()),
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(out_of_range).expect("object"),
    )
    .await;
    match refused {
        Err(kube::Error::Api(e)) => assert!(
            e.code == 422
                && e.message
                    .contains("spec.strategy.recycleStrategy.scaleFactor"),
            "{e:?}"
        ),
        other => panic!("an out-of-range scaleFactor was accepted: {other:?}"),
    }

    // An ISB service without `jetstream`: the real Numaflow controller finalizes it but cannot
    // uninstall it, so once created it could never be deleted, nor its rollout (found by
    // hostile_input.rs). Refused before anything is created, and the rollout goes when deleted.
    h.apply::<ISBServiceRollout>(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "ISBServiceRollout",
        "metadata": {"name": "no-jetstream"},
        "spec": {"interStepBufferService": {"spec": {}}}
    }))
    .await;
    h.until::<ISBServiceRollout, _, _>("missing jetstream reported", "no-jetstream", |r| {
        let st = r?.status.as_ref()?;
        (st.status.phase == Phase::Failed
            && st
                .status
                .message
                .contains("spec.interStepBufferService.spec.jetstream: is required"))
        .then_some(())
    })
    .await;
    let isbsvcs = h.api::<numaplane_api::numaflow::InterStepBufferService>();
    assert!(
        isbsvcs
            .get_opt("no-jetstream-0")
            .await
            .expect("get")
            .is_none(),
        "no InterStepBufferService created"
    );
    h.api::<ISBServiceRollout>()
        .delete("no-jetstream", &Default::default())
        .await
        .expect("delete");
    h.until::<ISBServiceRollout, _, _>("the rollout deleted", "no-jetstream", |r| {
        r.is_none().then_some(())
    })
    .await;

    // Meanwhile a valid rollout next to the broken ones deploys normally.
    h.apply::<PipelineRollout>(pr("good", good_spec(), json!([])))
        .await;
    h.until::<PipelineRollout, _, _>("good rollout deployed", "good", |pr| {
        let st = pr?.status.as_ref()?;
        (st.status.phase == Phase::Deployed
            && condition(&st.status.conditions, "ChildResourceDeployed")?.0 == "True")
            .then_some(())
    })
    .await;

    // Failures are Warning Events naming the problem, aggregated rather than repeated.
    let events: kube::Api<Event> = kube::Api::namespaced(h.client.clone(), &h.ns);
    let ev = eventually("a ReconcileFailed event for bad-scale", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("ReconcileFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad-scale")
            })
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(
        ev.note.as_deref().unwrap_or_default().contains("scale.min"),
        "{:?}",
        ev.note
    );
    assert_eq!(ev.reporting_controller.as_deref(), Some("pipeline-rollout"));
    let bad_scale_events = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad-scale"))
        .count();
    assert_eq!(
        bad_scale_events, 1,
        "one aggregated Event series, not a storm"
    );
    h.assert_invariants().await;
}

/// A ValidatingAdmissionPolicy refusing the operator's updates of `resource` (a subresource
/// too) for the object `name` of the test namespace when the CEL condition `refuse` holds;
/// [`unrefuse`] removes it.
async fn refuse(h: &Harness, policy: &str, resource: &str, name: &str, refuse: &str) {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::discovery::ApiResource;
    let gvk = |kind: &str| {
        ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            kind,
        ))
    };
    let pp = PatchParams::apply("numaplane-tests").force();
    let expression = format!(
        "!(request.userInfo.username == '{}' && request.namespace == '{}' && object.metadata.name == '{name}' && ({refuse}))",
        numaplane_testenv::controlplane::OPERATOR_USER,
        h.ns
    );
    let p: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["numaplane.numaproj.io"], "apiVersions": ["*"],
                "operations": ["UPDATE"], "resources": [resource]
            }]},
            "validations": [{"expression": expression, "message": "refused by the test"}]
        }
    }))
    .expect("policy");
    Api::<DynamicObject>::all_with(h.client.clone(), &gvk("ValidatingAdmissionPolicy"))
        .patch(policy, &pp, &Patch::Apply(&p))
        .await
        .expect("apply policy");
    let b: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"]}
    }))
    .expect("binding");
    Api::<DynamicObject>::all_with(h.client.clone(), &gvk("ValidatingAdmissionPolicyBinding"))
        .patch(policy, &pp, &Patch::Apply(&b))
        .await
        .expect("apply binding");
}

async fn unrefuse(h: &Harness, policy: &str) {
    use kube::api::{Api, DeleteParams, DynamicObject};
    use kube::discovery::ApiResource;
    for kind in [
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ] {
        let ar = ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            kind,
        ));
        let _ = Api::<DynamicObject>::all_with(h.client.clone(), &ar)
            .delete(policy, &DeleteParams::default())
            .await;
    }
}

/// Polls until the operator's dry-run `patch` of PipelineRollout `name` (its status with
/// `status`) is refused (`refused`) or accepted: an admission policy takes a moment to apply.
async fn until_policy(h: &Harness, name: &str, status: bool, patch: Value, refused: bool) {
    use kube::api::{Patch, PatchParams};
    let api: kube::Api<PipelineRollout> = kube::Api::namespaced(h.env.operator_client(), &h.ns);
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    eventually("the admission policy in effect", || async {
        let res = if status {
            api.patch_status(name, &pp, &Patch::Merge(&patch)).await
        } else {
            let p: json_patch::Patch = serde_json::from_value(patch.clone()).expect("json patch");
            api.patch(name, &pp, &Patch::<()>::Json(p)).await
        };
        let now_refused =
            matches!(&res, Err(kube::Error::Api(e)) if e.message.contains("refused by the test"));
        (now_refused == refused).then_some(())
    })
    .await;
}

/// Warning Events regarding `name`: (reason, note).
async fn warnings(h: &Harness, name: &str) -> Vec<(String, String)> {
    h.events_about(name)
        .await
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Writes of our own objects that the API server refuses are reported with the reference's
/// Warning reasons (`UpdateStatusFailed` for status, `UpdateFailed` for the finalizer), and the
/// rollout goes on once the writes are accepted again.
#[tokio::test]
async fn refused_writes_of_our_own_objects_are_reported() {
    const F: &str = "numaplane.numaproj.io/numaplane-controller";
    let h = Harness::start_real_with_config("refused", support::TEST_CONFIG).await;
    install_isb(&h).await;
    h.apply::<PipelineRollout>(pr("pr", good_spec(), json!([])))
        .await;
    let deployed = |pr: Option<&PipelineRollout>| {
        let pr = pr?;
        let st = pr.status.as_ref()?;
        (st.status.phase == Phase::Deployed
            && st.status.observed_generation == pr.metadata.generation.unwrap_or(-1))
        .then_some(())
    };
    h.until("deployed", "pr", deployed).await;

    // The status may not be written.
    let policy = format!("refuse-status-{}", h.ns);
    refuse(&h, &policy, "pipelinerollouts/status", "pr", "true").await;
    let probe = json!({"status": {"message": "probe"}});
    until_policy(&h, "pr", true, probe.clone(), true).await;
    let mut changed = good_spec();
    changed["vertices"][1]["scale"]["max"] = 2.into();
    h.apply::<PipelineRollout>(pr("pr", changed, json!([])))
        .await;
    let found = eventually("UpdateStatusFailed for the refused status", || async {
        warnings(&h, "pr")
            .await
            .into_iter()
            .find(|(r, _)| r == "UpdateStatusFailed")
    })
    .await;
    assert!(found.1.contains("failed to update status"), "{found:?}");
    assert!(found.1.contains("refused by the test"), "{found:?}");
    unrefuse(&h, &policy).await;
    until_policy(&h, "pr", true, probe, false).await;
    h.until("deployed once the status is accepted", "pr", deployed)
        .await;

    // The finalizer may not be removed: the deletion waits, saying why.
    let policy = format!("refuse-finalizer-{}", h.ns);
    let removes_ours = format!(
        "has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers.exists(f, f == '{F}') \
         && !(has(object.metadata.finalizers) && object.metadata.finalizers.exists(f, f == '{F}'))"
    );
    refuse(&h, &policy, "pipelinerollouts", "pr", &removes_ours).await;
    let live: PipelineRollout = h.api().get("pr").await.expect("pr");
    let idx = live
        .finalizers()
        .iter()
        .position(|f| f == F)
        .expect("our finalizer");
    let remove = json!([{"op": "remove", "path": format!("/metadata/finalizers/{idx}")}]);
    until_policy(&h, "pr", false, remove.clone(), true).await;
    h.api::<PipelineRollout>()
        .delete("pr", &Default::default())
        .await
        .expect("delete pr");
    let found = eventually("UpdateFailed for the refused finalizer removal", || async {
        warnings(&h, "pr")
            .await
            .into_iter()
            .find(|(r, _)| r == "UpdateFailed")
    })
    .await;
    assert!(found.1.contains(F), "{found:?}");
    assert!(found.1.contains("refused by the test"), "{found:?}");
    unrefuse(&h, &policy).await;
    h.until::<PipelineRollout, _, _>("deleted once accepted", "pr", |pr| {
        pr.is_none().then_some(())
    })
    .await;
    h.assert_invariants().await;
}

/// A child spec nested deeper than serde_json reads (128 levels; the API server stores up to
/// 10,000) is Failed naming the field, and does not stop the kind: after a restart, whose list
/// of PipelineRollouts includes it, another rollout still deploys. Before, that list failed as a
/// whole and no PipelineRollout was reconciled again (found by hostile_input.rs).
#[tokio::test]
async fn a_spec_nested_too_deep_is_reported_and_does_not_stop_the_kind() {
    let mut h = Harness::start_real_with_config("deep", support::TEST_CONFIG).await;
    install_isb(&h).await;
    let mut deep = good_spec();
    deep["vertices"][0]["source"]["generator"]["extra"] =
        (0..200).fold(json!("bottom"), |v, _| json!({"a": v}));
    // Sent as text: the typed client would have to read the answer.
    let body = serde_json::to_vec(&json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1",
        "kind": "PipelineRollout",
        "metadata": {"name": "deep", "namespace": h.ns},
        "spec": {"pipeline": {"spec": deep}}
    }))
    .expect("json");
    let url = format!(
        "/apis/numaplane.numaproj.io/v1alpha1/namespaces/{}/pipelinerollouts",
        h.ns
    );
    let req = kube::core::Request::new(&url)
        .create(&PostParams::default(), body)
        .expect("request");
    h.client
        .request_text(req)
        .await
        .expect("the API server stores it");
    h.until(
        "the deep spec reported",
        "deep",
        failed_with("spec.pipeline.spec: cannot be read: nested deeper than 128 levels"),
    )
    .await;
    h.restart_operator().await;
    h.apply::<PipelineRollout>(pr("after", good_spec(), json!([])))
        .await;
    h.until::<PipelineRollout, _, _>("a rollout deployed after the restart", "after", |pr| {
        let st = pr?.status.as_ref()?;
        (st.status.phase == Phase::Deployed).then_some(())
    })
    .await;
    // Raw too: kube reads a delete's answer as a plain JSON value first.
    let req = kube::core::Request::new(url)
        .delete("deep", &Default::default())
        .expect("request");
    h.client
        .request_text(req)
        .await
        .expect("delete the deep rollout");
    h.until::<PipelineRollout, _, _>("the deep rollout gone", "deep", |pr| {
        pr.is_none().then_some(())
    })
    .await;
    h.assert_invariants().await;
}

/// A deleted rollout whose child keeps another controller's finalizer says so in a Warning
/// Event naming the child and the finalizer, and goes once the finalizer does.
#[tokio::test]
async fn a_child_whose_deletion_is_blocked_is_reported() {
    const HOLD: &str = "example.com/hold";
    let h = Harness::start_real_with_config("blocked", support::TEST_CONFIG).await;
    h.apply::<ISBServiceRollout>(support::fixtures::isb_rollout(
        "held",
        json!({"version": "2.10.17"}),
    ))
    .await;
    let isbsvcs = h.api::<numaplane_api::numaflow::InterStepBufferService>();
    eventually("the child created", || async {
        isbsvcs.get_opt("held-0").await.ok().flatten()
    })
    .await;
    let add = json!([{"op": "add", "path": "/metadata/finalizers/-", "value": HOLD}]);
    let add: json_patch::Patch = serde_json::from_value(add).expect("patch");
    eventually("a finalizer of someone else's on the child", || async {
        // The Numaflow controller adds its own first (the list must exist for `-`).
        isbsvcs
            .patch(
                "held-0",
                &Default::default(),
                &kube::api::Patch::<()>::Json(add.clone()),
            )
            .await
            .ok()
    })
    .await;
    h.api::<ISBServiceRollout>()
        .delete("held", &Default::default())
        .await
        .expect("delete");
    let note = eventually("a ChildDeletionBlocked Event", || async {
        warnings(&h, "held")
            .await
            .into_iter()
            .find(|(reason, _)| reason == "ChildDeletionBlocked")
            .map(|(_, note)| note)
    })
    .await;
    assert!(
        note.contains("InterStepBufferService held-0") && note.contains(HOLD),
        "{note}"
    );
    assert!(
        h.api::<ISBServiceRollout>()
            .get_opt("held")
            .await
            .expect("get")
            .is_some(),
        "the rollout waits for its child"
    );
    let child = isbsvcs.get("held-0").await.expect("child");
    let rest: Vec<String> = child
        .finalizers()
        .iter()
        .filter(|f| *f != HOLD)
        .cloned()
        .collect();
    isbsvcs
        .patch(
            "held-0",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": rest}})),
        )
        .await
        .expect("remove the finalizer");
    h.until::<ISBServiceRollout, _, _>("the rollout deleted", "held", |r| {
        r.is_none().then_some(())
    })
    .await;
    h.assert_invariants().await;
}
