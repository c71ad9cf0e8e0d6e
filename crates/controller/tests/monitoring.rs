//! The monitoring kit of `config/monitoring` against the real thing: promtool checks the alerting
//! rules and runs their unit tests (each alert fires for what it names, after its `for`, and not
//! for its healthy neighbours); the PrometheusRule carries the same groups; and a real Prometheus
//! loads the rules while scraping a live operator: a Failed rollout raises its alert, a Deployed
//! one none, the operator's death raises NumaplaneOperatorNotReady, and every query of the
//! Grafana dashboard parses and reads only metrics the operator exposes.

mod support;

use numaplane_api::common::Phase;
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use numaplane_testenv::TestEnv;
use numaplane_testenv::binaries::RealStackBinaries;
use promql_parser::parser::Expr;
use promql_parser::util::{ExprVisitor, walk_expr};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use support::{Process, eventually, free_port, http_get, install_numaflow, install_rbac, repo};

const RULES: &str = "config/monitoring/numaplane-rules.yaml";
const PROMETHEUS_RULE: &str = "config/monitoring/prometheusrule.yaml";
const DASHBOARD: &str = "config/monitoring/grafana-dashboard.json";
const RULE_TESTS: &str = "crates/controller/tests/data/numaplane-rules.test.yaml";

fn promtool(args: &[&str]) -> String {
    let bins = RealStackBinaries::locate().expect("real-stack binaries (make testenv-binaries)");
    let out = Command::new(&bins.promtool)
        .args(args)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn alerting_rules_pass_promtool_and_their_unit_tests() {
    let rules = repo(RULES);
    let text = promtool(&["check", "rules", &rules.display().to_string()]);
    assert!(text.contains("SUCCESS: 5 rules found"), "{text}");
    let text = promtool(&["test", "rules", &repo(RULE_TESTS).display().to_string()]);
    assert!(text.contains("SUCCESS"), "{text}");
}

fn yaml(rel: &str) -> Value {
    let text = std::fs::read_to_string(repo(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_prometheusrule_carries_the_rules_file() {
    let plain = yaml(RULES);
    let cr = yaml(PROMETHEUS_RULE);
    assert_eq!(cr["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(cr["kind"], "PrometheusRule");
    assert_eq!(cr["spec"]["groups"], plain["groups"]);
}

/// Every PromQL expression of the dashboard: panel targets (rows included) and variable
/// queries, with Grafana's variables given values a query can run with.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo(DASHBOARD)).expect("dashboard");
    let dash: Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let mut out = Vec::new();
    fn panels(list: &Value, out: &mut Vec<(String, String)>) {
        for p in list.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().expect("every target has an expr");
                out.push((format!("panel {:?}", p["title"]), expr.to_string()));
            }
            panels(&p["panels"], out);
        }
    }
    panels(&dash["panels"], &mut out);
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] == "query" {
            // label_values(METRIC, LABEL): the metric is the query.
            let q = v["query"].as_str().expect("variable query");
            let metric = q
                .strip_prefix("label_values(")
                .and_then(|r| r.split_once(','))
                .map(|(m, _)| m.trim())
                .unwrap_or_else(|| panic!("variable query {q} is not label_values(metric, label)"));
            out.push((format!("variable {}", v["name"]), metric.to_string()));
        }
    }
    let substituted = out
        .into_iter()
        .map(|(w, e)| {
            let e = e
                .replace("$__rate_interval", "1m")
                .replace("$__range", "1h")
                .replace("$namespace", ".*")
                .replace("$job", ".*");
            assert!(
                !e.contains('$'),
                "{w}: a variable the test does not know: {e}"
            );
            (w, e)
        })
        .collect::<Vec<_>>();
    assert!(substituted.len() > 20, "the dashboard lost its panels");
    substituted
}

fn rule_exprs() -> Vec<(String, String)> {
    let rules = yaml(RULES);
    rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            (
                format!("rule {}", r["alert"]),
                r["expr"].as_str().expect("rule expr").to_string(),
            )
        })
        .collect()
}

