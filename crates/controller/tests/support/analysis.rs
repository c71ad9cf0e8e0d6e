//! The real-analysis suites' shared pieces: the shipped samples and AnalysisTemplates (applied
//! unchanged), template arguments of seconds, a pipeline on the real stack under progressive, and
//! readers of what Argo Rollouts recorded in an AnalysisRun.

use super::Harness;
use super::fixtures::isb_rollout;
use super::scenario::settled;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use numaplane_api::numaflow::AnalysisRun;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use serde_json::{Value, json};

pub const CONFIG: &str = r#"
defaultUpgradeStrategy: "progressive"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,60,1,1"
    - kind: MonoVertex
      schedule: "0,60,1,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

pub const CAT: &str = "quay.io/numaio/numaflow-go/map-cat:stable";
pub const CAT2: &str = "quay.io/numaio/numaflow-go/map-cat:v1";
pub const CAT3: &str = "quay.io/numaio/numaflow-go/map-cat:v2";

/// The AnalysisTemplates Numaplane ships for Numaflow's real metric names, and their names.
pub const SHIPPED_TEMPLATES: &str = "analysis-templates.yaml";
pub const PIPELINE_TEMPLATE: &str = "pipeline-acknowledges-what-it-reads";
pub const MONOVERTEX_TEMPLATE: &str = "monovertex-acknowledges-what-it-reads";
/// The reference sample's pipeline template (it queries `numaflow_`-prefixed names).
pub const SAMPLE_PIPELINE_TEMPLATE: &str = "pipeline-template";

/// The documents of a file in `config/samples`.
pub fn sample(file: &str) -> Vec<Value> {
    let path = format!("{}/../../config/samples/{file}", env!("CARGO_MANIFEST_DIR"));
    super::install::yaml_documents(&std::fs::read_to_string(&path).expect("sample"))
}

/// Applies the AnalysisTemplates of a sample file, as shipped, in the test namespace.
pub async fn apply_sample_template(h: &Harness, file: &str) {
    apply_templates(&h.client, &h.ns, file).await;
}

/// Applies the AnalysisTemplates of sample file `file`, as shipped, in namespace `ns`.
pub async fn apply_templates(client: &kube::Client, ns: &str, file: &str) {
    let templates: Vec<Value> = sample(file)
        .into_iter()
        .filter(|d| d["kind"] == "AnalysisTemplate")
        .collect();
    assert!(!templates.is_empty(), "{file} has an AnalysisTemplate");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AnalysisTemplate",
    ));
    for mut template in templates {
        template["metadata"]["namespace"] = json!(ns);
        let name = template["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string();
        let obj: DynamicObject = serde_json::from_value(template).expect("template");
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
            .patch(
                &name,
                &PatchParams::apply("test-user").force(),
                &Patch::Apply(&obj),
            )
            .await
            .expect("apply the sample AnalysisTemplate");
    }
}

/// The template arguments in seconds: a measurement a second, five successes in a row pass, the
/// first failure fails (the templates default to minutes).
pub fn fast_args() -> Value {
    json!([
        {"name": "interval", "value": "1s"},
        {"name": "success-limit", "value": "5"},
        {"name": "failure-limit", "value": "0"}
    ])
}

/// The sample PipelineRollout with `cat` running `image`, on the ISB service `default`, judged by
/// the shipped template; its arguments shortened to seconds (the template itself is unchanged).
/// (One rollout cannot name both it and the sample's own: their `interval` defaults differ, which
/// Argo Rollouts' merge refuses, and so does Numaplane's.)
pub fn pr(image: &str) -> Value {
    let mut r = sample("numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml")
        .into_iter()
        .find(|d| d["kind"] == "PipelineRollout")
        .expect("the sample has a PipelineRollout");
    r["metadata"] = json!({"name": "pr"});
    let spec = &mut r["spec"]["pipeline"]["spec"];
    spec["interStepBufferServiceName"] = json!("default");
    spec["vertices"][1]["udf"]["container"]["image"] = json!(image);
    r["spec"]["strategy"]["analysis"]["templates"] = json!([{"templateName": PIPELINE_TEMPLATE}]);
    r["spec"]["strategy"]["analysis"]["args"] = fast_args();
    r
}

pub async fn setup(prefix: &str) -> Harness {
    let h = Harness::start_real(prefix, CONFIG).await;
    h.apply::<ISBServiceRollout>(isb_rollout("default", json!({"version": "2.10.17"})))
        .await;
    apply_sample_template(&h, SHIPPED_TEMPLATES).await;
    apply_sample_template(&h, "numaplane.numaproj.io_v1alpha1_pipelinerollout.yaml").await;
    h.apply::<PipelineRollout>(pr(CAT)).await;
    h.until::<PipelineRollout, _, _>("pr-0 deployed", "pr", settled)
        .await;
    h
}

pub fn run_phase(run: &AnalysisRun) -> String {
    run.status
        .as_ref()
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Every metric's measurements, as Argo recorded them (value and phase).
pub fn measurements(run: &AnalysisRun) -> Vec<(String, String, String)> {
    run.status
        .as_ref()
        .and_then(|s| s.get("metricResults"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|m| {
            let name = m["name"].as_str().unwrap_or_default().to_string();
            m["measurements"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |x| {
                    (
                        name.clone(),
                        x["value"].as_str().unwrap_or_default().to_string(),
                        x["phase"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
