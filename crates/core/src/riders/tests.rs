use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

fn rules() -> RiderRules {
    parse_rules(
        "group=autoscaling.k8s.io,kind=VerticalPodAutoscaler;group=autoscaling,kind=HorizontalPodAutoscaler;group=,kind=ConfigMap",
    )
    .unwrap()
}

fn cm_def() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "annotations": {"x": "{{.pipeline-namespace}}"}},
        "data": {"pipeline": "{{.pipeline-name}}", "vertex": "{{.vertex-name}}"}
    })
}

fn hpa_def() -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "hpa"},
        "spec": {"scaleTargetRef": {"name": "{{.pipeline-name}}-{{.vertex-name}}"}}
    })
}

fn pipeline_vars(child: &str) -> impl Fn(Option<&str>) -> TemplateVars + '_ {
    move |v| match v {
        Some(v) => TemplateVars::pipeline_vertex(child, "ns", v),
        None => TemplateVars::pipeline(child, "ns"),
    }
}

fn spec(definition: Value, progressive: bool, per_vertex: bool) -> RiderSpec {
    RiderSpec {
        definition,
        progressive,
        per_vertex,
    }
}

fn render(riders: &[RiderSpec]) -> Result<Vec<DesiredRider>, RiderError> {
    let vertices = vec!["in".to_string(), "out".to_string()];
    desired_riders(
        riders,
        "my-pl-2",
        "ns",
        pipeline_vars("my-pl-2"),
        &vertices,
        &rules(),
    )
}

#[test]
fn renders_a_child_rider() {
    let out = render(&[spec(cm_def(), true, false)]).unwrap();
    assert_eq!(out.len(), 1);
    let r = &out[0];
    assert_eq!(r.name, "cm-my-pl-2");
    assert_eq!(
        r.gvk,
        GroupVersionKind {
            group: "".into(),
            version: "v1".into(),
            kind: "ConfigMap".into()
        }
    );
    assert!(r.progressive);
    assert_eq!(r.vertex, None);
    assert_eq!(
        r.object,
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "cm-my-pl-2",
                "namespace": "ns",
                "annotations": {"x": "ns", "numaplane.numaproj.io/hash": r.hash}
            },
            "data": {"pipeline": "my-pl-2", "vertex": ""}
        })
    );
    // The hash covers the object as applied, minus the hash annotation itself.
    let mut unhashed = r.object.clone();
    unhashed["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(annotations::HASH);
    assert_eq!(r.hash, rider_hash(&unhashed));
}

#[test]
fn per_vertex_riders_one_per_vertex() {
    let out = render(&[spec(hpa_def(), false, true)]).unwrap();
    let names: Vec<_> = out.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["hpa-my-pl-2-in", "hpa-my-pl-2-out"]);
    assert_eq!(
        out[1].object["spec"]["scaleTargetRef"]["name"],
        "my-pl-2-out"
    );
    assert_eq!(out[1].vertex.as_deref(), Some("out"));
    assert_ne!(out[0].hash, out[1].hash);
    assert!(is_hpa(&out[0].gvk));
    assert!(without_hpa(out).is_empty());
}

#[test]
fn per_vertex_without_vertices_renders_nothing() {
    let out = desired_riders(
        &[spec(hpa_def(), false, true)],
        "p-0",
        "ns",
        pipeline_vars("p-0"),
        &[],
        &rules(),
    )
    .unwrap();
    assert!(out.is_empty());
}

#[test]
fn namespace_is_forced_and_server_fields_and_owners_dropped() {
    let mut def = cm_def();
    def["metadata"]["namespace"] = json!("elsewhere");
    def["metadata"]["resourceVersion"] = json!("123");
    def["metadata"]["uid"] = json!("u");
    def["metadata"]["ownerReferences"] = json!([{"kind": "X"}]);
    def["metadata"]["annotations"][annotations::HASH] = json!("stale");
    def["status"] = json!({"x": 1});
    let r = &render(&[spec(def, false, false)]).unwrap()[0];
    let md = r.object["metadata"].as_object().unwrap();
    assert_eq!(md["namespace"], "ns");
    assert_eq!(
        r.namespace_ignored,
        Some((
            "spec.riders[0].definition.metadata.namespace".to_string(),
            "elsewhere".to_string()
        )),
        "the namespace it asked for is reported"
    );
    let mut own = cm_def();
    own["metadata"]["namespace"] = json!("ns");
    assert_eq!(
        render(&[spec(own, false, false)]).unwrap()[0].namespace_ignored,
        None
    );
    assert_eq!(
        render(&[spec(cm_def(), false, false)]).unwrap()[0].namespace_ignored,
        None
    );
    for k in ["resourceVersion", "uid", "ownerReferences"] {
        assert!(!md.contains_key(k), "{k}");
    }
    assert_eq!(md["annotations"][annotations::HASH], json!(r.hash));
    assert!(r.object.get("status").is_none());
    // Same hash as the clean definition: only what the user controls counts.
    assert_eq!(
        r.hash,
        render(&[spec(cm_def(), false, false)]).unwrap()[0].hash
    );
}

