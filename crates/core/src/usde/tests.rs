//! Decisions with the reference's shipped `usde-config.yaml`, under each user strategy.

use super::*;
use crate::config::{UsdeConfig, parse_usde_configmap};
use UpgradeStrategy::{DirectApply, NoOp, PipelinePauseAndDrain as Ppnd, Progressive};
use UserStrategy::{NoStrategy, PauseAndDrain, Progressive as UProgressive};
use numaplane_api::keys::annotations::NUMAFLOW_INSTANCE;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::sync::OnceLock;

const ALL: [UserStrategy; 3] = [UProgressive, PauseAndDrain, NoStrategy];

pub(super) fn reference_config() -> &'static UsdeConfig {
    static CFG: OnceLock<UsdeConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let path = format!(
            "{}/../../testdata/reference-config/usde-config.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let cm: Value = serde_saphyr::from_str(&text).unwrap();
        let data: BTreeMap<String, String> = serde_json::from_value(cm["data"].clone()).unwrap();
        parse_usde_configmap(&data).unwrap()
    })
}

/// A decision on specs alone (equal, empty metadata; no riders).
fn spec_decision(kind: &str, user: UserStrategy, desired: &Value, live: &Value) -> Decision {
    let empty = BTreeMap::new();
    decide(&DecisionInput {
        user_strategy: user,
        config: Kind::from_child_kind(kind).map(|k| reference_config().for_kind(k)),
        desired_spec: desired,
        live_spec: live,
        desired_labels: &empty,
        live_labels: &empty,
        desired_annotations: &empty,
        live_annotations: &empty,
        riders: &[],
    })
}

fn strategies(kind: &str, desired: &Value, live: &Value) -> [UpgradeStrategy; 3] {
    ALL.map(|u| spec_decision(kind, u, desired, live).strategy)
}

fn reason(path: &str, class: ChangeClass) -> FieldChange {
    FieldChange {
        path: path.to_string(),
        class,
    }
}

/// A named edit of a spec.
type Edit = (&'static str, fn(&mut Value));
/// Desired or live labels/annotations.
type Pairs<'a> = &'a [(&'a str, &'a str)];

/// Applies `edit` to a copy of `base`.
fn edited(base: &Value, edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = base.clone();
    edit(&mut v);
    v
}

fn pipeline() -> Value {
    json!({
        "interStepBufferServiceName": "default",
        "lifecycle": {"desiredPhase": "Running"},
        "watermark": {"maxDelay": "10s"},
        "vertices": [
            {
                "name": "in",
                "scale": {"min": 1, "max": 3},
                "source": {
                    "kafka": {"topic": "in-topic", "brokers": ["b:9092"]},
                    "transformer": {"container": {"image": "tf:1"}}
                }
            },
            {
                "name": "gen",
                "source": {"generator": {"rpu": 5, "duration": "1s"}}
            },
            {
                "name": "cat",
                "containerTemplate": {"env": [{"name": "A", "value": "1"}]},
                "udf": {"container": {
                    "image": "udf:1",
                    "args": ["--x"],
                    "envFrom": [{"configMapRef": {"name": "cm-a"}}]
                }}
            },
            {
                "name": "out",
                "sink": {"kafka": {"topic": "out-topic"}}
            },
            {
                "name": "log",
                "sink": {"udsink": {"container": {"image": "sink:1"}}}
            }
        ],
        "edges": [
            {"from": "in", "to": "cat"},
            {"from": "gen", "to": "cat"},
            {"from": "cat", "to": "out"},
            {"from": "cat", "to": "log"}
        ],
        "sideInputs": [{"name": "si", "container": {"image": "si:1"}}]
    })
}

#[test]
fn identical_specs_are_no_op_for_every_kind_and_strategy() {
    let p = pipeline();
    assert_eq!(strategies("Pipeline", &p, &p), [NoOp; 3]);
    let d = spec_decision("Pipeline", UProgressive, &p, &p);
    assert_eq!(d, Decision::no_op());
    assert!(!d.needs_update());
    let i = isbsvc();
    assert_eq!(strategies("InterStepBufferService", &i, &i), [NoOp; 3]);
    let m = monovertex();
    assert_eq!(strategies("MonoVertex", &m, &m), [NoOp; 3]);
}

#[test]
fn numbers_are_type_agnostic() {
    let p = pipeline();
    let floats = edited(&p, |v| {
        v["vertices"][0]["scale"] = json!({"min": 1.0, "max": 3.0});
        v["vertices"][1]["source"]["generator"]["rpu"] = json!(5.0);
    });
    assert_eq!(strategies("Pipeline", &floats, &p), [NoOp; 3]);
}

#[test]
fn pipeline_udf_image_change_is_data_loss() {
    let p = pipeline();
    let new = edited(&p, |v| {
        v["vertices"][2]["udf"]["container"]["image"] = json!("udf:2")
    });
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, Ppnd, DirectApply]
    );
    let d = spec_decision("Pipeline", PauseAndDrain, &new, &p);
    assert!(!d.recreate);
    assert_eq!(
        d.reasons,
        vec![reason(
            "spec.vertices.udf.container.image",
            ChangeClass::DataLoss
        )]
    );
    // No-strategy: a plain DirectApply naming the concrete field.
    let d = spec_decision("Pipeline", NoStrategy, &new, &p);
    assert_eq!(
        d.reasons,
        vec![reason(
            "spec.vertices[2].udf.container.image",
            ChangeClass::Other
        )]
    );
}

