//! Compatibility: every Numaplane object in the reference samples (and our own every-field
//! fixture) deserialises into the Rust types and serialises back with no field lost or changed.
//!
//! Comparison is on JSON values after dropping `null`s from the input: a YAML key with no value
//! (`riders:` in the reference samples) is null, which our types read as absent and omit when
//! writing; no reader (ours, the reference's, kubectl's) treats a null differently from absent.

use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowController, NumaflowControllerRollout,
    PipelineRollout,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(doc: &Value, origin: &str) {
    let mut want = doc.clone();
    strip_nulls(&mut want);
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{origin}: does not deserialise: {e}"));
    let got = serde_json::to_value(&typed).expect("serialise");
    pretty_assertions::assert_eq!(got, want, "{origin}: round trip changed the object");
}

/// Round-trips every Numaplane object in `files`; returns the kinds seen.
fn check_files(dir: &Path) -> BTreeSet<String> {
    let mut kinds = BTreeSet::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "no samples in {}", dir.display());
    for path in entries {
        let text = std::fs::read_to_string(&path).expect("read sample");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (i, doc) in docs.iter().enumerate() {
            let origin = format!("{} document {i}", path.display());
            let Some(api_version) = doc["apiVersion"].as_str() else {
                continue; // kustomization.yaml
            };
            if api_version != numaplane_api::API_VERSION {
                continue; // AnalysisTemplates, ConfigMaps
            }
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            match kind.as_str() {
                "PipelineRollout" => roundtrip::<PipelineRollout>(doc, &origin),
                "MonoVertexRollout" => roundtrip::<MonoVertexRollout>(doc, &origin),
                "ISBServiceRollout" => roundtrip::<ISBServiceRollout>(doc, &origin),
                "NumaflowControllerRollout" => roundtrip::<NumaflowControllerRollout>(doc, &origin),
                "NumaflowController" => roundtrip::<NumaflowController>(doc, &origin),
                other => panic!("{origin}: unknown Numaplane kind {other}"),
            }
            kinds.insert(kind);
        }
    }
    kinds
}

fn repo(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

#[test]
fn reference_samples_round_trip() {
    let kinds = check_files(&repo("testdata/reference-samples"));
    assert_eq!(kinds.len(), 5, "all five kinds are covered: {kinds:?}");
}

#[test]
fn our_samples_round_trip() {
    let kinds = check_files(&repo("config/samples"));
    assert_eq!(kinds.len(), 5, "all five kinds are covered: {kinds:?}");
}

/// Every spec and status field of every kind, set: removing or renaming any field of a type
/// makes this fail.
#[test]
fn every_field_round_trips() {
    let kinds = check_files(&repo("testdata/every-field"));
    assert_eq!(kinds.len(), 5, "all five kinds are covered: {kinds:?}");
}

/// `kubectl apply -k config/samples` installs one Numaflow controller per namespace: the
/// kustomization lists a NumaflowControllerRollout or a NumaflowController for a namespace,
/// never both (two controllers would fight over the same objects).
#[test]
fn the_samples_kustomization_installs_one_numaflow_controller_per_namespace() {
    let dir = repo("config/samples");
    let k: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization.yaml"),
    )
    .expect("parse kustomization.yaml");
    let mut controllers: Vec<(String, String)> = Vec::new();
    for res in k["resources"].as_array().expect("resources") {
        let file = dir.join(res.as_str().expect("a file name"));
        let text = std::fs::read_to_string(&file).expect("a listed sample");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("parse a sample");
        for d in docs {
            if matches!(
                d["kind"].as_str(),
                Some("NumaflowController" | "NumaflowControllerRollout")
            ) {
                let ns = d["metadata"]["namespace"].as_str().unwrap_or("default");
                controllers.push((ns.to_string(), file.display().to_string()));
            }
        }
    }
    let namespaces: BTreeSet<&str> = controllers.iter().map(|(ns, _)| ns.as_str()).collect();
    assert!(
        !controllers.is_empty(),
        "the samples install a Numaflow controller"
    );
    assert_eq!(
        namespaces.len(),
        controllers.len(),
        "more than one Numaflow controller in a namespace: {controllers:?}"
    );
}
