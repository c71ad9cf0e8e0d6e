use super::*;
use numaplane_api::Kind;
use pretty_assertions::assert_eq;
use serde_json::Value;

fn testdata(rel: &str) -> String {
    let path = format!("{}/../../testdata/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `data` of a ConfigMap manifest.
fn configmap_data(rel: &str) -> BTreeMap<String, String> {
    let cm: Value = serde_saphyr::from_str(&testdata(rel)).unwrap();
    serde_json::from_value(cm["data"].clone()).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn sched(d: u64, e: u64, p: u64, i: u64) -> AssessmentSchedule {
    AssessmentSchedule {
        delay: secs(d),
        end: secs(e),
        period: secs(p),
        interval: secs(i),
    }
}

#[test]
fn parses_the_shipped_controller_config() {
    let data = configmap_data("reference-config/controller-config.yaml");
    let cfg = parse_controller_config(&data["config.yaml"]).unwrap();
    let expected = ControllerConfig {
        log_level: LogLevel::Info,
        included_resources: RiderRules::new(
            [
                ("apps", "Deployment"),
                ("", "ConfigMap"),
                ("", "ServiceAccount"),
                ("", "Secret"),
                ("", "Service"),
                ("rbac.authorization.k8s.io", "RoleBinding"),
                ("rbac.authorization.k8s.io", "Role"),
            ]
            .map(|(g, k)| (g.to_string(), k.to_string()))
            .to_vec(),
        ),
        default_upgrade_strategy: UserStrategy::Progressive,
        default_assessment_schedules: vec![
            ("pipeline".into(), sched(10, 200, 60, 10)),
            ("monovertex".into(), sched(10, 200, 60, 10)),
            ("interstepbufferservice".into(), sched(0, 0, 0, 10)),
        ],
        analysis_run_timeout: secs(1200),
        permitted_riders: parse_rules(
            "group=autoscaling.k8s.io,kind=VerticalPodAutoscaler;group=autoscaling,kind=HorizontalPodAutoscaler;group=policy,kind=PodDisruptionBudget",
        )
        .unwrap(),
        recycle_scale_factor: 50,
        max_recyclable_duration: secs(240 * 60),
        force_drain_failure_wait: secs(15),
        keep_undrained_pipelines: false,
        deletion_drain_timeout: DEFAULT_DELETION_DRAIN_TIMEOUT,
        disable_analysis_runs_for_pipeline: false,
        upgrade_history_limit: 10,
        definitions_namespaces: Vec::new(),
    };
    assert_eq!(cfg, expected);
    assert_eq!(
        cfg.included_resources,
        ControllerConfig::default().included_resources,
        "the default is what the shipped config lists"
    );
    assert_eq!(
        cfg.assessment_schedule(Kind::IsbService),
        Some(sched(0, 0, 0, 10))
    );
    assert_eq!(
        cfg.assessment_schedule(Kind::Pipeline),
        Some(sched(10, 200, 60, 10))
    );
    assert_eq!(cfg.assessment_schedule(Kind::NumaflowController), None);
    assert!(
        cfg.permitted_riders
            .permits("autoscaling", "HorizontalPodAutoscaler")
    );
}

#[test]
fn an_empty_config_is_refused_not_taken_as_the_defaults() {
    for empty in ["", "# nothing\n", "{}", "null"] {
        let err = parse_controller_config(empty).unwrap_err().to_string();
        assert!(
            err.contains("config.yaml") && err.contains("empty"),
            "{empty:?}: {err}"
        );
    }
}

#[test]
fn a_misspelt_key_is_refused_naming_it_and_the_key_meant() {
    let err = parse_controller_config("defaultUpgradeStratgy: pause-and-drain\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("defaultUpgradeStratgy"), "{err}");
    assert!(
        err.contains("did you mean \"defaultUpgradeStrategy\""),
        "{err}"
    );
    let err =
        parse_controller_config("logLevel: INFO\npipeline:\n  maxRecyclableDurationMinute: 9\n")
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("pipeline.maxRecyclableDurationMinute"),
        "{err}"
    );
    assert!(
        err.contains("pipeline.maxRecyclableDurationMinutes"),
        "{err}"
    );
    let err = parse_controller_config("progressive:\n  somethingElse: 1\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("progressive.somethingElse") && err.contains("known keys"),
        "{err}"
    );
    // Keys are read case-insensitively (as the reference's reader does), so are checked so.
    assert_eq!(
        parse_controller_config("DEFAULTUPGRADESTRATEGY: pause-and-drain\n")
            .unwrap()
            .default_upgrade_strategy,
        UserStrategy::PauseAndDrain
    );
}

#[test]
fn absent_keys_take_the_defaults() {
    let d = ControllerConfig::default();
    assert_eq!(parse_controller_config("logLevel: INFO\n").unwrap(), d);
    assert_eq!(d.recycle_scale_factor, 50);
    assert_eq!(d.max_recyclable_duration, secs(3600));
    assert_eq!(d.force_drain_failure_wait, secs(15));
    assert_eq!(d.analysis_run_timeout, secs(1200));
    assert_eq!(d.default_upgrade_strategy, UserStrategy::NoStrategy);
    assert!(d.permitted_riders.is_empty());
    assert!(!d.keep_undrained_pipelines && !d.disable_analysis_runs_for_pipeline);
    assert_eq!(d.upgrade_history_limit, 10);
}

#[test]
fn included_resources_default_to_the_shipped_kinds_and_may_be_emptied() {
    let d = ControllerConfig::default();
    assert!(d.included_resources.permits("apps", "Deployment"));
    assert!(
        d.included_resources
            .permits("rbac.authorization.k8s.io", "Role")
    );
    assert!(
        !d.included_resources
            .permits("rbac.authorization.k8s.io", "ClusterRoleBinding")
    );
    assert!(!d.included_resources.permits("batch", "Job"));
    assert_eq!(d.included_resources.rules().len(), 7);
    // Set explicitly empty: a NumaflowController may render nothing.
    let none = parse_controller_config("includedResources: \"\"").unwrap();
    assert!(none.included_resources.is_empty());
}

#[test]
fn definitions_namespaces_are_a_list_of_namespace_names() {
    assert!(
        ControllerConfig::default()
            .definitions_namespaces
            .is_empty()
    );
    let cfg = parse_controller_config(
        "numaflowControllerDefinitionsNamespaces: [platform, \" team-b \", platform]",
    )
    .unwrap();
    assert_eq!(cfg.definitions_namespaces, ["platform", "team-b"]);
}

#[test]
fn weakly_typed_values_and_all_keys() {
    let yaml = r#"
LOGLEVEL: debug
defaultUpgradeStrategy: pause-and-drain
featureFlagDisableAnalysisRunsForPipeline: "true"
upgradeHistoryLimit: "3"
numaflowControllerImageNames: [numaflow, numaflow-rc]
progressive:
  analysisRunTimeout: "30"
  defaultAssessmentSchedule:
    - {kind: Pipeline, schedule: "1, 2, 3, 4"}
    - {kind: pipeline, schedule: "9,9,9,9"}
pipeline:
  recycleScaleFactor: "25"
  maxRecyclableDurationMinutes: 0
  forceDrainFailureWaitDuration: "5"
  keepUndrainedPipelines: true
  deletionDrainTimeoutSeconds: "45"
"#;
    let cfg = parse_controller_config(yaml).unwrap();
    assert_eq!(cfg.log_level, LogLevel::Debug);
    assert_eq!(cfg.default_upgrade_strategy, UserStrategy::PauseAndDrain);
    assert!(cfg.disable_analysis_runs_for_pipeline);
    assert_eq!(cfg.analysis_run_timeout, secs(30));
    // First entry of a kind wins.
    assert_eq!(
        cfg.assessment_schedule(Kind::Pipeline),
        Some(sched(1, 2, 3, 4))
    );
    assert_eq!(cfg.recycle_scale_factor, 25);
    assert_eq!(cfg.max_recyclable_duration, secs(0));
    assert_eq!(cfg.force_drain_failure_wait, secs(5));
    assert!(cfg.keep_undrained_pipelines);
    assert_eq!(cfg.deletion_drain_timeout, secs(45));
    assert_eq!(
        ControllerConfig::default().deletion_drain_timeout,
        DEFAULT_DELETION_DRAIN_TIMEOUT
    );
    assert_eq!(cfg.upgrade_history_limit, 3);
}

#[test]
fn invalid_values_name_the_key() {
    let cases = [
        (
            "defaultUpgradeStrategy: fast",
            r#"defaultUpgradeStrategy: "fast" is not one of progressive, pause-and-drain, no-strategy"#,
        ),
        (
            "permittedRiders: autoscaling/HPA",
            r#"permittedRiders: malformed resource filter rules "autoscaling/HPA": rule 1 "autoscaling/HPA" is not group=<group>,kind=<kind>"#,
        ),
        (
            "includedResources: [a]",
            "includedResources: expected string, got array",
        ),
        (
            "numaflowControllerDefinitionsNamespaces: team-a",
            r#"numaflowControllerDefinitionsNamespaces: expected a list, got string "team-a""#,
        ),
        (
            "numaflowControllerDefinitionsNamespaces: [ok, Team_A]",
            r#"numaflowControllerDefinitionsNamespaces[1]: "Team_A" is not a namespace name: 'T' is not allowed (only lower-case letters, digits and '-')"#,
        ),
        (
            "numaflowControllerDefinitionsNamespaces: [{a: 1}]",
            "numaflowControllerDefinitionsNamespaces[0]: expected a namespace name, got object",
        ),
        (
            "progressive:\n  analysisRunTimeout: 20m",
            r#"progressive.analysisRunTimeout: expected integer, got string "20m""#,
        ),
        (
            "progressive:\n  defaultAssessmentSchedule:\n    - kind: Pipeline\n      schedule: \"10,200,60\"",
            r#"progressive.defaultAssessmentSchedule[0].schedule: "10,200,60" is not 4 comma-separated non-negative integers (delay,end,period,interval)"#,
        ),
        (
            "progressive:\n  defaultAssessmentSchedule:\n    - schedule: \"1,2,3,4\"",
            "progressive.defaultAssessmentSchedule[0].kind: required string is missing",
        ),
        (
            "progressive:\n  defaultAssessmentSchedule:\n    - kind: Pipeline",
            "progressive.defaultAssessmentSchedule[0].schedule: required string is missing",
        ),
        (
            "progressive:\n  defaultAssessmentSchedule: Pipeline",
            r#"progressive.defaultAssessmentSchedule: expected a list, got string "Pipeline""#,
        ),
        (
            "progressive: 3",
            "progressive: expected a mapping, got number 3",
        ),
        (
            "pipeline:\n  recycleScaleFactor: 0",
            "pipeline.recycleScaleFactor: 0 is out of range 1..=100",
        ),
        (
            "pipeline:\n  recycleScaleFactor: 150",
            "pipeline.recycleScaleFactor: 150 is out of range 1..=100",
        ),
        (
            "pipeline:\n  maxRecyclableDurationMinutes: -1",
            "pipeline.maxRecyclableDurationMinutes: -1 is out of range 0..=2147483647",
        ),
        (
            "pipeline:\n  keepUndrainedPipelines: maybe",
            r#"pipeline.keepUndrainedPipelines: expected bool, got string "maybe""#,
        ),
        (
            "featureFlagDisableAnalysisRunsForPipeline: [1]",
            "featureFlagDisableAnalysisRunsForPipeline: expected bool, got array",
        ),
        (
            "upgradeHistoryLimit: 51",
            "upgradeHistoryLimit: 51 is out of range 0..=50",
        ),
        ("- a\n- b", "config.yaml: expected a mapping, got array"),
    ];
    for (yaml, want) in cases {
        let err = parse_controller_config(yaml).unwrap_err();
        assert_eq!(err.to_string(), want, "{yaml}");
        assert_eq!(err.reason(), "InvalidConfig");
    }
    let err = parse_controller_config("logLevel: [unclosed").unwrap_err();
    assert!(
        err.to_string().starts_with("config.yaml: invalid YAML"),
        "{err}"
    );
    assert_eq!(err.reason(), "ConfigParseError");
}

#[test]
fn log_levels() {
    assert_eq!(LogLevel::parse("VERBOSE"), LogLevel::Verbose);
    assert_eq!(LogLevel::parse("Debug"), LogLevel::Debug);
    assert_eq!(LogLevel::parse("warn"), LogLevel::Warn);
    assert_eq!(LogLevel::parse("info"), LogLevel::Info);
    assert_eq!(LogLevel::parse("ERROR"), LogLevel::Info);
    assert_eq!(LogLevel::parse(""), LogLevel::Info);
    assert_eq!(LogLevel::Warn.as_str(), "WARN");
    assert_eq!(
        parse_controller_config("logLevel: 5").unwrap().log_level,
        LogLevel::Info
    );
}

#[test]
fn user_strategies() {
    assert_eq!(
        UserStrategy::parse("progressive"),
        Some(UserStrategy::Progressive)
    );
    assert_eq!(
        UserStrategy::parse("pause-and-drain"),
        Some(UserStrategy::PauseAndDrain)
    );
    assert_eq!(
        UserStrategy::parse("no-strategy"),
        Some(UserStrategy::NoStrategy)
    );
    assert_eq!(UserStrategy::parse(""), Some(UserStrategy::NoStrategy));
    assert_eq!(UserStrategy::parse("Progressive"), None);
    assert_eq!(UserStrategy::parse("ppnd"), None);
    assert_eq!(UserStrategy::PauseAndDrain.as_str(), "pause-and-drain");
    assert_eq!(
        UserStrategy::Progressive.data_loss_strategy(),
        UpgradeStrategy::Progressive
    );
    assert_eq!(
        UserStrategy::PauseAndDrain.data_loss_strategy(),
        UpgradeStrategy::PipelinePauseAndDrain
    );
    assert_eq!(
        UserStrategy::NoStrategy.data_loss_strategy(),
        UpgradeStrategy::DirectApply
    );
}

#[test]
fn assessment_schedules() {
    let k = "spec.strategy.progressive.assessmentSchedule";
    assert_eq!(
        AssessmentSchedule::parse("10,200,60,10", k).unwrap(),
        sched(10, 200, 60, 10)
    );
    assert_eq!(
        AssessmentSchedule::parse(" 0, 0,0 ,10", k).unwrap(),
        sched(0, 0, 0, 10)
    );
    for bad in [
        "",
        "1,2,3",
        "1,2,3,4,5",
        "1,2,-3,4",
        "1,2,x,4",
        "1.5,2,3,4",
        "1,,3,4",
    ] {
        let err = AssessmentSchedule::parse(bad, k).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("{k}: {bad:?} is not 4")),
            "{err}"
        );
    }
    assert_eq!(sched(0, 0, 0, 0).requeue_interval(), secs(1));
    assert_eq!(sched(0, 0, 0, 10).requeue_interval(), secs(10));
}

#[test]
fn namespace_config_and_effective_strategy() {
    let data = configmap_data("reference-samples/namespace-level-config.yaml");
    assert_eq!(
        parse_namespace_config(&data).unwrap(),
        UserStrategy::PauseAndDrain
    );
    let one = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
    assert_eq!(
        parse_namespace_config(&one("upgradeStrategy", "progressive")).unwrap(),
        UserStrategy::Progressive
    );
    assert_eq!(
        parse_namespace_config(&one("upgradeStrategy", "")).unwrap(),
        UserStrategy::NoStrategy
    );
    assert_eq!(
        parse_namespace_config(&one("other", "x")).unwrap(),
        UserStrategy::NoStrategy
    );
    let err = parse_namespace_config(&one("upgradeStrategy", "fast")).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"upgradeStrategy: "fast" is not one of progressive, pause-and-drain, no-strategy"#
    );

    let global = ControllerConfig {
        default_upgrade_strategy: UserStrategy::Progressive,
        ..ControllerConfig::default()
    };
    assert_eq!(effective_strategy(None, &global), UserStrategy::Progressive);
    assert_eq!(
        effective_strategy(Some(UserStrategy::NoStrategy), &global),
        UserStrategy::NoStrategy
    );
    assert_eq!(
        effective_strategy(None, &ControllerConfig::default()),
        UserStrategy::NoStrategy
    );
}