#[test]
fn pipeline_env_change_is_data_loss() {
    let p = pipeline();
    let new = edited(&p, |v| {
        v["vertices"][2]["containerTemplate"]["env"][0]["value"] = json!("2")
    });
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, Ppnd, DirectApply]
    );
    assert_eq!(
        spec_decision("Pipeline", PauseAndDrain, &new, &p).reasons,
        vec![reason(
            "spec.vertices.containerTemplate.env",
            ChangeClass::DataLoss
        )]
    );
}

#[test]
fn pipeline_container_env_from_change_is_data_loss_despite_the_lowercase_path() {
    let p = pipeline();
    let new = edited(&p, |v| {
        v["vertices"][2]["udf"]["container"]["envFrom"][0]["configMapRef"]["name"] = json!("cm-b")
    });
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, Ppnd, DirectApply]
    );
    assert_eq!(
        spec_decision("Pipeline", PauseAndDrain, &new, &p).reasons,
        vec![reason(
            "spec.vertices.udf.container.envfrom",
            ChangeClass::DataLoss
        )]
    );
    // The correctly spelled containerTemplate path still matches.
    let tmpl = edited(&p, |v| {
        v["vertices"][2]["containerTemplate"]["envFrom"] = json!([{"secretRef": {"name": "s"}}])
    });
    assert_eq!(
        spec_decision("Pipeline", PauseAndDrain, &tmpl, &p).reasons,
        vec![reason(
            "spec.vertices.containerTemplate.envFrom",
            ChangeClass::DataLoss
        )]
    );
}

#[test]
fn pipeline_topology_change_is_data_loss() {
    let p = pipeline();
    let new = edited(&p, |v| v["edges"][3]["to"] = json!("out"));
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, Ppnd, DirectApply]
    );
    assert_eq!(
        spec_decision("Pipeline", PauseAndDrain, &new, &p).reasons,
        vec![reason("spec.edges.to", ChangeClass::DataLoss)]
    );
    let cond = edited(&p, |v| {
        v["edges"][0]["conditions"] = json!({"tags": {"values": ["a"]}})
    });
    assert_eq!(
        spec_decision("Pipeline", PauseAndDrain, &cond, &p).reasons,
        vec![reason("spec.edges.conditions", ChangeClass::DataLoss)]
    );
}

#[test]
fn pipeline_adding_a_vertex_is_data_loss_through_array_length() {
    let p = pipeline();
    let new = edited(&p, |v| {
        v["vertices"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "extra", "sink": {"log": {}}}));
    });
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, Ppnd, DirectApply]
    );
    let d = spec_decision("Pipeline", PauseAndDrain, &new, &p);
    assert!(d.reasons.iter().all(|r| r.class == ChangeClass::DataLoss));
    assert!(d.reasons.contains(&reason(
        "spec.vertices.udf.container.image",
        ChangeClass::DataLoss
    )));
    // Removing one too.
    assert_eq!(
        strategies("Pipeline", &p, &new),
        [Progressive, Ppnd, DirectApply]
    );
}