#[test]
fn hash_matches_the_reference_for_a_plain_definition() {
    // Reference hash input: templated definition with name and namespace set, before the hash
    // annotation and ownerReferences; sha256 of Go's {"Object":...} encoding (see hash.rs).
    let def = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
        "data": {"k": "<v>"}});
    let out = desired_riders(
        &[spec(def, false, false)],
        "my-pipeline-0",
        "ns",
        pipeline_vars("my-pipeline-0"),
        &[],
        &rules(),
    )
    .unwrap();
    assert_eq!(
        out[0].hash,
        "4aec2ecc71ff464386edb76773a2587c9dc28455a00f292daf37b5bd72386b86"
    );
}

#[test]
fn hash_changes_with_content_and_child_name() {
    let a = &render(&[spec(cm_def(), false, false)]).unwrap()[0];
    let mut changed = cm_def();
    changed["data"]["extra"] = json!("1");
    let b = &render(&[spec(changed, false, false)]).unwrap()[0];
    assert_ne!(a.hash, b.hash);
    let c = &desired_riders(
        &[spec(cm_def(), false, false)],
        "my-pl-3",
        "ns",
        pipeline_vars("my-pl-3"),
        &[],
        &rules(),
    )
    .unwrap()[0];
    assert_ne!(a.hash, c.hash);
}

#[test]
fn unpermitted_kind_is_refused() {
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"}});
    let err = render(&[spec(cm_def(), false, false), spec(pdb, false, false)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.riders[1].definition.kind: rider definitions contained unpermitted Kind policy/PodDisruptionBudget (not in permittedRiders)"
    );
    assert_eq!(err.reason(), "UnpermittedRider");
    let err = desired_riders(
        &[spec(cm_def(), false, false)],
        "c",
        "ns",
        pipeline_vars("c"),
        &[],
        &RiderRules::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "spec.riders[0].definition.kind: rider definitions contained unpermitted Kind core/ConfigMap (not in permittedRiders)"
    );
}

#[test]
fn invalid_definitions_name_the_field() {
    let cases = [
        (
            json!("x"),
            r#"spec.riders[0].definition: expected object, got string "x""#,
        ),
        (
            json!({"kind": "ConfigMap", "metadata": {"name": "a"}}),
            "spec.riders[0].definition.apiVersion: required string is missing",
        ),
        (
            json!({"apiVersion": "v1", "metadata": {"name": "a"}}),
            "spec.riders[0].definition.kind: required string is missing",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            "spec.riders[0].definition.metadata.name: required string is missing",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 3}}),
            "spec.riders[0].definition.metadata.name: expected string, got number 3",
        ),
        (
            json!({"apiVersion": "v1", "kind": "", "metadata": {"name": "a"}}),
            "spec.riders[0].definition.kind: must not be empty",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{.nope}}"}}),
            "spec.riders[0].definition.metadata.name: must not be empty after templating",
        ),
    ];
    for (def, want) in cases {
        let err = render(&[spec(def, false, false)]).unwrap_err();
        assert_eq!(err.to_string(), want);
        assert_eq!(err.reason(), "InvalidRider");
    }
}