fn field(path: &str, include_subfields: bool) -> SpecField {
    SpecField {
        path: path.into(),
        include_subfields,
    }
}

#[test]
fn parses_the_shipped_usde_config() {
    let data = configmap_data("reference-config/usde-config.yaml");
    let usde = parse_usde_configmap(&data).unwrap();
    let count = |fs: &[SpecField]| (fs.len(), fs.iter().filter(|f| f.include_subfields).count());

    let p = usde.for_kind(Kind::Pipeline);
    assert_eq!(
        p.recreate,
        vec![field("spec.interStepBufferServiceName", false)]
    );
    assert_eq!(count(&p.data_loss), (51, 24));
    assert_eq!(p.data_loss[0], field("spec.edges.from", false));
    assert_eq!(p.data_loss[2], field("spec.edges.conditions", true));
    assert!(p.data_loss.contains(&field("spec.templates", true)));
    assert_eq!(count(&p.progressive), (12, 12));

    let i = usde.for_kind(Kind::IsbService);
    assert_eq!(count(&i.recreate), (6, 2));
    assert_eq!(i.recreate[2], field("spec.jetstream.persistence", true));
    assert_eq!(count(&i.data_loss), (5, 0));
    assert!(i.progressive.is_empty());

    let m = usde.for_kind(Kind::MonoVertex);
    assert_eq!(count(&m.progressive), (51, 33));
    assert!(m.recreate.is_empty() && m.data_loss.is_empty());

    let n = usde.for_kind(Kind::NumaflowController);
    assert_eq!(n.data_loss, vec![field("spec.version", false)]);
}

