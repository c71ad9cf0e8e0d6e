//! `kubectl numaplane dashboard` against a real kube-apiserver (no operator: rollouts, children
//! and statuses are written with the admin client): the table and a rollout's page pushed over
//! server-sent events as the objects change, the actions with the user's RBAC (a 403 stays a
//! 403), the guard (this run's token, its own address and origin, loopback unless allowed), and
//! its memory with 1,000 rollouts.
//! The browser end of it is `crates/controller/tests/dashboard_browser.rs`.

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use numaplane_api::numaflow::MonoVertex;
use numaplane_api::{MonoVertexRollout, PipelineRollout};
use numaplane_testenv::TestEnv;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

mod support;
use support::{create, deployed_status, pipeline_rollout};

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-numaplane");
const WAIT: Duration = Duration::from_secs(30);

/// A running `kubectl-numaplane dashboard --port 0`.
struct Dashboard {
    child: tokio::process::Child,
    port: u16,
    /// This run's token, from the address it printed.
    token: String,
}

impl Dashboard {
    async fn start(kubeconfig: &Path, args: &[&str]) -> Dashboard {
        let mut child = tokio::process::Command::new(BIN)
            .arg("dashboard")
            .args(["--port", "0", "--kubeconfig"])
            .arg(kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("starting kubectl-numaplane dashboard");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("the dashboard printed no address within 30s")
            .expect("reading stdout")
            .expect("the dashboard exited before printing its address");
        let (port, token) = first
            .strip_prefix("Numaplane dashboard: http://127.0.0.1:")
            .and_then(|rest| rest.split_once("/?token="))
            .and_then(|(port, token)| Some((port.parse().ok()?, token.to_string())))
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
        assert!(
            token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
            "a 256-bit token in hex: {first:?}"
        );
        // Keep draining stdout so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Dashboard { child, port, token }
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Ctrl-C: the exit code, which must come within 10 s.
    async fn interrupt(mut self) -> i32 {
        let sent = std::process::Command::new("kill")
            .args(["-INT", &self.pid().to_string()])
            .status()
            .expect("kill -INT");
        assert!(sent.success());
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("the dashboard did not stop within 10 s of Ctrl-C")
            .expect("wait");
        status.code().unwrap_or(-1)
    }

    /// An HTTP/1.0 request with this run's token (the server then closes the connection after
    /// the body).
    async fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let bearer = self.bearer();
        let mut all = vec![("Authorization", bearer.as_str())];
        all.extend_from_slice(headers);
        self.send(method, path, &format!("127.0.0.1:{}", self.port), &all)
            .await
    }

    /// An HTTP/1.0 request with exactly these headers besides `Host`.
    async fn send(
        &self,
        method: &str,
        path: &str,
        host: &str,
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("connect");
        let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: 0\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        let mut buf = String::new();
        tokio::time::timeout(WAIT, s.read_to_string(&mut buf))
            .await
            .expect("answer within 30s")
            .expect("read");
        let code = buf
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP answer: {buf:?}"));
        let body = buf
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (code, body)
    }

    async fn json(&self, path: &str) -> Value {
        let (code, body) = self.request("GET", path, &[]).await;
        assert_eq!(code, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    async fn act(&self, path: &str) -> (u16, Value) {
        let (code, body) = self
            .request(
                "POST",
                path,
                &[("X-Numaplane-Dashboard", "1"), ("Origin", &self.origin())],
            )
            .await;
        (code, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// An event stream, with the token in the query as a browser's `EventSource` sends it.
    async fn events(&self, path: &str) -> Events {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("connect");
        s.write_all(
            format!(
                "GET {path}?token={} HTTP/1.0\r\nHost: localhost:{}\r\nAccept: text/event-stream\r\n\r\n",
                self.token, self.port
            )
            .as_bytes(),
        )
        .await
        .expect("write");
        let mut lines = BufReader::new(s).lines();
        // The status line and headers.
        while let Some(line) = lines.next_line().await.expect("read") {
            if line.is_empty() {
                break;
            }
            if line.starts_with("HTTP/") {
                assert!(line.contains(" 200 "), "{path}: {line}");
            }
        }
        Events { lines }
    }
}

/// A server-sent event stream.
struct Events {
    lines: tokio::io::Lines<BufReader<TcpStream>>,
}

impl Events {
    /// The next event (name, data), or `None` when none came within `within`.
    async fn next(&mut self, within: Duration) -> Option<(String, Value)> {
        let read = async {
            let (mut name, mut data) = (String::new(), String::new());
            while let Some(line) = self.lines.next_line().await.ok()? {
                if line.is_empty() {
                    if !data.is_empty() {
                        return Some((name, serde_json::from_str(&data).unwrap_or(Value::Null)));
                    }
                    continue;
                }
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_string();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            None
        };
        tokio::time::timeout(within, read).await.ok().flatten()
    }

    /// Events until `check` accepts one; panics after `WAIT`.
    async fn until(&mut self, what: &str, mut check: impl FnMut(&str, &Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let Some((name, data)) = self.next(left).await else {
                break;
            };
            if check(&name, &data) {
                return data;
            }
            seen.push(name);
        }
        panic!("no event with {what} within {WAIT:?}; saw {seen:?}");
    }
}

/// A MonoVertexRollout in the middle of a progressive upgrade: promoted `mvr-0`, trial `mvr-1`.
async fn upgrading_mono_vertex(client: &Client, ns: &str, deadline: &str) {
    create::<MonoVertexRollout>(
        client,
        ns,
        json!({
            "apiVersion": "numaplane.numaproj.io/v1alpha1",
            "kind": "MonoVertexRollout",
            "metadata": {"name": "mvr"},
            "spec": {"monoVertex": {"spec": {"source": {"udsource": {"container": {"image": "src:2"}}},
                                             "sink": {"log": {}}}}}
        }),
        Some(json!({
            "phase": "Pending", "observedGeneration": 1, "upgradeInProgress": "Progressive",
            "message": format!("trial mvr-1: healthy since 2026-12-01T00:00:10Z, succeeds at 2026-12-01T00:01:10Z if it stays healthy, must complete by {deadline}"),
            "progressiveStatus": {"upgradingMonoVertexStatus": {"name": "mvr-1",
                "basicAssessmentStartTime": "2026-12-01T00:00:00Z"}}
        })),
    )
    .await;
    for (name, state) in [("mvr-0", "promoted"), ("mvr-1", "trial")] {
        create::<MonoVertex>(
            client,
            ns,
            json!({
                "apiVersion": "numaflow.numaproj.io/v1alpha1", "kind": "MonoVertex",
                "metadata": {"name": name, "labels": {
                    "numaplane.numaproj.io/parent-rollout-name": "mvr",
                    "numaplane.numaproj.io/upgrade-state": state}},
                "spec": {"source": {"udsource": {"container": {"image": "src"}}}, "sink": {"log": {}}}
            }),
            Some(json!({"phase": "Running", "replicas": 1, "readyReplicas": 1})),
        )
        .await;
    }
}

fn rows_in(data: &Value, ns: &str) -> Vec<Value> {
    data["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|r| r["namespace"] == ns)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn the_table_and_a_rollout_page_follow_the_cluster_and_actions_use_the_users_rbac() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("dash").await;
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("p"),
        Some(deployed_status(1)),
    )
    .await;
    upgrading_mono_vertex(&client, &ns, "2099-01-01T00:00:00Z").await;

    let admin = Dashboard::start(&env.kubeconfig_path(), &[]).await;
    // The page and its assets come from the binary.
    let (code, page) = admin.request("GET", "/", &[]).await;
    assert_eq!(code, 200);
    assert!(page.contains("<title>Numaplane</title>"), "{page}");
    let (code, script) = admin.request("GET", "/app.js", &[]).await;
    assert_eq!(code, 200);
    assert!(script.contains("EventSource"), "the page is fed by events");

    // The table: every namespace (the admin may list them all), pushed as it fills.
    let mut table = admin.events("/api/rollouts/stream").await;
    let mut keys = std::collections::BTreeSet::new();
    table
        .until("both rollouts of the namespace", |name, data| {
            match name {
                "rows" => keys.extend(rows_in(data, &ns).iter().map(|r| r["key"].to_string())),
                "upsert" if data["namespace"] == ns.as_str() => {
                    keys.insert(data["key"].to_string());
                }
                _ => {}
            }
            keys.len() == 2
        })
        .await;
    let info = admin.json("/api/info").await;
    assert_eq!(info["scope"], "all namespaces", "{info}");
    let rows = rows_in(&admin.json("/api/rollouts").await, &ns);
    let mv = rows
        .iter()
        .find(|r| r["kind"] == "MonoVertexRollout")
        .expect("mvr row");
    assert_eq!(mv["strategy"], "Progressive");
    assert_eq!(mv["until"], "2099-01-01T00:00:00Z", "{mv}");
    assert!(
        mv["waiting"]
            .as_str()
            .is_some_and(|w| w.contains("healthy since 2026-12-01T00:00:10Z")),
        "{mv}"
    );
    let p = rows
        .iter()
        .find(|r| r["kind"] == "PipelineRollout")
        .expect("p row");
    assert_eq!(
        (&p["phase"], &p["waiting"]),
        (&json!("Deployed"), &json!(""))
    );

    // A status change reaches the open table by itself.
    Api::<PipelineRollout>::namespaced(client.clone(), &ns)
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Pending",
                "message": "pause-and-drain: waiting for pipeline p-0 to drain and pause"}})),
        )
        .await
        .expect("status");
    let pushed = table
        .until("the pipeline's new phase", |name, d| {
            name == "upsert" && d["namespace"] == ns.as_str() && d["phase"] == "Pending"
        })
        .await;
    assert_eq!(
        pushed["waiting"],
        "pause-and-drain: waiting for pipeline p-0 to drain and pause"
    );

    // A rollout's page: its children and trial, pushed again when a child changes.
    let page_path = format!("/api/rollouts/monovertexrollout/{ns}/mvr");
    let detail = admin.json(&page_path).await;
    assert_eq!(detail["rollout"]["name"], "mvr");
    assert_eq!(detail["rollout"]["trial"]["name"], "mvr-1");
    assert_eq!(detail["until"], "2099-01-01T00:00:00Z");
    let children: Vec<&str> = detail["rollout"]["children"]
        .as_array()
        .expect("children")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(children, ["mvr-0", "mvr-1"]);
    let mut page = admin.events(&format!("{page_path}/stream")).await;
    page.until("the first page", |name, d| {
        name == "detail" && d["rollout"]["name"] == "mvr"
    })
    .await;
    let (code, answer) = admin.act(&format!("{page_path}/actions/promote")).await;
    assert_eq!(code, 200, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("MonoVertex/mvr-1 (trial of MonoVertexRollout/mvr) labelled numaplane.numaproj.io/force-promote")),
        "{answer}"
    );
    let labelled: MonoVertex = Api::namespaced(client.clone(), &ns)
        .get("mvr-1")
        .await
        .expect("mvr-1");
    assert_eq!(
        labelled.metadata.labels.as_ref().expect("labels")["numaplane.numaproj.io/force-promote"],
        "true"
    );
    Api::<MonoVertex>::namespaced(client.clone(), &ns)
        .patch_status(
            "mvr-1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Failed", "replicas": 1, "readyReplicas": 0}}),
            ),
        )
        .await
        .expect("child status");
    page.until("the trial's new phase on the page", |name, d| {
        name == "detail"
            && d["rollout"]["children"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["name"] == "mvr-1" && c["phase"] == "Failed")
            })
    })
    .await;

    // Actions are the plugin's commands: pause, then pause again is refused by the command.
    let pause = format!("/api/rollouts/pipelinerollout/{ns}/p/actions/pause");
    let (code, answer) = admin.act(&pause).await;
    assert_eq!(code, 200, "{answer}");
    let pr: PipelineRollout = Api::namespaced(client.clone(), &ns)
        .get("p")
        .await
        .expect("p");
    assert_eq!(
        serde_json::to_value(&pr.spec).expect("spec")["pipeline"]["spec"]["lifecycle"]["desiredPhase"],
        "Paused"
    );
    let (code, answer) = admin.act(&pause).await;
    assert_eq!(code, 409, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("already paused")),
        "{answer}"
    );
    let (code, answer) = admin
        .act(&format!(
            "/api/rollouts/monovertexrollout/{ns}/mvr/actions/allow-data-loss"
        ))
        .await;
    assert_eq!(code, 400, "{answer}");
    let (code, _) = admin
        .act(&format!(
            "/api/rollouts/pipelinerollout/{ns}/nope/actions/pause"
        ))
        .await;
    assert_eq!(code, 409, "a missing rollout is the command's refusal");

    // Other sites cannot act through it, even with the token: no header, a foreign origin, a
    // foreign host name (the guard's own test covers each refusal).
    let (code, body) = admin.request("POST", &pause, &[]).await;
    assert_eq!(code, 403, "{body}");
    let (code, _) = admin
        .request(
            "POST",
            &pause,
            &[
                ("X-Numaplane-Dashboard", "1"),
                ("Origin", "http://evil.example"),
            ],
        )
        .await;
    assert_eq!(code, 403);
    let (code, _) = admin
        .send(
            "GET",
            "/api/rollouts",
            "evil.example",
            &[("Authorization", &admin.bearer())],
        )
        .await;
    assert_eq!(code, 403);

    // A user who may only read: the table narrows to their namespace and says why, and an
    // action shows the API server's 403.
    env.grant_read_only(&ns, "dash-viewer")
        .await
        .expect("read-only role");
    let viewer_config = env
        .kubeconfig_as("dash-viewer", &ns)
        .expect("viewer kubeconfig");
    let viewer = Dashboard::start(&viewer_config, &[]).await;
    let info = viewer.json("/api/info").await;
    assert_eq!(info["scope"], format!("namespace {ns}"), "{info}");
    assert!(
        info["notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("cannot be listed in all namespaces")),
        "{info}"
    );
    let mut viewer_table = viewer.events("/api/rollouts/stream").await;
    let mut seen = 0;
    viewer_table
        .until("the namespace's rollouts for the viewer", |name, d| {
            match name {
                "rows" => seen = rows_in(d, &ns).len(),
                "upsert" => seen += 1,
                _ => {}
            }
            seen >= 2
        })
        .await;
    let resume = format!("/api/rollouts/pipelinerollout/{ns}/p/actions/resume");
    let (code, answer) = viewer.act(&resume).await;
    assert_eq!(code, 403, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the API server refused it (403 Forbidden)")
            && message.contains("dash-viewer"),
        "{answer}"
    );
    let pr: PipelineRollout = Api::namespaced(client.clone(), &ns)
        .get("p")
        .await
        .expect("p");
    assert_eq!(
        serde_json::to_value(&pr.spec).expect("spec")["pipeline"]["spec"]["lifecycle"]["desiredPhase"],
        "Paused",
        "the refused resume changed nothing"
    );

    // A user who may list namespaces and read rollouts in two of them: both, and only them.
    let ns2 = env.create_namespace("dash-two").await;
    create::<PipelineRollout>(
        &client,
        &ns2,
        pipeline_rollout("q"),
        Some(deployed_status(1)),
    )
    .await;
    for n in [&ns, &ns2] {
        env.grant_read_only(n, "dash-reader")
            .await
            .expect("read-only role");
    }
    let list_namespaces: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "dash-list-namespaces"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]
    }))
    .expect("cluster role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "dash-list-namespaces"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "dash-list-namespaces"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dash-reader"}]
    }))
    .expect("binding");
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &list_namespaces)
        .await
        .expect("cluster role");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("cluster role binding");
    let reader = Dashboard::start(
        &env.kubeconfig_as("dash-reader", &ns)
            .expect("reader kubeconfig"),
        &[],
    )
    .await;
    let mut both = [ns.clone(), ns2.clone()];
    both.sort();
    let info = reader.json("/api/info").await;
    assert_eq!(
        info["scope"],
        format!("namespaces {}", both.join(", ")),
        "{info}"
    );
    let mut reader_table = reader.events("/api/rollouts/stream").await;
    let mut keys = std::collections::BTreeSet::new();
    reader_table
        .until("the rollouts of both namespaces", |name, d| {
            match name {
                "rows" => keys.extend(
                    d["rows"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| r["key"].to_string()),
                ),
                "upsert" => {
                    keys.insert(d["key"].to_string());
                }
                _ => {}
            }
            keys.len() >= 3
        })
        .await;
    let mut want: Vec<String> = vec![
        format!("\"{ns}/MonoVertexRollout/mvr\""),
        format!("\"{ns}/PipelineRollout/p\""),
        format!("\"{ns2}/PipelineRollout/q\""),
    ];
    want.sort();
    assert_eq!(keys.into_iter().collect::<Vec<_>>(), want);

    // Ctrl-C stops it at once, even with a browser's event streams open.
    let _open = (table, page);
    assert_eq!(admin.interrupt().await, 0);
}