#[test]
fn pipeline_scale_lifecycle_and_watermark_changes_are_direct_apply() {
    let p = pipeline();
    let edits: [Edit; 4] = [
        ("spec.vertices[0].scale.max", |v| {
            v["vertices"][0]["scale"]["max"] = json!(5)
        }),
        ("spec.lifecycle.desiredPhase", |v| {
            v["lifecycle"]["desiredPhase"] = json!("Paused")
        }),
        ("spec.watermark.maxDelay", |v| {
            v["watermark"]["maxDelay"] = json!("1m")
        }),
        ("spec.limits", |v| {
            v["limits"] = json!({"readBatchSize": 100})
        }),
    ];
    for (path, edit) in edits {
        let new = edited(&p, edit);
        assert_eq!(strategies("Pipeline", &new, &p), [DirectApply; 3], "{path}");
        for u in ALL {
            let d = spec_decision("Pipeline", u, &new, &p);
            assert!(!d.recreate);
            assert_eq!(d.reasons, vec![reason(path, ChangeClass::Other)], "{path}");
        }
    }
}

#[test]
fn pipeline_isbsvc_name_change_is_recreate() {
    let p = pipeline();
    let new = edited(&p, |v| v["interStepBufferServiceName"] = json!("other"));
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, Ppnd, DirectApply]
    );
    let recreate = ALL.map(|u| spec_decision("Pipeline", u, &new, &p).recreate);
    // Progressive carries the change in a new child; the flag is for PPND and no-strategy.
    assert_eq!(recreate, [false, true, true]);
    for u in ALL {
        assert_eq!(
            spec_decision("Pipeline", u, &new, &p).reasons,
            vec![reason(
                "spec.interStepBufferServiceName",
                ChangeClass::Recreate
            )]
        );
    }
}

#[test]
fn pipeline_kafka_source_config_change_is_progressive_only_under_progressive() {
    let p = pipeline();
    let new = edited(&p, |v| {
        v["vertices"][0]["source"]["kafka"]["topic"] = json!("other-topic")
    });
    // dataLoss lists `spec.vertices.source.kafka` without subfields: only switching the source
    // type is data-loss-risky; its settings are in the progressive list (with subfields).
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, DirectApply, DirectApply]
    );
    assert_eq!(
        spec_decision("Pipeline", UProgressive, &new, &p).reasons,
        vec![reason(
            "spec.vertices.source.kafka",
            ChangeClass::Progressive
        )]
    );
}

#[test]
fn pipeline_source_type_switch_is_data_loss() {
    let p = pipeline();
    let new = edited(&p, |v| {
        v["vertices"][0]["source"] = json!({"http": {}});
    });
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, Ppnd, DirectApply]
    );
    let d = spec_decision("Pipeline", PauseAndDrain, &new, &p);
    assert_eq!(
        d.reasons,
        vec![
            reason("spec.vertices.source.kafka", ChangeClass::DataLoss),
            reason("spec.vertices.source.http", ChangeClass::DataLoss),
            reason(
                "spec.vertices.source.transformer.container.image",
                ChangeClass::DataLoss
            ),
        ]
    );
}

#[test]
fn pipeline_generator_rpu_change() {
    let p = pipeline();
    let new = edited(&p, |v| {
        v["vertices"][1]["source"]["generator"]["rpu"] = json!(50)
    });
    assert_eq!(
        strategies("Pipeline", &new, &p),
        [Progressive, DirectApply, DirectApply]
    );
    assert_eq!(
        spec_decision("Pipeline", UProgressive, &new, &p).reasons,
        vec![reason(
            "spec.vertices.source.generator",
            ChangeClass::Progressive
        )]
    );
}

#[test]
fn pipeline_sink_changes() {
    let p = pipeline();
    let kafka = edited(&p, |v| {
        v["vertices"][3]["sink"]["kafka"]["topic"] = json!("t2")
    });
    assert_eq!(
        strategies("Pipeline", &kafka, &p),
        [Progressive, DirectApply, DirectApply]
    );
    let udsink = edited(&p, |v| {
        v["vertices"][4]["sink"]["udsink"]["container"]["image"] = json!("sink:2")
    });
    assert_eq!(
        strategies("Pipeline", &udsink, &p),
        [Progressive, Ppnd, DirectApply]
    );
    assert_eq!(
        spec_decision("Pipeline", UProgressive, &udsink, &p).reasons,
        vec![reason(
            "spec.vertices.sink.udsink.container.image",
            ChangeClass::DataLoss
        )]
    );
}

