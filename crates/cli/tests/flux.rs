//! The Flux health-check expressions of `config/flux/health-checks.yaml`, evaluated as Flux's
//! kustomize-controller does (`inProgress`, then `failed`, then `current`; the first that holds
//! decides; none: still in progress; an error: waited on like in progress) on the real status
//! objects of `config/argocd/testdata` (written by `crates/controller/tests/argocd_fixtures.rs`)
//! and on states derived from them field by field.

use cel_interpreter::{Context, Program, Value as CelValue};
use serde_json::{Value, json};
use std::path::Path;

fn repo_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(&repo_file(&format!("config/argocd/testdata/{name}.json")))
        .expect("fixture json")
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Health {
    InProgress,
    Failed,
    Current,
}

/// The expressions for `kind`, in Flux's order of evaluation.
fn exprs(kind: &str) -> Vec<(Health, String)> {
    let doc: Value = serde_saphyr::from_str(&repo_file("config/flux/health-checks.yaml"))
        .expect("health-checks.yaml parses");
    let entry = doc["spec"]["healthCheckExprs"]
        .as_array()
        .expect("healthCheckExprs")
        .iter()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no expressions for {kind}"))
        .clone();
    assert_eq!(entry["apiVersion"], "numaplane.numaproj.io/v1alpha1");
    [
        (Health::InProgress, "inProgress"),
        (Health::Failed, "failed"),
        (Health::Current, "current"),
    ]
    .into_iter()
    .filter_map(|(h, key)| entry[key].as_str().map(|e| (h, e.to_string())))
    .collect()
}

/// Evaluates one expression with the object's top-level fields as variables, as Flux does.
fn holds(expr: &str, object: &Value) -> Result<bool, String> {
    let program = Program::compile(expr).map_err(|e| format!("{expr}: {e}"))?;
    let mut ctx = Context::default();
    for (k, v) in object.as_object().expect("an object") {
        ctx.add_variable(k.as_str(), v.clone())
            .map_err(|e| format!("{k}: {e}"))?;
    }
    match program.execute(&ctx).map_err(|e| format!("{expr}: {e}"))? {
        CelValue::Bool(b) => Ok(b),
        other => Err(format!("{expr} gave {other:?}, not a bool")),
    }
}

/// Flux's verdict: an error in an expression leaves the object waited on (in progress).
fn health(object: &Value) -> Health {
    let kind = object["kind"].as_str().expect("kind");
    for (h, expr) in exprs(kind) {
        match holds(&expr, object) {
            Ok(true) => return h,
            Ok(false) => {}
            Err(_) => return Health::InProgress,
        }
    }
    Health::InProgress
}

#[test]
fn every_kind_has_expressions_that_compile() {
    for kind in [
        "PipelineRollout",
        "MonoVertexRollout",
        "ISBServiceRollout",
        "NumaflowControllerRollout",
        "NumaflowController",
    ] {
        let e = exprs(kind);
        assert_eq!(e.len(), 3, "{kind}: inProgress, failed and current");
        for (_, expr) in e {
            Program::compile(&expr).unwrap_or_else(|err| panic!("{kind}: {expr}: {err}"));
        }
    }
}

#[test]
fn the_real_objects_read_as_a_user_expects() {
    for (name, want) in [
        ("pipelinerollout-deployed", Health::Current),
        ("monovertexrollout-deployed", Health::Current),
        ("isbservicerollout-deployed", Health::Current),
        ("numaflowcontrollerrollout-deployed", Health::Current),
        ("numaflowcontroller-deployed", Health::Current),
        // A pause the user asked for is where the spec says to be.
        ("pipelinerollout-paused", Health::Current),
        ("monovertexrollout-paused", Health::Current),
        // Flux reads a plain Failed phase as healthy without these expressions.
        ("pipelinerollout-failed", Health::Failed),
        ("pipelinerollout-pause-and-drain", Health::InProgress),
    ] {
        assert_eq!(health(&fixture(name)), want, "{name}");
    }
}

#[test]
fn derived_states_read_as_a_user_expects() {
    let deployed = fixture("pipelinerollout-deployed");

    // A spec edit not yet observed: in progress, whatever the phase says.
    let mut edited = deployed.clone();
    edited["metadata"]["generation"] = json!(2);
    assert_eq!(health(&edited), Health::InProgress);

    // A progressive upgrade under assessment, then its trial failed: the rollout stays Pending
    // on its promoted child, and only the condition tells the two apart.
    let mut assessing = deployed.clone();
    assessing["status"]["phase"] = json!("Pending");
    assessing["status"]["upgradeInProgress"] = json!("Progressive");
    assert_eq!(health(&assessing), Health::InProgress);
    let mut failed = assessing.clone();
    failed["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .push(
            json!({"type": "ProgressiveUpgradeSucceeded", "status": "False",
                     "reason": "Failed", "message": "New Child Object ns/p-1 Failed"}),
        );
    assert_eq!(health(&failed), Health::Failed);

    // Deployed with an unhealthy child: not current, waited on until Flux's timeout.
    let mut unhealthy = deployed.clone();
    for c in unhealthy["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
    {
        if c["type"] == "ChildResourcesHealthy" {
            c["status"] = json!("False");
        }
    }
    assert_eq!(health(&unhealthy), Health::InProgress);

    // Just created, no status yet: waited on (the expressions cannot read a missing status).
    let mut new = deployed.clone();
    new.as_object_mut().expect("object").remove("status");
    assert_eq!(health(&new), Health::InProgress);
    assert!(holds(&exprs("PipelineRollout")[0].1, &new).is_err());
}