/// Every API call needs this run's token (header, or query on reads), requests must name the
/// dashboard's own address, and a browser's Origin must be the dashboard's own page: never
/// compared with the Host the request itself brings. The page needs no token and holds no data.
#[tokio::test]
async fn the_api_needs_this_runs_token_its_address_and_its_own_origin() {
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("dash-guard").await;
    create::<PipelineRollout>(
        &client,
        &ns,
        pipeline_rollout("p"),
        Some(deployed_status(1)),
    )
    .await;
    let d = Dashboard::start(&env.kubeconfig_path(), &["-n", &ns]).await;
    let host = format!("127.0.0.1:{}", d.port);
    let bearer = d.bearer();
    let wrong = format!("Bearer {}", "0".repeat(64));

    // The page and its assets: no token needed, and nothing of the cluster in them.
    for path in ["/", "/app.js", "/style.css"] {
        let (code, body) = d.send("GET", path, &host, &[]).await;
        assert_eq!(code, 200, "{path}: {body}");
        assert!(
            !body.contains(&ns),
            "{path} shows cluster data without a token"
        );
    }

    // Reads: no token, a wrong one, in the header or the query, are refused; the right one in
    // either place is served.
    for path in [
        "/api/info",
        "/api/rollouts",
        &format!("/api/rollouts/pr/{ns}/p"),
    ] {
        let (code, body) = d.send("GET", path, &host, &[]).await;
        assert_eq!(code, 401, "GET {path} without a token: {body}");
        assert!(
            !body.contains("\"rows\"") && !body.contains(&format!("{ns}/")),
            "{body}"
        );
        let (code, _) = d
            .send("GET", path, &host, &[("Authorization", &wrong)])
            .await;
        assert_eq!(code, 401, "GET {path} with a wrong token");
        let (code, _) = d
            .send("GET", path, &host, &[("Authorization", &bearer)])
            .await;
        assert_eq!(code, 200, "GET {path} with the token");
    }
    let (code, _) = d.send("GET", "/api/rollouts?token=nope", &host, &[]).await;
    assert_eq!(code, 401);
    let (code, body) = d
        .send(
            "GET",
            &format!("/api/rollouts?token={}", d.token),
            &host,
            &[],
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&format!("{ns}/PipelineRollout/p")), "{body}");
    let (code, _) = d
        .send(
            "GET",
            "/api/rollouts/stream",
            &host,
            &[("Accept", "text/event-stream")],
        )
        .await;
    assert_eq!(code, 401, "an event stream without the token");

    // Another run's token does not open this one.
    let other = Dashboard::start(&env.kubeconfig_path(), &["-n", &ns]).await;
    assert_ne!(other.token, d.token, "a new token every run");
    let (code, _) = d
        .send(
            "GET",
            "/api/info",
            &host,
            &[("Authorization", &other.bearer())],
        )
        .await;
    assert_eq!(code, 401);

    // Writes: the token in the header (not the query), the action header, and the page's own
    // Origin; the right ones reach the command (which refuses a rollout that is not there).
    let act = format!("/api/rollouts/pr/{ns}/nope/actions/pause");
    let origin = d.origin();
    let page = [("X-Numaplane-Dashboard", "1"), ("Origin", origin.as_str())];
    let (code, body) = d.send("POST", &act, &host, &page).await;
    assert_eq!(code, 401, "a write without the token: {body}");
    let (code, _) = d
        .send(
            "POST",
            &act,
            &host,
            &[page[0], page[1], ("Authorization", &wrong)],
        )
        .await;
    assert_eq!(code, 401, "a write with a wrong token");
    let (code, _) = d
        .send("POST", &format!("{act}?token={}", d.token), &host, &page)
        .await;
    assert_eq!(code, 401, "a write's token in the query");
    let (code, body) = d
        .send(
            "POST",
            &act,
            &host,
            &[page[0], page[1], ("Authorization", &bearer)],
        )
        .await;
    assert_eq!(code, 409, "the page's write reaches the command: {body}");

    // Origin is one of the addresses listened on, whatever Host says; on reads too.
    for (method, path) in [("POST", act.as_str()), ("GET", "/api/info")] {
        for foreign in ["http://evil.example", "null", "http://127.0.0.1:1"] {
            let (code, body) = d
                .send(
                    method,
                    path,
                    &host,
                    &[
                        ("X-Numaplane-Dashboard", "1"),
                        ("Authorization", &bearer),
                        ("Origin", foreign),
                    ],
                )
                .await;
            assert_eq!(code, 403, "{method} {path} from {foreign}: {body}");
        }
    }
    // DNS rebinding: a foreign name resolving to 127.0.0.1, Host and Origin agreeing with each
    // other, with the token (which a rebinding page would not have anyway).
    let rebound = format!("evil.example:{}", d.port);
    let rebound_origin = format!("http://{rebound}");
    for (method, path) in [("GET", "/"), ("GET", "/api/info"), ("POST", act.as_str())] {
        let (code, body) = d
            .send(
                method,
                path,
                &rebound,
                &[
                    ("Authorization", &bearer),
                    ("X-Numaplane-Dashboard", "1"),
                    ("Origin", &rebound_origin),
                ],
            )
            .await;
        assert_eq!(code, 403, "{method} {path} for host {rebound}: {body}");
    }
    // localhost is the same loopback server.
    let (code, _) = d
        .send(
            "GET",
            "/api/info",
            &format!("localhost:{}", d.port),
            &[("Authorization", &bearer)],
        )
        .await;
    assert_eq!(code, 200);
}