#[test]
fn pipeline_other_container_fields_follow_the_lists() {
    let p = pipeline();
    let cases: [Edit; 4] = [
        ("spec.vertices.udf.container.args", |v| {
            v["vertices"][2]["udf"]["container"]["args"] = json!(["--y"])
        }),
        ("spec.vertices.source.transformer.container.image", |v| {
            v["vertices"][0]["source"]["transformer"]["container"]["image"] = json!("tf:2")
        }),
        ("spec.sideInputs.container.image", |v| {
            v["sideInputs"][0]["container"]["image"] = json!("si:2")
        }),
        ("spec.templates", |v| {
            v["templates"] = json!({"daemon": {"replicas": 2}})
        }),
    ];
    for (path, edit) in cases {
        let new = edited(&p, edit);
        assert_eq!(
            strategies("Pipeline", &new, &p),
            [Progressive, Ppnd, DirectApply],
            "{path}"
        );
        assert_eq!(
            spec_decision("Pipeline", PauseAndDrain, &new, &p).reasons,
            vec![reason(path, ChangeClass::DataLoss)],
            "{path}"
        );
    }
}

fn isbsvc() -> Value {
    json!({
        "jetstream": {
            "version": "2.10.3",
            "replicas": 3,
            "persistence": {"volumeSize": "10Gi"},
            "containerTemplate": {"resources": {"limits": {"cpu": "1"}}}
        }
    })
}

#[test]
fn isbsvc_version_change_is_data_loss() {
    let i = isbsvc();
    let new = edited(&i, |v| v["jetstream"]["version"] = json!("2.11.0"));
    assert_eq!(
        strategies("InterStepBufferService", &new, &i),
        [Progressive, Ppnd, DirectApply]
    );
    let d = spec_decision("InterStepBufferService", PauseAndDrain, &new, &i);
    assert!(!d.recreate);
    assert_eq!(
        d.reasons,
        vec![reason("spec.jetstream.version", ChangeClass::DataLoss)]
    );
}

#[test]
fn isbsvc_replicas_and_persistence_are_recreate() {
    let i = isbsvc();
    let replicas = edited(&i, |v| v["jetstream"]["replicas"] = json!(5));
    let persistence = edited(&i, |v| {
        v["jetstream"]["persistence"]["volumeSize"] = json!("20Gi")
    });
    for (new, path) in [
        (replicas, "spec.jetstream.replicas"),
        (persistence, "spec.jetstream.persistence"),
    ] {
        let kind = "InterStepBufferService";
        assert_eq!(
            strategies(kind, &new, &i),
            [Progressive, Ppnd, DirectApply],
            "{path}"
        );
        let recreate = ALL.map(|u| spec_decision(kind, u, &new, &i).recreate);
        assert_eq!(recreate, [false, true, true], "{path}");
        assert_eq!(
            spec_decision(kind, NoStrategy, &new, &i).reasons,
            vec![reason(path, ChangeClass::Recreate)]
        );
    }
    // Same value as a float: unchanged.
    let float = edited(&i, |v| v["jetstream"]["replicas"] = json!(3.0));
    assert_eq!(strategies("InterStepBufferService", &float, &i), [NoOp; 3]);
}

#[test]
fn isbsvc_type_switch_is_recreate() {
    let i = isbsvc();
    let redis = json!({"redis": {"native": {"version": "7", "replicas": 3}}});
    let d = spec_decision("InterStepBufferService", PauseAndDrain, &redis, &i);
    assert_eq!((d.strategy, d.recreate), (Ppnd, true));
    assert!(
        d.reasons
            .contains(&reason("spec.jetstream", ChangeClass::Recreate))
    );
    assert!(
        d.reasons
            .contains(&reason("spec.redis", ChangeClass::Recreate))
    );
}

