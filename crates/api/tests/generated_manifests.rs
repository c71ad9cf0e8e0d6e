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