#[test]
fn usde_edge_cases_and_errors() {
    let data = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
    assert_eq!(
        parse_usde_configmap(&BTreeMap::new()).unwrap(),
        UsdeConfig::default()
    );
    // Unknown keys are ignored; an empty value is empty lists; weak bools work.
    let cfg = parse_usde_configmap(&BTreeMap::from([
        ("vertex".to_string(), "not: [yaml".to_string()),
        ("monovertex".to_string(), "".to_string()),
        (
            "pipeline".to_string(),
            "recreate:\n  - path: spec.x\n    includeSubfields: \"true\"\n".to_string(),
        ),
    ]))
    .unwrap();
    assert_eq!(cfg.pipeline.recreate, vec![field("spec.x", true)]);
    assert_eq!(cfg.monovertex, UsdeKindConfig::default());

    let cases = [
        (
            "dataLoss:\n  - includeSubfields: true",
            "pipeline.dataLoss[0].path: required string is missing",
        ),
        (
            "dataLoss:\n  - path: 3",
            "pipeline.dataLoss[0].path: expected string (quote it), got number 3",
        ),
        (
            "dataLoss: spec.x",
            r#"pipeline.dataLoss: expected a list, got string "spec.x""#,
        ),
        (
            "progressive:\n  - spec.x",
            r#"pipeline.progressive[0]: expected a mapping, got string "spec.x""#,
        ),
        (
            "recreate:\n  - path: a\n    includeSubfields: sure",
            r#"pipeline.recreate[0].includeSubfields: expected bool, got string "sure""#,
        ),
        ("[1]", "pipeline: expected a mapping, got array"),
    ];
    for (yaml, want) in cases {
        assert_eq!(
            parse_usde_configmap(&data("pipeline", yaml))
                .unwrap_err()
                .to_string(),
            want
        );
    }
    let err = parse_usde_configmap(&data("pipeline", "recreate: [")).unwrap_err();
    assert!(
        err.to_string().starts_with("pipeline: invalid YAML"),
        "{err}"
    );
}