#[test]
fn isbsvc_resources_change_is_direct_apply() {
    let i = isbsvc();
    let new = edited(&i, |v| {
        v["jetstream"]["containerTemplate"]["resources"]["limits"]["cpu"] = json!("2")
    });
    assert_eq!(
        strategies("InterStepBufferService", &new, &i),
        [DirectApply; 3]
    );
    assert!(
        ALL.iter()
            .all(|u| !spec_decision("InterStepBufferService", *u, &new, &i).recreate)
    );
}

fn monovertex() -> Value {
    json!({
        "scale": {"min": 1, "max": 5},
        "source": {
            "udsource": {"container": {"image": "src:1"}},
            "kafka": {"topic": "t"}
        },
        "sink": {"udsink": {"container": {"image": "sink:1"}}}
    })
}

#[test]
fn monovertex_udsource_image_change() {
    let m = monovertex();
    let new = edited(&m, |v| {
        v["source"]["udsource"]["container"]["image"] = json!("src:2")
    });
    // The shipped monovertex lists only a progressive list.
    assert_eq!(
        strategies("MonoVertex", &new, &m),
        [Progressive, DirectApply, DirectApply]
    );
    assert_eq!(
        spec_decision("MonoVertex", UProgressive, &new, &m).reasons,
        vec![reason(
            "spec.source.udsource.container.image",
            ChangeClass::Progressive
        )]
    );
}

#[test]
fn monovertex_ppnd_degrades_to_direct_apply() {
    // A data-loss-class instance annotation change under pause-and-drain yields PPND, which a
    // MonoVertex cannot do.
    let m = monovertex();
    let empty = BTreeMap::new();
    let live = BTreeMap::from([(NUMAFLOW_INSTANCE.to_string(), "1".to_string())]);
    let d = decide(&DecisionInput {
        user_strategy: PauseAndDrain,
        config: Some(reference_config().for_kind(Kind::MonoVertex)),
        desired_spec: &m,
        live_spec: &m,
        desired_labels: &empty,
        live_labels: &empty,
        desired_annotations: &empty,
        live_annotations: &live,
        riders: &[],
    });
    assert_eq!(d.strategy, Ppnd);
    let eff = effective_for_kind(Kind::MonoVertex, d.clone());
    assert_eq!(eff.strategy, DirectApply);
    assert_eq!(eff.reasons, d.reasons);
    // Progressive stays progressive for a MonoVertex.
    let new = edited(&m, |v| {
        v["sink"]["udsink"]["container"]["image"] = json!("sink:2")
    });
    let d = spec_decision("MonoVertex", UProgressive, &new, &m);
    assert_eq!(
        effective_for_kind(Kind::MonoVertex, d).strategy,
        Progressive
    );
}

#[test]
fn monovertex_copied_pipeline_paths_are_inert() {
    let m = monovertex();
    let new = edited(&m, |v| v["source"]["kafka"]["topic"] = json!("t2"));
    assert_eq!(strategies("MonoVertex", &new, &m), [DirectApply; 3]);
    let cfg = reference_config().for_kind(Kind::MonoVertex);
    let inert: Vec<&str> = inert_fields(Kind::MonoVertex, cfg)
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(inert.len(), 12);
    assert!(inert.iter().all(|p| p.starts_with("spec.vertices.")));
    assert!(inert.contains(&"spec.vertices.source.kafka"));
    assert!(inert.contains(&"spec.vertices.sink.pulsar"));
    let pipeline_cfg = reference_config().for_kind(Kind::Pipeline);
    assert!(inert_fields(Kind::Pipeline, pipeline_cfg).is_empty());
    let odd = UsdeKindConfig {
        data_loss: vec![SpecField {
            path: "metadata.name".into(),
            include_subfields: false,
        }],
        ..UsdeKindConfig::default()
    };
    assert_eq!(inert_fields(Kind::Pipeline, &odd).len(), 1);
}

#[test]
fn numaflow_controller_version_change() {
    let old = json!({"version": "1.4.0", "instanceID": ""});
    let new = json!({"version": "1.5.0", "instanceID": ""});
    let kind = "NumaflowController";
    assert_eq!(
        strategies(kind, &new, &old),
        [Progressive, Ppnd, DirectApply]
    );
    let effective = ALL.map(|u| {
        effective_for_kind(Kind::NumaflowController, spec_decision(kind, u, &new, &old)).strategy
    });
    assert_eq!(effective, [DirectApply, Ppnd, DirectApply]);
    assert_eq!(
        spec_decision(kind, PauseAndDrain, &new, &old).reasons,
        vec![reason("spec.version", ChangeClass::DataLoss)]
    );
}