#[test]
fn template_errors_name_the_rider() {
    // A tag never spans two values: the open one is named at its own field.
    let mut def = cm_def();
    def["zz"] = json!("{{.pipeline-name");
    let err = render(&[spec(cm_def(), false, false), spec(def, false, false)]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(r#"spec.riders[1].definition.zz: "{{" is not closed"#),
        "{err}"
    );
    assert_eq!(err.reason(), "InvalidTemplate");
}

#[test]
fn duplicate_rendered_riders_are_refused() {
    let err = render(&[spec(cm_def(), false, false), spec(cm_def(), true, false)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"spec.riders[1].definition: renders ConfigMap "cm-my-pl-2", which an earlier rider already renders"#
    );
}

#[test]
fn converts_api_riders() {
    let r = Rider {
        definition: cm_def(),
        progressive: Some(true),
    };
    assert_eq!(RiderSpec::from(&r), spec(cm_def(), true, false));
    let p = PipelineRider {
        definition: hpa_def(),
        progressive: None,
        per_vertex: Some(true),
    };
    assert_eq!(RiderSpec::from(&p), spec(hpa_def(), false, true));
    assert_eq!(RiderSpec::from(&Rider::default()).progressive, false);
}

fn existing(r: &DesiredRider, hash: Option<&str>) -> ExistingRider {
    ExistingRider {
        gvk: r.gvk.clone(),
        name: r.name.clone(),
        hash: hash.map(String::from),
    }
}

#[test]
fn diff_adds_modifies_and_deletes() {
    let desired = render(&[spec(cm_def(), true, false), spec(hpa_def(), false, true)]).unwrap();
    // cm unchanged, hpa-in modified, hpa-out new, an old VPA to delete.
    let vpa = ExistingRider {
        gvk: gvk_of("autoscaling.k8s.io/v1", "VerticalPodAutoscaler"),
        name: "vpa-my-pl-2".into(),
        hash: Some("h".into()),
    };
    let existing = vec![
        existing(&desired[0], Some(&desired[0].hash)),
        existing(&desired[1], Some("old")),
        vpa.clone(),
    ];
    let diff = diff_riders(&desired, &existing);
    assert_eq!(diff.add, vec![desired[2].clone()]);
    assert_eq!(diff.modify, vec![desired[1].clone()]);
    assert_eq!(diff.delete, vec![vpa]);
    assert!(!diff.is_empty());
    assert!(!diff.has_progressive_modification());
}

#[test]
fn diff_of_identical_sets_is_empty_and_missing_hash_is_a_modification() {
    let desired = render(&[spec(cm_def(), true, false)]).unwrap();
    let same = vec![existing(&desired[0], Some(&desired[0].hash))];
    assert!(diff_riders(&desired, &same).is_empty());
    let unhashed = vec![existing(&desired[0], None)];
    let diff = diff_riders(&desired, &unhashed);
    assert_eq!(diff.modify.len(), 1);
    assert!(diff.has_progressive_modification());
    // A version change is a different rider (the key includes the version, as the reference's).
    let mut other_version = existing(&desired[0], Some(&desired[0].hash));
    other_version.gvk.version = "v2".into();
    let diff = diff_riders(&desired, &[other_version.clone()]);
    assert_eq!(
        (diff.add.len(), diff.delete, diff.modify.len()),
        (1, vec![other_version], 0)
    );
}

#[test]
fn existing_rider_from_live_object() {
    let live = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h", "resourceVersion": "9", "annotations": {annotations::HASH: "abc"}}});
    assert_eq!(
        ExistingRider::from_object(&live),
        Some(ExistingRider {
            gvk: GroupVersionKind {
                group: "autoscaling".into(),
                version: "v2".into(),
                kind: "HorizontalPodAutoscaler".into()
            },
            name: "h".into(),
            hash: Some("abc".into()),
        })
    );
    assert_eq!(ExistingRider::from_object(&json!({"kind": "X"})), None);
    // A rendered rider read back diffs as unchanged.
    let desired = render(&[spec(cm_def(), false, false)]).unwrap();
    let back = ExistingRider::from_object(&desired[0].object).unwrap();
    assert!(diff_riders(&desired, &[back]).is_empty());
}

#[test]
fn status_lists_gvk_and_name() {
    let desired = render(&[spec(cm_def(), false, false)]).unwrap();
    assert_eq!(
        rider_status(&desired),
        vec![RiderStatus {
            group_version_kind: GroupVersionKind {
                group: "".into(),
                version: "v1".into(),
                kind: "ConfigMap".into()
            },
            name: "cm-my-pl-2".into(),
        }]
    );
}

#[test]
fn hpa_detection() {
    assert!(is_hpa(&gvk_of("autoscaling/v1", "HorizontalPodAutoscaler")));
    assert!(!is_hpa(&gvk_of(
        "autoscaling.k8s.io/v1",
        "VerticalPodAutoscaler"
    )));
    assert!(!is_hpa(&gvk_of("v1", "HorizontalPodAutoscaler")));
}

#[test]
fn a_name_no_request_can_carry_is_refused_naming_the_field() {
    for bad in ["line\nbreak", "a b", "a/b", "ünï", "50%"] {
        let mut def = cm_def();
        def["metadata"]["name"] = json!(bad);
        let err = render(&[spec(def, false, false)]).expect_err(bad);
        let text = err.to_string();
        assert!(
            text.starts_with("spec.riders[0].definition.metadata.name:"),
            "{bad:?}: {text}"
        );
    }
    let mut def = cm_def();
    def["metadata"]["name"] = json!("fine.name-1");
    assert!(render(&[spec(def, false, false)]).is_ok());
}