/// A kubeconfig for an API server that is not there: the address is checked before any call.
fn nowhere_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u, namespace: default}}\ncurrent-context: x\n"
        ),
    )
    .expect("kubeconfig");
    path
}

/// Listening where others could reach it needs --allow-remote, and every interface (0.0.0.0,
/// ::) is refused even then: requests must name the address, so it must be one. Nothing is
/// served in either case.
#[tokio::test]
async fn a_non_loopback_address_needs_allow_remote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = nowhere_kubeconfig(dir.path());
    let help = std::process::Command::new(BIN)
        .args(["dashboard", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--allow-remote"), "{help}");
    // 192.0.2.10 is a documentation address (RFC 5737): never this machine's, never contacted.
    for (args, why) in [
        (&["--address", "192.0.2.10"][..], "--allow-remote"),
        (&["--address", "0.0.0.0"][..], "every interface"),
        (
            &["--address", "0.0.0.0", "--allow-remote"][..],
            "every interface",
        ),
        (
            &["--address", "::", "--allow-remote"][..],
            "every interface",
        ),
    ] {
        let run = tokio::process::Command::new(BIN)
            .arg("dashboard")
            .args(["--port", "0", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .unwrap_or_else(|_| panic!("dashboard {args:?} was not refused: it kept running"))
            .expect("run the dashboard");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains(why) && stderr.contains("--address"),
            "{args:?} names the flag and why: {stderr}"
        );
        assert!(
            !stdout.contains("Numaplane dashboard:"),
            "{args:?} served: {stdout}"
        );
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// The memory figure of docs/plugin.md ("The dashboard"): the dashboard's resident memory once
/// it holds 1,000 rollouts (each with a status of the size a progressive upgrade leaves) and a
/// browser follows the table. Bounded: rows, not objects, are kept.
#[tokio::test]
async fn memory_with_a_thousand_rollouts() {
    const N: usize = 1000;
    let env = TestEnv::shared().await;
    let client = env.client();
    let ns = env.create_namespace("dash-mem").await;
    let started = Instant::now();
    stream::iter(0..N)
        .map(|i| {
            let client = client.clone();
            let ns = ns.clone();
            async move {
                let mut status = deployed_status(1);
                status["upgradeHistory"] = json!((0..10).map(|j| json!({
                    "child": format!("p{i}-{j}"), "previousChild": format!("p{i}-{}", j.max(1) - 1),
                    "strategy": "Progressive", "generation": j + 1,
                    "startTime": "2026-12-01T00:00:00Z", "endTime": "2026-12-01T00:05:00Z",
                    "outcome": "Promoted", "reasons": [],
                    "changedFields": ["spec.pipeline.spec.vertices.1.udf.container.image"]
                })).collect::<Vec<_>>());
                create::<PipelineRollout>(
                    &client,
                    &ns,
                    pipeline_rollout(&format!("p{i}")),
                    Some(status),
                )
                .await;
                Ok::<_, ()>(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("created");
    eprintln!(
        "created {N} rollouts in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let dashboard = Dashboard::start(&env.kubeconfig_path(), &[]).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let info = dashboard.json("/api/info").await;
        if info["synced"] == true && info["rollouts"].as_u64().unwrap_or_default() >= N as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the table never held {N} rollouts: {info}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A browser following the table receives all of it.
    let mut table = dashboard.events("/api/rollouts/stream").await;
    let first = table
        .until("the whole table", |name, d| {
            name == "rows" && rows_in(d, &ns).len() == N
        })
        .await;
    assert_eq!(rows_in(&first, &ns).len(), N);
    let rss = rss_kib(dashboard.pid());
    eprintln!(
        "dashboard resident memory with {N} rollouts and one browser: {:.1} MiB",
        rss as f64 / 1024.0
    );
    assert!(
        rss < 96 * 1024,
        "the dashboard holds rows, not objects: {rss} KiB with {N} rollouts"
    );
}
