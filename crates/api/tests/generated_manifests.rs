//! The committed `config/crd/*.yaml` and `config/install.yaml` must be exactly what the Rust types
//! generate: change a type, run `make manifests`, commit both.

use std::path::Path;

#[test]
fn committed_manifests_match_the_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let generated = numaplane_api::manifests::generate(&root).expect("generate manifests");
    assert!(
        generated.len() >= 7,
        "5 CRDs, their kustomization and install.yaml"
    );
    let mut stale = Vec::new();
    for (rel, want) in &generated {
        match std::fs::read_to_string(root.join(rel)) {
            Ok(have) if &have == want => {}
            Ok(_) => stale.push(format!("{} differs", rel.display())),
            Err(e) => stale.push(format!("{}: {e}", rel.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "generated manifests are stale (run `make manifests`):\n{}",
        stale.join("\n")
    );
}

#[test]
fn five_crds_with_status_subresource_and_printer_columns() {
    let crds = numaplane_api::crds::all();
    let mut kinds: Vec<_> = crds.iter().map(|c| c.spec.names.kind.clone()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ISBServiceRollout",
            "MonoVertexRollout",
            "NumaflowController",
            "NumaflowControllerRollout",
            "PipelineRollout"
        ]
    );
    for crd in &crds {
        assert_eq!(crd.spec.group, "numaplane.numaproj.io");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert!(
            crd.spec.names.short_names.is_none(),
            "reference has no short names"
        );
        assert_eq!(crd.spec.versions.len(), 1);
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(v.served && v.storage);
        let sub = v.subresources.as_ref().expect("subresources");
        assert!(
            sub.status.is_some(),
            "{} has a status subresource",
            crd.spec.names.kind
        );
        assert!(sub.scale.is_none());
        let cols: Vec<(&str, &str)> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.json_path.as_str()))
            .collect();
        let mut want = vec![
            ("Age", ".metadata.creationTimestamp"),
            ("Phase", ".status.phase"),
        ];
        match crd.spec.names.kind.as_str() {
            "PipelineRollout" => want.push(("Upgrade In Progress", ".status.upgradeInProgress")),
            "NumaflowControllerRollout" => want.push(("Version", ".spec.controller.version")),
            "NumaflowController" => want.push(("Version", ".spec.version")),
            _ => {}
        }
        assert_eq!(cols, want, "printer columns of {}", crd.spec.names.kind);
    }
}

#[test]
fn embedded_specs_preserve_unknown_fields_and_nc_rollout_has_the_name_rule() {
    for crd in numaplane_api::crds::all() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema to json");
        let root = &schema["openAPIV3Schema"];
        let kind = crd.spec.names.kind.as_str();
        let child = match kind {
            "PipelineRollout" => Some("pipeline"),
            "MonoVertexRollout" => Some("monoVertex"),
            "ISBServiceRollout" => Some("interStepBufferService"),
            _ => None,
        };
        if let Some(child) = child {
            let spec = &root["properties"]["spec"]["properties"][child]["properties"]["spec"];
            assert_eq!(spec["type"], "object", "{kind}");
            assert_eq!(spec["x-kubernetes-preserve-unknown-fields"], true, "{kind}");
            let rider = &root["properties"]["spec"]["properties"]["riders"]["items"]["properties"]
                ["definition"];
            assert_eq!(
                rider["x-kubernetes-preserve-unknown-fields"], true,
                "{kind}"
            );
        }
        let rules = &root["x-kubernetes-validations"];
        if kind == "NumaflowControllerRollout" {
            assert_eq!(
                rules[0]["rule"],
                "self.metadata.name.matches('^numaflow-controller.*')"
            );
            assert_eq!(
                rules[0]["message"],
                "The metadata name must start with 'numaflow-controller'"
            );
        } else {
            assert!(rules.is_null(), "{kind} has no CEL rule");
        }
    }
}

/// Every `image` value anywhere in `doc`.
fn images(doc: &serde_json::Value, out: &mut Vec<String>) {
    match doc {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match v {
                    serde_json::Value::String(s) if k == "image" => out.push(s.clone()),
                    _ => images(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| images(v, out)),
        _ => {}
    }
}

#[test]
fn the_install_runs_our_image_at_the_workspace_version() {
    // Spelled out, not taken from the code under test: `make image` builds exactly this.
    let want = format!(
        "ghcr.io/numaproj/numaplane-rs:v{}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(numaplane_api::manifests::image_reference(), want);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for file in ["config/install.yaml", "config/manager/manager.yaml"] {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut found = Vec::new();
        for doc in &docs {
            images(doc, &mut found);
        }
        assert_eq!(
            found,
            std::slice::from_ref(&want),
            "the images {file} names"
        );
    }
}