#[test]
fn parses_the_shipped_controller_definitions() {
    for version in ["1.5.2", "1.6.0", "1.7.5", "1.8.1"] {
        // Shipped with the install, not test data.
        let path = format!(
            "{}/../../config/numaflow-controller-definitions/controller_def_{version}.yaml",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let cm: Value = serde_saphyr::from_str(&text).unwrap();
        let data: BTreeMap<String, String> = serde_json::from_value(cm["data"].clone()).unwrap();
        let defs = parse_controller_definitions(&data).unwrap();
        assert_eq!(defs.len(), 1, "{version}");
        let (v, spec) = &defs[0];
        assert_eq!(v, version);
        assert!(
            spec.starts_with("apiVersion: v1\nkind: ServiceAccount\n"),
            "{version}"
        );
        assert_eq!(spec.matches("\n---\n").count(), 23, "{version}");
        assert!(spec.contains("{{ .InstanceSuffix }}"), "{version}");
    }
}

#[test]
fn controller_definitions_from_several_values_and_errors() {
    let data = BTreeMap::from([
        ("a.yaml".to_string(), "controllerDefinitions:\n  - version: \"1.0.0\"\n    fullSpec: spec-a\n  - version: \"1.1.0\"\n    fullSpec: spec-b\n".to_string()),
        ("b.yaml".to_string(), "controllerDefinitions: []\n".to_string()),
        ("c.yaml".to_string(), "".to_string()),
    ]);
    assert_eq!(
        parse_controller_definitions(&data).unwrap(),
        vec![
            ("1.0.0".into(), "spec-a".into()),
            ("1.1.0".into(), "spec-b".into())
        ]
    );
    let one = |v: &str| BTreeMap::from([("defs".to_string(), v.to_string())]);
    let cases = [
        (
            "controllerDefinitions:\n  - version: 1.8\n    fullSpec: x",
            "defs.controllerDefinitions[0].version: expected string (quote it), got number 1.8",
        ),
        (
            "controllerDefinitions:\n  - version: \"1.8.1\"",
            "defs.controllerDefinitions[0].fullSpec: required string is missing",
        ),
        (
            "controllerDefinitions: {version: x}",
            "defs.controllerDefinitions: expected a list, got object",
        ),
        (
            "just text",
            r#"defs: expected a mapping, got string "just text""#,
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(
            parse_controller_definitions(&one(yaml))
                .unwrap_err()
                .to_string(),
            want
        );
    }
}