/// The metric names an expression selects.
fn metric_names(what: &str, expr: &str) -> BTreeSet<String> {
    struct Names(BTreeSet<String>);
    impl ExprVisitor for Names {
        type Error = ();
        fn pre_visit(&mut self, e: &Expr) -> Result<bool, ()> {
            let vs = match e {
                Expr::VectorSelector(vs) => vs,
                Expr::MatrixSelector(ms) => &ms.vs,
                _ => return Ok(true),
            };
            self.0.insert(vs.name.clone().unwrap_or_default());
            Ok(true)
        }
    }
    let ast = promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{what}: {e}: {expr}"));
    let mut names = Names(BTreeSet::new());
    let _ = walk_expr(&mut names, &ast);
    assert!(
        !names.0.contains(""),
        "{what}: a selector without a metric name: {expr}"
    );
    names.0
}

/// Percent-encodes a query parameter.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn prom_api(port: u16, path: &str) -> Value {
    let (code, body) = http_get(port, path).await.unwrap_or((0, String::new()));
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    assert!(
        code == 200 && v["status"] == "success",
        "Prometheus {path}: {code} {body}"
    );
    v["data"].clone()
}

/// The alerts Prometheus holds (pending or firing) named `alert`: their labels and state.
async fn alerts(port: u16, alert: &str) -> Vec<(Value, String)> {
    let data = prom_api(port, "/api/v1/alerts").await;
    data["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["labels"]["alertname"] == alert)
        .map(|a| {
            (
                a["labels"].clone(),
                a["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn start_prometheus(dir: &Path, operator_metrics: u16, port: u16) -> std::process::Child {
    let bins = RealStackBinaries::locate().expect("real-stack binaries (make testenv-binaries)");
    let cfg = dir.join("prometheus.yaml");
    std::fs::write(
        &cfg,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [\"{}\"]\n\
             scrape_configs:\n  - job_name: numaplane-controller-metrics\n    \
             static_configs:\n      - targets: [\"127.0.0.1:{operator_metrics}\"]\n",
            repo(RULES).display()
        ),
    )
    .expect("prometheus config");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    Command::new(&bins.prometheus)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("start prometheus")
}

struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn rules_and_dashboard_on_a_live_operator() {
    let env = TestEnv::shared_real().await;
    let client = env.client();
    install_rbac(&client).await;
    let ns = env.create_namespace("monitoring").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "defaultUpgradeStrategy: no-strategy\n").expect("config");
    let operator = Process::start(env, &ns, &config, dir.path(), "operator", &[]);
    install_numaflow(&client, "numaplane-system", &ns, "1.8.1").await;

    let isbr: ISBServiceRollout = serde_json::from_value(support::fixtures::isb_rollout(
        "default",
        json!({"version": "2.10.17"}),
    ))
    .expect("isbr");
    let isbrs = kube::Api::<ISBServiceRollout>::namespaced(client.clone(), &ns);
    isbrs
        .create(&Default::default(), &isbr)
        .await
        .expect("create isbr");
    let bad: PipelineRollout = serde_json::from_value(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "PipelineRollout",
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {"pipeline": {"spec": {"vertices": "in"}}}
    }))
    .expect("pr");
    let prs = kube::Api::<PipelineRollout>::namespaced(client.clone(), &ns);
    prs.create(&Default::default(), &bad)
        .await
        .expect("create pr");
    eventually(
        "the ISB service Deployed and the pipeline Failed",
        || async {
            let isb = isbrs.get("default").await.ok()?.status?.status.phase;
            let pr = prs.get("bad").await.ok()?.status?.status.phase;
            (isb == Phase::Deployed && pr == Phase::Failed).then_some(())
        },
    )
    .await;

    let port = free_port();
    let _prometheus = Killed(start_prometheus(dir.path(), operator.metrics, port));
    // The failed rollout's alert is pending (it fires after its `for`); nothing names the
    // Deployed ISB service; a leading operator is ready.
    let failed = eventually(
        "NumaplaneRolloutFailed pending for the failed rollout",
        || async {
            let (code, _) = http_get(port, "/-/ready").await?;
            if code != 200 {
                return None;
            }
            let found = alerts(port, "NumaplaneRolloutFailed").await;
            let ours = found.iter().any(|(l, s)| {
                l["namespace"] == ns.as_str() && l["pipeline"] == "bad" && s == "pending"
            });
            let ready = alerts(port, "NumaplaneOperatorNotReady").await.is_empty();
            (ours && ready).then_some(found)
        },
    )
    .await;
    assert_eq!(failed.len(), 1, "only the failed rollout: {failed:?}");
    for alert in [
        "NumaplaneProgressiveUpgradeFailed",
        "NumaplaneRolloutNotConverging",
        "NumaplanePipelineDrainIncomplete",
    ] {
        let found = alerts(port, alert).await;
        assert!(found.is_empty(), "{alert} raised: {found:?}");
    }

    // Every dashboard query and every rule expression reads only metrics the operator can
    // expose (the live exposition lacks families without series yet), and Prometheus itself
    // parses and runs each.
    let exposed = numaplane::metrics::Metrics::new().series_names();
    let live = operator.metrics_text().await;
    for line in live
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
        assert!(
            exposed.contains(name),
            "{name} exposed but not in series_names"
        );
    }
    let queries: Vec<(String, String)> = dashboard_queries()
        .into_iter()
        .chain(rule_exprs())
        .collect();
    for (what, expr) in &queries {
        for name in metric_names(what, expr) {
            assert!(
                exposed.contains(&name),
                "{what} reads {name}, which the operator does not expose: {expr}"
            );
        }
        prom_api(port, &format!("/api/v1/query?query={}", encode(expr))).await;
    }
    // Prometheus holds the operator's series: one health series per rollout.
    let by_phase = prom_api(
        port,
        &format!(
            "/api/v1/query?query={}",
            encode(&format!(
                "sum(numaplane_pipeline_rollout_health{{namespace=\"{ns}\"}}) + sum(numaplane_isb_services_rollout_health{{namespace=\"{ns}\"}})"
            ))
        ),
    )
    .await;
    assert_eq!(by_phase["result"][0]["value"][1], "2", "{by_phase}");

    // The operator dies: no replica leads, and the alert says so.
    drop(operator);
    eventually(
        "NumaplaneOperatorNotReady pending once the operator is gone",
        || async { (alerts(port, "NumaplaneOperatorNotReady").await.len() == 1).then_some(()) },
    )
    .await;
}

/// Every alert links its runbook: a section of docs/troubleshooting.md named after it, at the
/// repository's address (Cargo.toml's `repository`).
#[test]
fn every_alert_links_its_runbook() {
    let base = format!(
        "{}/blob/main/docs/troubleshooting.md#",
        env!("CARGO_PKG_REPOSITORY")
    );
    let doc = std::fs::read_to_string(repo("docs/troubleshooting.md")).expect("troubleshooting");
    let rules = yaml(RULES);
    let mut seen = 0;
    for group in rules["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            seen += 1;
            let url = rule["annotations"]["runbook_url"]
                .as_str()
                .unwrap_or_default();
            assert_eq!(
                url,
                format!("{base}{}", alert.to_lowercase()),
                "{alert}: runbook_url"
            );
            assert!(
                doc.lines().any(|l| l == format!("### {alert}")),
                "docs/troubleshooting.md has a section `### {alert}`"
            );
        }
    }
    assert!(seen >= 5, "{seen} alerts");
}