#[test]
fn effective_for_kind_leaves_other_kinds_alone() {
    let d = Decision {
        strategy: Ppnd,
        recreate: true,
        reasons: vec![],
    };
    for kind in [Kind::Pipeline, Kind::IsbService, Kind::NumaflowController] {
        assert_eq!(effective_for_kind(kind, d.clone()), d);
    }
    assert_eq!(
        Kind::from_child_kind("InterStepBufferService"),
        Some(Kind::IsbService)
    );
    assert_eq!(Kind::from_child_kind("monovertex"), Some(Kind::MonoVertex));
    assert_eq!(Kind::from_child_kind("Vertex"), None);
}

#[test]
fn without_config_every_change_is_carried_carefully() {
    let p = pipeline();
    let new = edited(&p, |v| v["interStepBufferServiceName"] = json!("other"));
    let empty = BTreeMap::new();
    for u in ALL {
        let d = decide(&DecisionInput {
            user_strategy: u,
            config: None,
            desired_spec: &new,
            live_spec: &p,
            desired_labels: &empty,
            live_labels: &empty,
            desired_annotations: &empty,
            live_annotations: &empty,
            riders: &[],
        });
        let want = if u == UProgressive { Progressive } else { Ppnd };
        assert_eq!((d.strategy, d.recreate), (want, false), "{u:?}");
        assert!(
            d.reasons.iter().all(|r| r.class == ChangeClass::DataLoss
                && r.path.contains("interStepBufferServiceName")
                && r.path.contains(crate::usde::UNCONFIGURED)),
            "{:?}",
            d.reasons
        );
        // An unchanged spec is still nothing to do.
        let same = decide(&DecisionInput {
            desired_spec: &p,
            ..DecisionInput {
                user_strategy: u,
                config: None,
                desired_spec: &new,
                live_spec: &p,
                desired_labels: &empty,
                live_labels: &empty,
                desired_annotations: &empty,
                live_annotations: &empty,
                riders: &[],
            }
        });
        assert_eq!(same.strategy, NoOp);
    }
}

/// Metadata-only decisions on an unchanged pipeline spec.
fn metadata_decision(
    user: UserStrategy,
    labels: (Pairs, Pairs),
    annotations: (Pairs, Pairs),
) -> Decision {
    let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let p = pipeline();
    decide(&DecisionInput {
        user_strategy: user,
        config: Some(reference_config().for_kind(Kind::Pipeline)),
        desired_spec: &p,
        live_spec: &p,
        desired_labels: &map(labels.0),
        live_labels: &map(labels.1),
        desired_annotations: &map(annotations.0),
        live_annotations: &map(annotations.1),
        riders: &[],
    })
}

#[test]
fn instance_annotation_change_takes_the_data_loss_strategy() {
    let none: &[(&str, &str)] = &[];
    let cases = [
        (
            &[(NUMAFLOW_INSTANCE, "a")][..],
            &[(NUMAFLOW_INSTANCE, "b")][..],
        ),
        (&[(NUMAFLOW_INSTANCE, "a")][..], none),
        (none, &[(NUMAFLOW_INSTANCE, "b")][..]),
    ];
    for (desired, live) in cases {
        let got = ALL.map(|u| metadata_decision(u, (none, none), (desired, live)).strategy);
        assert_eq!(
            got,
            [Progressive, Ppnd, DirectApply],
            "{desired:?} {live:?}"
        );
        let d = metadata_decision(PauseAndDrain, (none, none), (desired, live));
        assert_eq!(
            d.reasons,
            vec![reason(
                "metadata.annotations[numaflow.numaproj.io/instance]",
                ChangeClass::Metadata
            )]
        );
        assert!(!d.recreate);
    }
    // Absent and empty are the same instance: no data-loss risk, only the missing annotation
    // to apply.
    let empty_instance = &[(NUMAFLOW_INSTANCE, "")][..];
    assert_eq!(
        metadata_decision(PauseAndDrain, (none, none), (empty_instance, none)).strategy,
        DirectApply
    );
    assert_eq!(
        metadata_decision(
            PauseAndDrain,
            (none, none),
            (empty_instance, empty_instance)
        )
        .strategy,
        NoOp
    );
}

