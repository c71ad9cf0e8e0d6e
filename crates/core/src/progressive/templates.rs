//! An AnalysisRun's spec from the (Cluster)AnalysisTemplates a rollout names, merged the way Argo
//! Rollouts merges them (`NewAnalysisRunFromTemplates` of Argo Rollouts 1.8, which the reference
//! calls; docs/strategies.md), so a template that works under an Argo Rollout works here:
//!
//! - templates are the referenced ones, each followed by the ones its `spec.templates` names
//!   (depth first); a template seen again (by name, per scope) is used once;
//! - within one template a repeated metric name keeps its first occurrence (the reference);
//!   across templates a repeated metric name is an error, as are repeated `dryRun` and
//!   `measurementRetention` rules;
//! - metrics, `dryRun` and `measurementRetention` are AnalysisTemplates' first, then
//!   ClusterAnalysisTemplates';
//! - args: each declared once (a later declaration gives a value to one without; two different
//!   values are an error); only declared args survive, the rollout's values override the
//!   declared ones, and an arg left without value or `valueFrom` is an error.

use serde_json::{Map, Value};

/// One fetched template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub name: String,
    pub cluster_scope: bool,
    /// The template's `spec`.
    pub spec: Value,
}

/// A template reference: `{templateName, clusterScope}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TemplateRef {
    pub name: String,
    pub cluster_scope: bool,
}

/// The references a template's `spec.templates` names.
pub fn nested_refs(spec: &Value) -> Vec<TemplateRef> {
    spec.get("templates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some(TemplateRef {
                name: r.get("templateName")?.as_str()?.to_string(),
                cluster_scope: r
                    .get("clusterScope")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            })
        })
        .collect()
}

fn items<'a>(spec: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    spec.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn name_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Concatenates `key` of every template; a `name_key` seen twice is `what` defined twice.
fn concatenated(
    templates: &[&Template],
    key: &str,
    name_key: &str,
    what: &str,
    within_first: bool,
) -> Result<Vec<Value>, String> {
    let mut out: Vec<Value> = Vec::new();
    for t in templates {
        let mut own: Vec<&str> = Vec::new();
        for m in items(&t.spec, key) {
            let n = name_of(m, name_key);
            if within_first && own.contains(&n) {
                continue;
            }
            own.push(n);
            if out.iter().any(|x| name_of(x, name_key) == n) {
                return Err(format!("two {what} have the same name '{n}'"));
            }
            out.push(m.clone());
        }
    }
    Ok(out)
}