/// The ServiceMonitor and PodMonitor select what the install ships: the metrics Service (and
/// its `metrics` port) and the operator's pods (and their `metrics` container port).
#[test]
fn the_monitors_select_the_installed_service_and_pods() {
    let service = yaml("config/manager/metrics-service.yaml");
    let deployment = yaml("config/manager/manager.yaml");
    let sm = yaml("config/monitoring/servicemonitor.yaml");
    assert_eq!(sm["kind"], "ServiceMonitor");
    assert_eq!(
        sm["metadata"]["namespace"],
        service["metadata"]["namespace"]
    );
    let labels = service["metadata"]["labels"].as_object().expect("labels");
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(labels.get(k), Some(v), "the Service carries {k}={v}");
    }
    let port = &sm["spec"]["endpoints"][0]["port"];
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| &p["name"] == port),
        "the Service has port {port}"
    );
    let pm = yaml("config/monitoring/podmonitor.yaml");
    assert_eq!(pm["kind"], "PodMonitor");
    let template = &deployment["spec"]["template"];
    let pod_labels = template["metadata"]["labels"]
        .as_object()
        .expect("pod labels");
    for (k, v) in pm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(pod_labels.get(k), Some(v), "the pods carry {k}={v}");
    }
    let port = &pm["spec"]["podMetricsEndpoints"][0]["port"];
    assert!(
        template["spec"]["containers"][0]["ports"]
            .as_array()
            .expect("container ports")
            .iter()
            .any(|p| &p["name"] == port),
        "the container has port {port}"
    );
}