#[test]
fn labels_and_annotations_must_be_a_subset() {
    let none: &[(&str, &str)] = &[];
    let a = &[("team", "a")][..];
    let a_and_more = &[("team", "a"), ("extra", "x")][..];
    let b = &[("team", "b")][..];
    for u in ALL {
        // Extra keys on the child are fine.
        assert_eq!(
            metadata_decision(u, (a, a_and_more), (a, a_and_more)).strategy,
            NoOp
        );
        assert_eq!(metadata_decision(u, (none, a), (none, none)).strategy, NoOp);
        // Missing or different required keys are a DirectApply.
        let d = metadata_decision(u, (a, b), (none, none));
        assert_eq!(d.strategy, DirectApply);
        assert_eq!(
            d.reasons,
            vec![reason("metadata.labels[team]", ChangeClass::Metadata)]
        );
        let d = metadata_decision(u, (none, none), (a_and_more, a));
        assert_eq!(d.strategy, DirectApply);
        assert_eq!(
            d.reasons,
            vec![reason("metadata.annotations[extra]", ChangeClass::Metadata)]
        );
    }
}

fn rider(name: &str, change: RiderChangeKind) -> RiderChange {
    RiderChange {
        kind: "ConfigMap".into(),
        name: name.into(),
        change,
    }
}

fn rider_decision(user: UserStrategy, riders: &[RiderChange]) -> Decision {
    let p = pipeline();
    let empty = BTreeMap::new();
    decide(&DecisionInput {
        user_strategy: user,
        config: Some(reference_config().for_kind(Kind::Pipeline)),
        desired_spec: &p,
        live_spec: &p,
        desired_labels: &empty,
        live_labels: &empty,
        desired_annotations: &empty,
        live_annotations: &empty,
        riders,
    })
}

#[test]
fn rider_additions_and_deletions_are_direct_apply() {
    for change in [RiderChangeKind::Added, RiderChangeKind::Deleted] {
        for u in ALL {
            let d = rider_decision(u, &[rider("cm", change.clone())]);
            assert_eq!(d.strategy, DirectApply);
            assert_eq!(
                d.reasons,
                vec![reason("riders/ConfigMap/cm", ChangeClass::Rider)]
            );
        }
    }
}

#[test]
fn rider_modification_is_progressive_only_for_progressive_riders_and_users() {
    let prog = rider("p", RiderChangeKind::Modified { progressive: true });
    let plain = rider("q", RiderChangeKind::Modified { progressive: false });
    let got = ALL.map(|u| rider_decision(u, std::slice::from_ref(&prog)).strategy);
    assert_eq!(got, [Progressive, DirectApply, DirectApply]);
    let got = ALL.map(|u| rider_decision(u, std::slice::from_ref(&plain)).strategy);
    assert_eq!(got, [DirectApply; 3]);
    // Only the rider that decided it is named.
    let d = rider_decision(
        UProgressive,
        &[plain, prog, rider("r", RiderChangeKind::Added)],
    );
    assert_eq!(d.strategy, Progressive);
    assert_eq!(
        d.reasons,
        vec![reason("riders/ConfigMap/p", ChangeClass::Rider)]
    );
}

