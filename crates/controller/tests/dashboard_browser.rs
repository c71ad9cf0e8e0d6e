//! `kubectl numaplane dashboard` in a real browser (Debian's headless Chromium driven through
//! chromedriver) on the real stack with the operator running: the table lists the rollout and
//! follows it, a progressive upgrade's countdown moves, Promote and Abort work through the
//! confirmation dialog, and an action the user's RBAC forbids shows the API server's refusal.
//! Screenshots land in `target/tmp/dashboard-browser/`.

mod support;

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use numaplane_api::common::UpgradeOutcome;
use numaplane_api::numaflow::MonoVertex;
use numaplane_api::{MonoVertexRollout, PipelineRollout};
use numaplane_testenv::TestEnv;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::scenario::settled;
use support::{Harness, condition, free_port};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Progressive, with a MonoVertex assessment long enough to watch its countdown: healthy for 90 s
/// within 150 s.
const CONFIG: &str = r#"
defaultUpgradeStrategy: "progressive"
progressive:
  defaultAssessmentSchedule:
    - kind: Pipeline
      schedule: "0,30,3,1"
    - kind: MonoVertex
      schedule: "0,150,90,1"
    - kind: InterstepBufferService
      schedule: "0,0,0,1"
"#;

const GO: &str = "quay.io/numaio/numaflow-go/source-simple-source:stable";
const JAVA: &str = "quay.io/numaio/numaflow-java/source-simple-source:stable";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const UI_WAIT: Duration = Duration::from_secs(90);

fn mvr(image: &str) -> Value {
    support::scenario::mvr_scaled(image, 2, 2)
}

/// The plugin binary, built beside this test by `cargo test --workspace` (`make test`).
fn plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let path = dir.join("kubectl-numaplane");
    assert!(
        path.exists(),
        "{} not found: build it first (`cargo build -p kubectl-numaplane`; `make test` does)",
        path.display()
    );
    path
}

/// A process killed when dropped, with its first stdout line.
struct Running {
    _child: tokio::process::Child,
    first_line: String,
}

async fn spawn(mut cmd: tokio::process::Command, what: &str) -> Running {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first_line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{what} printed nothing within 30s"))
        .expect("stdout")
        .unwrap_or_else(|| panic!("{what} exited at once"));
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Running {
        _child: child,
        first_line,
    }
}

/// `kubectl-numaplane dashboard` with `kubeconfig`; returns it and the URL it printed (with its
/// token).
async fn dashboard(kubeconfig: &Path) -> (Running, String) {
    let mut cmd = tokio::process::Command::new(plugin());
    cmd.args(["dashboard", "--port", "0", "--kubeconfig"])
        .arg(kubeconfig)
        .env_remove("KUBECONFIG");
    let run = spawn(cmd, "kubectl-numaplane dashboard").await;
    let url = run
        .first_line
        .strip_prefix("Numaplane dashboard: ")
        .unwrap_or_else(|| panic!("unexpected first line {:?}", run.first_line))
        .to_string();
    (run, url)
}

/// Kills the Chromium of a profile when dropped: chromedriver quits it only when the session is
/// closed, which a failing test never reaches.
struct KillChromium(PathBuf);

impl Drop for KillChromium {
    fn drop(&mut self) {
        let _ = std::process::Command::new("pkill")
            .arg("-KILL")
            .arg("-f")
            // The pattern starts with dashes: without `--` pkill took it for an option.
            .arg("--")
            .arg(format!("--user-data-dir={}", self.0.display()))
            .status();
    }
}

/// chromedriver and a headless Chromium session with the flags this machine's closed network
/// needs (no background connections).
async fn browser(profile: &Path) -> (Running, Browser) {
    for bin in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(bin).exists(),
            "{bin} missing: run ./hack/browser.sh (make testenv-binaries does)"
        );
    }
    let port = free_port();
    let mut cmd = tokio::process::Command::new(CHROMEDRIVER);
    cmd.arg(format!("--port={port}"));
    let driver = spawn(cmd, "chromedriver").await;
    let caps = json!({
        "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--window-size=1500,1100",
                format!("--user-data-dir={}", profile.display()),
            ]
        }
    });
    let caps = caps.as_object().cloned().expect("capabilities");
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        match ClientBuilder::new(HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("chromedriver not ready yet: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("no Chromium session: {e}"),
        }
    };
    (driver, client)
}

