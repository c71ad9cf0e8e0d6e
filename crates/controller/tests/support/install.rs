//! Installing the operator as users do, on the test stack's real node: kubectl as the
//! administrator, the image built from this build's binary, the operator's pods and the
//! reference samples converging, and the documentation's commands run as written
//! (`install_real_node.rs`, `helm_chart.rs`, `migration.rs`).

use super::{eventually, repo};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use numaplane_api::common::{Phase, Status};
use numaplane_api::{ISBServiceRollout, PipelineRollout};
use numaplane_testenv::TestEnv;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const NS: &str = "numaplane-system";
pub const SAMPLES: &str = "example-namespace";
const BIN: &str = env!("CARGO_BIN_EXE_numaplane");

/// The commands of the `block`-th `sh` block under the heading `## {section}` of the Markdown
/// file `file`, comments and empty lines left out.
pub fn doc_commands(file: &str, section: &str, block: usize) -> Vec<String> {
    let text = std::fs::read_to_string(repo(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let body = text
        .split(&format!("\n## {section}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("{file} has a `## {section}` section"));
    let body = body.split("\n## ").next().unwrap_or_default();
    // Blocks may be indented (inside a list); each ends at its closing fence.
    let code = body
        .split("```sh\n")
        .nth(block + 1)
        .unwrap_or_else(|| panic!("{file} `## {section}` has sh block {block}"));
    let commands: Vec<String> = code
        .lines()
        .take_while(|l| l.trim() != "```")
        .map(|l| l.split(" # ").next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    assert!(
        !commands.is_empty(),
        "{file} `## {section}` block {block} is empty"
    );
    commands
}

/// Runs one command of the documentation as a user's shell would, in the repository, against
/// `env`, with kubectl and this build's `kubectl-numaplane` on the PATH. `cargo install` of the
/// plugin is this build's (it must be there); a watch (`-w`) runs until its output names
/// `watched`, then stops.
pub fn run_doc_command(env: &TestEnv, command: &str, watched: &str) {
    run_doc_command_in(env, command, watched, &repo(""));
}

/// [`run_doc_command`] in the directory `cwd`.
pub fn run_doc_command_in(env: &TestEnv, command: &str, watched: &str, cwd: &Path) {
    let kubectl_dir = numaplane_testenv::binaries::kubectl()
        .expect("kubectl")
        .parent()
        .expect("kubectl's directory")
        .to_path_buf();
    let plugin_dir = Path::new(BIN).parent().expect("the build's directory");
    if command.starts_with("cargo install --path crates/cli") {
        assert!(
            plugin_dir.join("kubectl-numaplane").is_file(),
            "this build's kubectl-numaplane (cargo build -p kubectl-numaplane) stands in for `{command}`"
        );
        return;
    }
    let path = format!(
        "{}:{}:{}",
        kubectl_dir.display(),
        plugin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", command])
        .current_dir(cwd)
        .env("PATH", &path)
        .env("KUBECONFIG", env.kubeconfig_path());
    if command.split_whitespace().any(|w| w == "-w") {
        let out = watch_until(cmd, watched, std::time::Duration::from_secs(120));
        assert!(
            out.contains(watched),
            "`{command}` showed {watched}:\n{out}"
        );
        return;
    }
    succeeded(
        &format!("`{command}`"),
        cmd.output().expect("run a documented command"),
    );
}

/// Runs a command that does not end by itself until its output contains `needle` or `limit`
/// passes; returns what it printed.
fn watch_until(mut cmd: Command, needle: &str, limit: std::time::Duration) -> String {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("start a watch");
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + limit;
    let mut seen = Vec::new();
    while std::time::Instant::now() < deadline {
        if let Ok(chunk) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            seen.extend(chunk);
        }
        if String::from_utf8_lossy(&seen).contains(needle) {
            break;
        }
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    String::from_utf8_lossy(&seen).into_owned()
}

/// The test stack with a real node, this build's image imported under the workspace version's
/// tag (the one the install and the chart name), and the operator's namespace created and sent
/// to the real node. `dir` holds the image while the test runs.
pub async fn real_node_with_operator_image(dir: &Path) -> TestEnv {
    let env = TestEnv::start_with(numaplane_testenv::TestEnvOptions {
        real_stack: true,
        real_node: true,
        ..Default::default()
    })
    .await
    .expect("start the test stack with a real node");
    let tag = format!("v{}", env!("CARGO_PKG_VERSION"));
    env.import_image(&build_image(&dir.join("image"), &tag, "1700000000"))
        .expect("import the image into the real node");
    kubectl(&env, &["create", "namespace", NS]);
    send_to_real_node(&env, NS);
    env
}

/// The annotations that send a namespace's pods to the real node (docs/real-node.md), so the
/// install itself stays as users run it.
pub fn send_to_real_node(env: &TestEnv, ns: &str) {
    kubectl(
        env,
        &[
            "annotate",
            "namespace",
            ns,
            "scheduler.alpha.kubernetes.io/node-selector=type=real",
            r#"scheduler.alpha.kubernetes.io/defaultTolerations=[{"key":"numaplane.io/real-node","operator":"Exists","effect":"NoSchedule"}]"#,
        ],
    );
}

/// Runs kubectl against `env` as its administrator; panics with its output if it fails.
pub fn kubectl(env: &TestEnv, args: &[&str]) -> String {
    let bin = numaplane_testenv::binaries::kubectl().expect("kubectl");
    let out = Command::new(&bin)
        .current_dir(repo(""))
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(args)
        .output()
        .expect("run kubectl");
    succeeded(&format!("kubectl {args:?}"), out)
}

/// The standard output of a command that must have succeeded; `what` names it when it did not.
pub fn succeeded(what: &str, out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The objects of a multi-document YAML text (empty documents left out).
pub fn yaml_documents(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple::<serde_json::Value>(text)
        .expect("YAML documents")
        .into_iter()
        .filter(serde_json::Value::is_object)
        .collect()
}

/// Waits until `api` has no object `name` (deleted, not only terminating or not).
pub async fn until_gone<K>(api: &Api<K>, name: &str, what: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    eventually(what, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Builds the image from this build's operator binary with `tag`; `epoch` sets every time
/// stamp of the image, so another epoch gives another digest, as a new release would.
pub fn build_image(out: &Path, tag: &str, epoch: &str) -> PathBuf {
    let result = Command::new(repo("hack/image.sh"))
        .env("NUMAPLANE_IMAGE_BIN", BIN)
        .env("NUMAPLANE_IMAGE_OUT", out)
        .env("NUMAPLANE_IMAGE_TAG", tag)
        .env("SOURCE_DATE_EPOCH", epoch)
        .env_remove("NUMAPLANE_IMAGE_NAME")
        .output()
        .expect("run hack/image.sh");
    assert!(
        result.status.success(),
        "hack/image.sh failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let version = env!("CARGO_PKG_VERSION");
    out.join(format!("numaplane-{version}.oci.tar"))
}

/// The operator's pods, oldest first.
pub async fn operator_pods(pods: &Api<Pod>) -> Vec<Pod> {
    let lp = ListParams::default().labels("app.kubernetes.io/name=controller-manager");
    let mut list = pods.list(&lp).await.map(|l| l.items).unwrap_or_default();
    list.retain(|p| p.metadata.deletion_timestamp.is_none());
    list.sort_by_key(|p| p.metadata.creation_timestamp.clone());
    list
}

pub fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

pub fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}

pub fn image_id(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map(|c| c.image_id.clone())
        .unwrap_or_default()
}

/// `count` Ready pods of the operator, all on the real node, none restarted.
pub async fn wait_for_pods(pods: &Api<Pod>, count: usize, what: &str) -> Vec<Pod> {
    eventually(what, || async {
        let list = operator_pods(pods).await;
        (list.len() == count && list.iter().all(ready)).then_some(list)
    })
    .await
    .into_iter()
    .inspect(|p| {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        assert_eq!(
            node.as_deref(),
            Some(numaplane_testenv::realnode::NODE_NAME),
            "{} runs on the real node",
            name(p)
        );
        assert_eq!(restarts(p), 0, "{} never restarted (liveness)", name(p));
    })
    .collect()
}

/// A GET through the API server's proxy to a pod's port.
pub async fn pod_get(client: &kube::Client, pod: &str, port: u16, path: &str) -> Option<String> {
    let uri = format!("/api/v1/namespaces/{NS}/pods/{pod}:{port}/proxy{path}");
    let req = http::Request::get(uri).body(Vec::new()).ok()?;
    client.request_text(req).await.ok()
}

/// Every rollout of the samples' namespace Deployed for its current generation.
pub async fn samples_converged(client: &kube::Client, what: &str) {
    let prs: Api<PipelineRollout> = Api::namespaced(client.clone(), SAMPLES);
    let isbs: Api<ISBServiceRollout> = Api::namespaced(client.clone(), SAMPLES);
    eventually(what, || async {
        let pr = prs.get("my-pipeline").await.ok()?;
        let isb = isbs.get("my-isbsvc").await.ok()?;
        let done = |generation: Option<i64>, status: Option<&Status>| {
            status.is_some_and(|s| {
                s.phase == Phase::Deployed && Some(s.observed_generation) == generation
            })
        };
        let pr_done = done(
            pr.metadata.generation,
            pr.status.as_ref().map(|s| &s.status),
        );
        let isb_done = done(
            isb.metadata.generation,
            isb.status.as_ref().map(|s| &s.status),
        );
        (pr_done && isb_done).then_some(())
    })
    .await;
}