#[test]
fn rider_changes_come_from_a_rider_diff() {
    use crate::riders::{DesiredRider, ExistingRider, diff_riders};
    use numaplane_api::common::GroupVersionKind;
    let gvk = GroupVersionKind {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    let desired = |name: &str, hash: &str, progressive: bool| DesiredRider {
        gvk: gvk.clone(),
        name: name.into(),
        object: json!({}),
        hash: hash.into(),
        progressive,
        vertex: None,
        namespace_ignored: None,
    };
    let existing = |name: &str, hash: &str| ExistingRider {
        gvk: gvk.clone(),
        name: name.into(),
        hash: Some(hash.into()),
    };
    let diff = diff_riders(
        &[
            desired("new", "h", false),
            desired("mod", "h2", true),
            desired("same", "h", false),
        ],
        &[
            existing("mod", "h1"),
            existing("same", "h"),
            existing("old", "h"),
        ],
    );
    assert_eq!(
        rider_changes(&diff),
        vec![
            rider("new", RiderChangeKind::Added),
            rider("mod", RiderChangeKind::Modified { progressive: true }),
            rider("old", RiderChangeKind::Deleted),
        ]
    );
}

#[test]
fn parts_combine_most_conservatively() {
    // Spec DirectApply + progressive rider modification under progressive ⇒ Progressive, named
    // by the rider only.
    let p = pipeline();
    let scaled = edited(&p, |v| v["vertices"][0]["scale"]["max"] = json!(9));
    let empty = BTreeMap::new();
    let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
    let riders = [rider("p", RiderChangeKind::Modified { progressive: true })];
    let input = DecisionInput {
        user_strategy: UProgressive,
        config: Some(reference_config().for_kind(Kind::Pipeline)),
        desired_spec: &scaled,
        live_spec: &p,
        desired_labels: &labels,
        live_labels: &empty,
        desired_annotations: &empty,
        live_annotations: &empty,
        riders: &riders,
    };
    let d = decide(&input);
    assert_eq!(d.strategy, Progressive);
    assert_eq!(
        d.reasons,
        vec![reason("riders/ConfigMap/p", ChangeClass::Rider)]
    );
    // Same under pause-and-drain: everything is a DirectApply, and every part is named.
    let d = decide(&DecisionInput {
        user_strategy: PauseAndDrain,
        ..input
    });
    assert_eq!(d.strategy, DirectApply);
    assert_eq!(
        d.reasons,
        vec![
            reason("spec.vertices[0].scale.max", ChangeClass::Other),
            reason("metadata.labels[team]", ChangeClass::Metadata),
            reason("riders/ConfigMap/p", ChangeClass::Rider),
        ]
    );
    // A recreate spec change keeps its flag even when another part also ranks PPND.
    let renamed = edited(&p, |v| v["interStepBufferServiceName"] = json!("x"));
    let live_ann = BTreeMap::from([(NUMAFLOW_INSTANCE.to_string(), "1".to_string())]);
    let d = decide(&DecisionInput {
        user_strategy: PauseAndDrain,
        desired_spec: &renamed,
        live_annotations: &live_ann,
        riders: &[],
        ..input
    });
    assert_eq!((d.strategy, d.recreate), (Ppnd, true));
    assert_eq!(
        d.reasons[0],
        reason("spec.interStepBufferServiceName", ChangeClass::Recreate)
    );
    assert_eq!(d.reasons.len(), 2);
}

#[test]
fn pipeline_needs_update_for_ppnd_ignores_desired_phase_and_plain_metadata() {
    let p = pipeline();
    let none = BTreeMap::new();
    let needs = |a: &Value, b: &Value| pipeline_needs_update_for_ppnd(a, b, &none, &none);
    let image = edited(&p, |v| {
        v["vertices"][2]["udf"]["container"]["image"] = json!("udf:2")
    });
    assert!(needs(&image, &p));
    let extra_lifecycle = edited(&p, |v| {
        v["lifecycle"]["pauseGracePeriodSeconds"] = json!(60)
    });
    assert!(needs(&extra_lifecycle, &p));
    let paused = edited(&p, |v| v["lifecycle"]["desiredPhase"] = json!("Paused"));
    assert!(!needs(&paused, &p));
    let no_lifecycle = edited(&p, |v| {
        v.as_object_mut().unwrap().remove("lifecycle");
    });
    let empty_lifecycle = edited(&p, |v| v["lifecycle"] = json!({}));
    assert!(!needs(&no_lifecycle, &empty_lifecycle));
    assert!(!needs(&no_lifecycle, &p));
    // Labels never reach it; annotations other than the instance do not count.
    let a = BTreeMap::from([("x".to_string(), "1".to_string())]);
    assert!(!pipeline_needs_update_for_ppnd(&p, &p, &a, &none));
    let inst = BTreeMap::from([(NUMAFLOW_INSTANCE.to_string(), "1".to_string())]);
    assert!(pipeline_needs_update_for_ppnd(&p, &p, &inst, &none));
    assert!(pipeline_needs_update_for_ppnd(&p, &p, &none, &inst));
}