fn shots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-browser");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

async fn shot(b: &Browser, name: &str) {
    let png = b.screenshot().await.expect("screenshot");
    let path = shots_dir().join(format!("{name}.png"));
    std::fs::write(&path, png).expect("write screenshot");
    eprintln!("screenshot: {}", path.display());
}

/// Evaluates `expr` in the page until it is truthy; returns its value. On timeout, saves a
/// screenshot and fails with the page's text.
async fn until(b: &Browser, what: &str, expr: &str) -> Value {
    let deadline = Instant::now() + UI_WAIT;
    let script = format!("try {{ return ({expr}); }} catch (e) {{ return null; }}");
    loop {
        let v = b.execute(&script, vec![]).await.unwrap_or(Value::Null);
        let truthy = match &v {
            Value::Null => false,
            Value::Bool(x) => *x,
            Value::String(s) => !s.is_empty(),
            Value::Number(n) => n.as_f64() != Some(0.0),
            _ => true,
        };
        if truthy {
            return v;
        }
        if Instant::now() > deadline {
            shot(b, &format!("timeout-{}", what.replace(' ', "-"))).await;
            let text = b
                .execute("return document.body.innerText", vec![])
                .await
                .unwrap_or_default();
            panic!("the page never showed {what} within {UI_WAIT:?}; it shows:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Clicks the element at `css` (the page redraws as events arrive, so a found element may be
/// replaced before the click lands: try again).
async fn click(b: &Browser, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = async { b.find(Locator::Css(css)).await?.click().await }.await;
        match r {
            Ok(()) => return,
            Err(e) if Instant::now() < deadline => {
                eprintln!("click {css}: {e}; again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot click {css}: {e}"),
        }
    }
}

/// Clicks an action button, confirms it in the dialog, and returns the answer shown.
async fn act(b: &Browser, action: &str) -> (String, String) {
    click(
        b,
        &format!("button.action[data-action='{action}']:not([disabled])"),
    )
    .await;
    until(
        b,
        "the confirmation dialog",
        "document.getElementById('confirm').open",
    )
    .await;
    click(b, "#confirm-yes").await;
    let shown = until(
        b,
        &format!("the answer to {action}"),
        &format!(
            "(() => {{ const r = document.getElementById('action-result'); \
              return r && r.dataset.status && r.textContent.startsWith('{action}:') \
                ? [r.dataset.status, r.textContent] : null; }})()"
        ),
    )
    .await;
    (
        shown[0].as_str().unwrap_or_default().to_string(),
        shown[1].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn the_dashboard_in_a_browser() {
    let h = Harness::start_real("dash-ui", CONFIG).await;
    h.apply::<MonoVertexRollout>(mvr(GO)).await;
    h.until::<MonoVertexRollout, _, _>("deployed", "mvr", settled)
        .await;

    let (_admin, url) = dashboard(&h.env.kubeconfig_path()).await;
    let profile = tempfile::tempdir().expect("profile");
    let _kill = KillChromium(profile.path().to_path_buf());
    let (_driver, b) = browser(profile.path()).await;
    let key = format!("{}/MonoVertexRollout/mvr", h.ns);
    let row = format!("document.querySelector('tr[data-key=\"{key}\"]')");

    // The table: every namespace's rollouts; filtered to this test's namespace.
    b.goto(&url).await.expect("open the dashboard");
    until(
        &b,
        "the live indicator",
        "document.getElementById('live').textContent === 'live'",
    )
    .await;
    until(&b, "the rollout's row", &row).await;
    b.find(Locator::Css("#filter"))
        .await
        .expect("filter")
        .send_keys(&h.ns)
        .await
        .expect("type the filter");
    until(
        &b,
        "only this namespace's rollouts",
        &format!(
            "[...document.querySelectorAll('#rollouts tbody tr')].every(tr => \
             tr.children[1].textContent === '{}') && {row}",
            h.ns
        ),
    )
    .await;
    let phase = until(
        &b,
        "the row's phase",
        &format!("{row}.children[3].textContent"),
    )
    .await;
    assert!(
        phase.as_str().is_some_and(|p| p.contains("Deployed")),
        "{phase}"
    );

    // A progressive upgrade shows up in the open table by itself, with its countdown.
    h.apply::<MonoVertexRollout>(mvr(JAVA)).await;
    until(
        &b,
        "the upgrade in the table",
        &format!(
            "{row}.children[4].textContent === 'Progressive' && {row}.querySelector('.countdown')"
        ),
    )
    .await;
    shot(&b, "table").await;

    // Its page: the trial beside the promoted child, and the countdown moves.
    click(&b, &format!("tr[data-key=\"{key}\"] a")).await;
    until(
        &b,
        "the trial mvr-1 and the promoted mvr-0",
        "document.querySelector('li.child[data-name=\"mvr-1\"][data-state=\"trial\"]') \
         && document.querySelector('li.child[data-name=\"mvr-0\"][data-state=\"promoted\"]')",
    )
    .await;
    let seconds = "Number(document.getElementById('countdown').dataset.seconds)";
    let first = until(
        &b,
        "the assessment countdown",
        &format!("{seconds} > 5 && {seconds}"),
    )
    .await
    .as_f64()
    .unwrap_or_default();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = until(&b, "the countdown still running", seconds)
        .await
        .as_f64()
        .unwrap_or_default();
    assert!(
        later < first && later > 0.0,
        "the countdown moves: {first} s, then {later} s"
    );
    shot(&b, "rollout-trial").await;

    // Promote: confirmed in the dialog, answered by the API server, carried out by Numaplane
    // long before the 90 s assessment could have passed.
    let asked = Instant::now();
    let (status, text) = act(&b, "promote").await;
    assert_eq!(status, "200", "{text}");
    assert!(
        text.contains("labelled numaplane.numaproj.io/force-promote"),
        "{text}"
    );
    h.until::<MonoVertexRollout, _, _>("promoted on mvr-1", "mvr", settled)
        .await;
    assert!(
        asked.elapsed() < Duration::from_secs(60),
        "promoted by the click, not the schedule"
    );
    let done: MonoVertexRollout = h.api().get("mvr").await.expect("mvr");
    let last = done
        .status
        .as_ref()
        .and_then(|s| s.status.upgrade_history.last().cloned())
        .expect("history");
    assert_eq!(
        (last.child.as_str(), last.outcome),
        ("mvr-1", Some(UpgradeOutcome::ForcePromoted))
    );
    until(
        &b,
        "mvr-1 promoted and ForcePromoted in the history",
        "document.querySelector('li.child[data-name=\"mvr-1\"][data-state=\"promoted\"]') \
         && document.querySelector('#history tr[data-outcome=\"ForcePromoted\"]')",
    )
    .await;

    // Abort: the next trial fails at once; the promoted child keeps running.
    h.apply::<MonoVertexRollout>(mvr(GO)).await;
    until(
        &b,
        "the trial mvr-2",
        "document.querySelector('li.child[data-name=\"mvr-2\"][data-state=\"trial\"]') \
         && document.getElementById('countdown')",
    )
    .await;
    // Escape and Cancel in the dialog send nothing, also after an earlier "yes".
    for dismiss in ["escape", "cancel"] {
        click(&b, "button.action[data-action='abort']:not([disabled])").await;
        until(
            &b,
            "the confirmation dialog",
            "document.getElementById('confirm').open",
        )
        .await;
        if dismiss == "escape" {
            b.find(Locator::Css("#confirm"))
                .await
                .expect("dialog")
                .send_keys("\u{e00c}")
                .await
                .expect("press Escape");
        } else {
            click(&b, "#confirm-cancel").await;
        }
        until(
            &b,
            "the dialog closed",
            "!document.getElementById('confirm').open",
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let trial: MonoVertex = h.api().get("mvr-2").await.expect("mvr-2");
    assert!(
        !trial
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("numaplane.numaproj.io/abort")),
        "a dismissed dialog aborted the trial"
    );
    let shown = until(
        &b,
        "the last answer",
        "document.getElementById('action-result').textContent",
    )
    .await;
    assert!(
        shown.as_str().is_some_and(|t| t.starts_with("promote:")),
        "{shown}"
    );
    let (status, text) = act(&b, "abort").await;
    assert_eq!(status, "200", "{text}");
    h.until::<MonoVertexRollout, _, _>("the trial failed by the abort", "mvr", |r| {
        let st = r?.status.as_ref()?;
        let (s, reason, _) = condition(&st.status.conditions, "ProgressiveUpgradeSucceeded")?;
        (s == "False" && reason == "Failed").then_some(())
    })
    .await;
    h.until::<MonoVertex, _, _>("the aborted trial at zero", "mvr-2", |m| {
        (m?.spec["scale"]["max"] == json!(0)).then_some(())
    })
    .await;
    until(
        &b,
        "the failed assessment on the page",
        "document.getElementById('assessment-result') \
         && document.getElementById('assessment-result').textContent === 'Failure'",
    )
    .await;
    shot(&b, "rollout-aborted").await;

    // A user who may only read: the same page, and Pause shows the API server's 403.
    let viewer = "dashboard-viewer";
    h.env
        .grant_read_only(&h.ns, viewer)
        .await
        .expect("read-only role");
    let viewer_config = h
        .env
        .kubeconfig_as(viewer, &h.ns)
        .expect("viewer kubeconfig");
    let (_viewer_dashboard, viewer_url) = dashboard(&viewer_config).await;
    b.goto(&format!(
        "{viewer_url}#/rollout/monovertexrollout/{}/mvr",
        h.ns
    ))
    .await
    .expect("open the viewer's dashboard");
    until(
        &b,
        "the rollout for the viewer",
        "document.querySelector('li.child[data-name=\"mvr-1\"]')",
    )
    .await;
    let (status, text) = act(&b, "pause").await;
    assert_eq!(status, "403", "{text}");
    assert!(
        text.contains("forbidden (403)") && text.contains(viewer),
        "the refusal names the user: {text}"
    );
    shot(&b, "forbidden").await;
    let r: MonoVertexRollout = h.api().get("mvr").await.expect("mvr");
    assert_ne!(
        serde_json::to_value(&r.spec).expect("spec")["monoVertex"]["spec"]["lifecycle"]["desiredPhase"],
        "Paused",
        "the refused pause changed nothing"
    );
    b.close().await.expect("close the browser");
    h.assert_invariants().await;
}

/// Markup an attacker could put wherever the cluster keeps free text: it closes an attribute, then
/// adds an image whose error handler marks the page.
const HOSTILE: &str = r#""><img src=x onerror="document.body.dataset.xss='ran'">"#;

/// Text from the cluster is shown as text: a rollout's status message (the table's "waiting for"
/// and the page's), a condition message and an Event note holding HTML appear literally, add no
/// element, and run nothing. The page's Content-Security-Policy would also block an injected
/// inline handler, so the test looks for the element itself and for any policy violation, not
/// only for the handler's mark. Opened without its token, the page says so and reads nothing.
#[tokio::test]
async fn cluster_text_is_shown_literally_and_never_runs() {
    let env = TestEnv::shared_real().await;
    let client = env.client();
    let ns = env.create_namespace("dash-xss").await;
    let rollouts: Api<PipelineRollout> = Api::namespaced(client.clone(), &ns);
    let rollout: PipelineRollout = serde_json::from_value(json!({
        "apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "PipelineRollout",
        "metadata": {"name": "p"},
        "spec": {"pipeline": {"spec": {
            "interStepBufferServiceName": "default",
            "vertices": [{"name": "in", "source": {"generator": {}}}, {"name": "out", "sink": {"log": {}}}],
            "edges": [{"from": "in", "to": "out"}]
        }}}
    }))
    .expect("rollout");
    rollouts
        .create(&PostParams::default(), &rollout)
        .await
        .expect("create the rollout");
    rollouts
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Pending", "observedGeneration": 1, "message": HOSTILE,
                "conditions": [{"type": "ChildResourcesHealthy", "status": "False",
                    "reason": "Hostile", "message": HOSTILE, "observedGeneration": 1,
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]
            }})),
        )
        .await
        .expect("status");
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "p.hostile"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "numaplane.numaproj.io/test",
        "reportingInstance": "test",
        "action": "Test", "reason": "Hostile", "type": "Warning", "note": HOSTILE,
        "regarding": {"apiVersion": "numaplane.numaproj.io/v1alpha1", "kind": "PipelineRollout",
                      "namespace": ns, "name": "p"}
    }))
    .expect("event");
    Api::<Event>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await
        .expect("create the Event");

    let (_dashboard, url) = dashboard(&env.kubeconfig_path()).await;
    let profile = tempfile::tempdir().expect("profile");
    let _kill = KillChromium(profile.path().to_path_buf());
    let (_driver, b) = browser(profile.path()).await;

    // Without its token the page reads nothing and says what to open.
    let bare = url
        .split_once('?')
        .map(|(u, _)| u)
        .expect("a token in the URL");
    b.goto(bare).await.expect("open without the token");
    let said = until(
        &b,
        "the missing token",
        "document.getElementById('no-token') && document.getElementById('no-token').textContent",
    )
    .await;
    assert!(
        said.as_str().is_some_and(|t| t.contains("?token=")),
        "{said}"
    );
    let api_calls = b
        .execute(
            "return performance.getEntriesByType('resource') \
               .filter((e) => e.name.includes('/api/')).length;",
            vec![],
        )
        .await
        .expect("the page's requests");
    assert_eq!(api_calls, json!(0), "no API call without the token");

    b.goto(&url).await.expect("open the dashboard");
    // Any blocked script or style from here on is recorded (the hash routes keep the document).
    b.execute(
        "document.addEventListener('securitypolicyviolation', \
           (e) => { document.body.dataset.csp = e.violatedDirective; });",
        vec![],
    )
    .await
    .expect("listen for policy violations");
    let key = format!("{ns}/PipelineRollout/p");
    let row = format!("document.querySelector('tr[data-key=\"{key}\"]')");
    let waiting = until(
        &b,
        "the rollout's row",
        &format!("{row} && {row}.querySelector('td.waiting').textContent"),
    )
    .await;
    assert_eq!(waiting, json!(HOSTILE), "the status message, as text");
    shot(&b, "hostile-table").await;
    let injected = format!(
        "[document.querySelectorAll('main img').length, document.body.dataset.xss || '', \
          document.body.dataset.csp || '', {row}.querySelectorAll('td.waiting *').length]"
    );
    assert_eq!(
        b.execute(&format!("return {injected};"), vec![])
            .await
            .expect("inspect the table"),
        json!([0, "", "", 0]),
        "[images, handler mark, policy violation, elements in the cell]"
    );

    b.goto(&format!("{url}#/rollout/pipelinerollout/{ns}/p"))
        .await
        .expect("open the rollout");
    let shown = until(
        &b,
        "the Event, the condition and what the rollout waits for",
        "(() => { const ev = document.querySelector('#events tbody'); \
           const w = document.getElementById('waiting'); \
           const c = [...document.querySelectorAll('section table.grid td')] \
             .filter((td) => td.previousElementSibling && td.previousElementSibling.textContent === 'Hostile'); \
           return ev && w && c.length ? [ev.rows[0].cells[4].textContent, w.textContent, \
             c.map((td) => td.textContent)] : null; })()",
    )
    .await;
    shot(&b, "hostile-rollout").await;
    assert_eq!(shown[0], json!(HOSTILE), "the Event's note, as text");
    assert_eq!(
        shown[1],
        json!(format!("Waiting for: {HOSTILE}")),
        "the status message, as text"
    );
    assert!(
        shown[2]
            .as_array()
            .is_some_and(|c| c.iter().any(|t| t == &json!(HOSTILE))),
        "the condition's message, as text: {shown}"
    );
    // A moment for a handler that would fire on the broken image.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        b.execute(
            "return [document.querySelectorAll('img').length, document.body.dataset.xss || '', \
               document.body.dataset.csp || ''];",
            vec![]
        )
        .await
        .expect("inspect the page"),
        json!([0, "", ""]),
        "[images, handler mark, policy violation]"
    );
    b.close().await.expect("close the browser");
}