/// The AnalysisRun `spec` (`metrics`, `args`, and `dryRun`/`measurementRetention` when any)
/// from `templates` in the order they were resolved, with the rollout's `args` (later ones win).
pub fn run_spec(templates: &[Template], args: &[Value]) -> Result<Value, String> {
    let mut seen: Vec<(bool, &str)> = Vec::new();
    let mut unique: Vec<&Template> = Vec::new();
    for t in templates {
        if !seen.contains(&(t.cluster_scope, t.name.as_str())) {
            seen.push((t.cluster_scope, t.name.as_str()));
            unique.push(t);
        }
    }
    // AnalysisTemplates first, then ClusterAnalysisTemplates.
    let ordered: Vec<&Template> = unique
        .iter()
        .filter(|t| !t.cluster_scope)
        .chain(unique.iter().filter(|t| t.cluster_scope))
        .copied()
        .collect();
    let metrics = concatenated(&ordered, "metrics", "name", "metrics", true)?;
    let dry_run = concatenated(
        &ordered,
        "dryRun",
        "metricName",
        "Dry-Run metric rules",
        false,
    )?;
    let retention = concatenated(
        &ordered,
        "measurementRetention",
        "metricName",
        "Measurement Retention metric rules",
        false,
    )?;
    let mut declared: Vec<Value> = Vec::new();
    for a in ordered.iter().flat_map(|t| items(&t.spec, "args")) {
        let n = name_of(a, "name");
        match declared.iter_mut().find(|d| name_of(d, "name") == n) {
            None => declared.push(a.clone()),
            Some(prev) => {
                let (pv, nv) = (prev.get("value"), a.get("value"));
                if let (Some(p), Some(v)) = (pv, nv)
                    && p != v
                {
                    return Err(format!(
                        "Argument `{n}` specified multiple times with different values: {p}, {v}"
                    ));
                }
                if pv.is_none() {
                    *prev = a.clone();
                }
            }
        }
    }
    for given in args {
        let n = name_of(given, "name");
        if let Some(d) = declared.iter_mut().find(|d| name_of(d, "name") == n) {
            if let Some(v) = given.get("value") {
                d["value"] = v.clone();
            } else if let Some(v) = given.get("valueFrom") {
                d["valueFrom"] = v.clone();
            }
        }
    }
    if let Some(d) = declared
        .iter()
        .find(|d| d.get("value").is_none() && d.get("valueFrom").is_none())
    {
        return Err(format!("args.{} was not resolved", name_of(d, "name")));
    }
    let mut spec = Map::new();
    spec.insert("metrics".into(), Value::Array(metrics));
    spec.insert("args".into(), Value::Array(declared));
    if !dry_run.is_empty() {
        spec.insert("dryRun".into(), Value::Array(dry_run));
    }
    if !retention.is_empty() {
        spec.insert("measurementRetention".into(), Value::Array(retention));
    }
    Ok(Value::Object(spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(name: &str, cluster: bool, spec: Value) -> Template {
        Template {
            name: name.into(),
            cluster_scope: cluster,
            spec,
        }
    }

    #[test]
    fn metrics_and_args_merge_as_argo_does() {
        let a = t(
            "a",
            false,
            json!({"metrics": [{"name": "m1", "q": 1}, {"name": "m1", "q": 2}, {"name": "m2"}],
                   "args": [{"name": "upgrading-pipeline-name"}, {"name": "x", "value": "1"}],
                   "dryRun": [{"metricName": "m2"}]}),
        );
        let c = t(
            "c",
            true,
            json!({"metrics": [{"name": "m3"}], "args": [{"name": "x"}, {"name": "y", "value": "d"}],
                   "measurementRetention": [{"metricName": "m3", "limit": 5}]}),
        );
        // The cluster template comes after the namespaced one whatever the order of reference,
        // and a template named twice is used once.
        let spec = run_spec(
            &[c.clone(), a.clone(), a.clone()],
            &[
                json!({"name": "upgrading-pipeline-name", "value": "p-1"}),
                json!({"name": "y", "value": "given"}),
                json!({"name": "undeclared", "value": "dropped"}),
            ],
        )
        .expect("merged");
        assert_eq!(
            spec,
            json!({
                "metrics": [{"name": "m1", "q": 1}, {"name": "m2"}, {"name": "m3"}],
                "args": [{"name": "upgrading-pipeline-name", "value": "p-1"},
                         {"name": "x", "value": "1"}, {"name": "y", "value": "given"}],
                "dryRun": [{"metricName": "m2"}],
                "measurementRetention": [{"metricName": "m3", "limit": 5}]
            })
        );
    }

    #[test]
    fn conflicts_are_errors_with_argos_words() {
        let a = t("a", false, json!({"metrics": [{"name": "m"}]}));
        let b = t("b", false, json!({"metrics": [{"name": "m"}]}));
        assert_eq!(
            run_spec(&[a, b], &[]).unwrap_err(),
            "two metrics have the same name 'm'"
        );
        let a = t("a", false, json!({"args": [{"name": "x", "value": "1"}]}));
        let b = t("b", true, json!({"args": [{"name": "x", "value": "2"}]}));
        assert!(
            run_spec(&[a, b], &[])
                .unwrap_err()
                .starts_with("Argument `x` specified multiple times")
        );
        let a = t("a", false, json!({"args": [{"name": "x"}]}));
        assert_eq!(run_spec(&[a], &[]).unwrap_err(), "args.x was not resolved");
        let a = t(
            "a",
            false,
            json!({"dryRun": [{"metricName": "m"}, {"metricName": "m"}]}),
        );
        assert_eq!(
            run_spec(&[a], &[]).unwrap_err(),
            "two Dry-Run metric rules have the same name 'm'"
        );
    }

    #[test]
    fn nested_references_are_read() {
        let spec = json!({"templates": [{"templateName": "a"}, {"templateName": "b", "clusterScope": true}, {}]});
        assert_eq!(
            nested_refs(&spec),
            vec![
                TemplateRef {
                    name: "a".into(),
                    cluster_scope: false
                },
                TemplateRef {
                    name: "b".into(),
                    cluster_scope: true
                }
            ]
        );
        assert!(nested_refs(&json!({})).is_empty());
    }
}
