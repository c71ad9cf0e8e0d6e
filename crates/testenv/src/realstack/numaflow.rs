//! Runs the real Numaflow controller for every Numaflow controller Deployment in the cluster, as
//! a kubelet would run its container: the binary of the Deployment's image version, its
//! container's arguments and environment (values, `configMapKeyRef`s and the namespace
//! `fieldRef` resolved), its ConfigMap volumes bind-mounted at their mount paths, the token of
//! its ServiceAccount (so the rendered RBAC is what it is allowed to do), in a network namespace
//! of its own ([`crate::netns`]) where the API server and the daemon stand-in are forwarded and
//! daemon service names resolve to them.
//!
//! The Deployment's pods themselves are KWOK's; this is what their container would have done.
//! When the Deployment's pod template changes (a version upgrade: a new pod), the old process is
//! killed and the new one started, reading its environment's ConfigMaps then; a mounted
//! ConfigMap that changes is rewritten in place, as a kubelet syncs it; a Deployment scaled to
//! zero or deleted stops it; one that exits is started again, as a kubelet restarts a
//! container. A version whose binary cannot be built here (the Go module proxy serves
//! only 1.7.5 and 1.8.1) runs the nearest built one, and the log says so.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use crate::binaries::RealStackBinaries;
use crate::netns::{Forward, Pod, PodSpec};

/// The pod labels of a Numaflow controller Deployment, as every definition sets them (the
/// Deployment itself carries only the instance label).
const CONTROLLER_POD_LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/name", "controller-manager"),
    ("app.kubernetes.io/part-of", "numaflow"),
];

fn is_numaflow_controller(d: &Deployment) -> bool {
    let labels = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    labels.is_some_and(|l| {
        CONTROLLER_POD_LABELS
            .iter()
            .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
    })
}

/// A Numaflow controller process the runner has started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub namespace: String,
    pub deployment: String,
    /// The version the Deployment asks for.
    pub version: String,
    /// The version of the binary running it (differs when that version cannot be built here).
    pub binary_version: String,
    pub pid: u32,
}

/// Every controller process started so far, in start order (a restart appends).
pub type StartLog = std::sync::Arc<std::sync::Mutex<Vec<Started>>>;

/// What the runner needs from the environment.
#[derive(Clone)]
pub struct RunnerConfig {
    pub bins: RealStackBinaries,
    /// State: one directory per controller (kubeconfig, mounted ConfigMaps, log).
    pub dir: PathBuf,
    /// The watchdog's pid file.
    pub pids: PathBuf,
    pub apiserver_port: u16,
    pub ca_pem: String,
    pub daemon: std::net::SocketAddr,
    pub started: StartLog,
}

/// One controller the cluster asks for.
#[derive(Debug, Clone, PartialEq)]
struct Desired {
    /// The pod template: a kubelet starts a new container only when it changes (a new pod);
    /// environment from ConfigMaps is read at that start, mounted ConfigMaps follow in place.
    template: String,
    version: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    service_account: String,
    /// `(mount path, files)`.
    mounts: Vec<(String, BTreeMap<String, String>)>,
}

struct Running {
    desired: Desired,
    pod: Pod,
}

/// Watches controller Deployments and daemon Services until the runtime stops.
pub async fn run(client: Client, cfg: RunnerConfig) {
    let (deployments, dep_writer) = reflector::store::<Deployment>();
    let (services, svc_writer) = reflector::store::<Service>();
    let (configmaps, cm_writer) = reflector::store::<ConfigMap>();
    let dep_events = reflector::reflector(
        dep_writer,
        watcher(
            Api::<Deployment>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects()
    .map(|_| ());
    let svc_events = reflector::reflector(
        svc_writer,
        watcher(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects()
    .map(|_| ());
    let cm_events = reflector::reflector(
        cm_writer,
        watcher(
            Api::<ConfigMap>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .touched_objects()
    .map(|_| ());
    // A start that failed (its ServiceAccount not there yet) is retried on the next tick.
    let ticks = futures::stream::unfold((), |()| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Some(((), ()))
    });
    let mut triggers = std::pin::pin!(futures::stream::select(
        futures::stream::select(futures::stream::select(dep_events, svc_events), cm_events),
        ticks
    ));
    let mut running: HashMap<(String, String), Running> = HashMap::new();
    while triggers.next().await.is_some() {
        // Coalesce a burst of events into one pass.
        while let Ok(Some(())) =
            tokio::time::timeout(Duration::from_millis(50), triggers.next()).await
        {}
        let stores = Stores {
            deployments: &deployments,
            services: &services,
            configmaps: &configmaps,
        };
        sync(&client, &cfg, &stores, &mut running).await;
    }
}

/// What the runner watches.
struct Stores<'a> {
    deployments: &'a Store<Deployment>,
    services: &'a Store<Service>,
    configmaps: &'a Store<ConfigMap>,
}

async fn sync(
    client: &Client,
    cfg: &RunnerConfig,
    stores: &Stores<'_>,
    running: &mut HashMap<(String, String), Running>,
) {
    let mut wanted: HashMap<(String, String), Desired> = HashMap::new();
    for d in stores
        .deployments
        .state()
        .into_iter()
        .filter(|d| is_numaflow_controller(d))
    {
        let key = (d.namespace().unwrap_or_default(), d.name_any());
        match desired(stores.configmaps, &d) {
            Ok(Some(want)) => {
                wanted.insert(key, want);
            }
            Ok(None) => {}
            Err(e) => {
                warn!(namespace = %key.0, deployment = %key.1, "numaflow controller not started: {e:#}")
            }
        }
    }
    running.retain(|key, r| {
        // A container that exits is started again, as a kubelet does (restartPolicy Always):
        // the Numaflow controller exits on errors an API server or etcd restart causes, and a
        // controller left stopped creates nothing more in its namespace.
        if !r.pod.is_running() {
            warn!(namespace = %key.0, deployment = %key.1, log = %r.pod.log.display(),
                "numaflow controller exited; starting it again");
            return false;
        }
        let Some(want) = wanted.get(key).filter(|w| w.template == r.desired.template) else {
            info!(namespace = %key.0, deployment = %key.1, version = %r.desired.version, "stopping numaflow controller");
            return false;
        };
        // Same pod: mounted ConfigMaps follow their objects in place, as a kubelet syncs them.
        if want.mounts != r.desired.mounts {
            for (i, (_, files)) in want.mounts.iter().enumerate() {
                if let Err(e) = write_mount(&mount_dir(cfg, key, i), files) {
                    warn!("refreshing a mounted ConfigMap: {e:#}");
                }
            }
            r.desired.mounts = want.mounts.clone();
        }
        true
    });
    for (key, want) in wanted {
        if running.contains_key(&key) {
            continue;
        }
        match start(client, cfg, &key, &want).await {
            Ok(pod) => {
                if let Ok(mut log) = cfg.started.lock() {
                    log.push(Started {
                        namespace: key.0.clone(),
                        deployment: key.1.clone(),
                        version: want.version.clone(),
                        binary_version: cfg.bins.numaflow_for(&want.version).0.to_string(),
                        pid: pod.pid(),
                    });
                }
                running.insert(key, Running { desired: want, pod });
            }
            Err(e) => {
                warn!(namespace = %key.0, deployment = %key.1, "starting numaflow controller: {e:#}")
            }
        }
    }
    for ((ns, _), r) in running.iter_mut() {
        let hosts = daemon_hosts(stores.services, ns);
        if let Err(e) = r.pod.set_hosts(&hosts) {
            warn!("updating hosts: {e:#}");
        }
    }
}

/// Daemon service names of `ns`, in every form the controller may dial.
fn daemon_hosts(services: &Store<Service>, ns: &str) -> Vec<String> {
    let mut hosts: Vec<String> = services
        .state()
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(ns) && s.name_any().ends_with("-daemon-svc"))
        .flat_map(|s| {
            let n = s.name_any();
            [
                format!("{n}.{ns}.svc"),
                format!("{n}.{ns}.svc.cluster.local"),
            ]
        })
        .collect();
    hosts.sort();
    hosts
}

/// What the Deployment's container would run, or `None` while it runs no pod.
fn desired(configmaps: &Store<ConfigMap>, d: &Deployment) -> Result<Option<Desired>> {
    let ns = d.namespace().unwrap_or_default();
    let Some(spec) = d.spec.as_ref() else {
        return Ok(None);
    };
    if d.metadata.deletion_timestamp.is_some() || spec.replicas == Some(0) {
        return Ok(None);
    }
    let pod = spec
        .template
        .spec
        .as_ref()
        .context("no pod template spec")?;
    let container = pod
        .containers
        .iter()
        .find(|c| {
            c.args
                .as_ref()
                .is_some_and(|a| a.first().map(String::as_str) == Some("controller"))
        })
        .or_else(|| pod.containers.first())
        .context("no container")?;
    let version = image_version(container.image.as_deref().unwrap_or_default())
        .context("the container image has no version tag")?;
    let data_of = |name: &str| {
        configmaps
            .get(&ObjectRef::new(name).within(&ns))
            .and_then(|cm| cm.data.clone())
    };
    let mut env = Vec::new();
    for e in container.env.iter().flatten() {
        if let Some(v) = &e.value {
            env.push((e.name.clone(), v.clone()));
            continue;
        }
        let Some(from) = &e.value_from else {
            env.push((e.name.clone(), String::new()));
            continue;
        };
        if let Some(f) = &from.field_ref {
            match f.field_path.as_str() {
                "metadata.namespace" => env.push((e.name.clone(), ns.clone())),
                "metadata.name" => env.push((e.name.clone(), format!("{}-0", d.name_any()))),
                _ => {}
            }
        } else if let Some(r) = &from.config_map_key_ref {
            let value = data_of(&r.name).and_then(|mut data| data.remove(&r.key));
            match value {
                Some(v) => env.push((e.name.clone(), v)),
                None if r.optional == Some(true) => {}
                None => anyhow::bail!("env {}: ConfigMap {} has no key {}", e.name, r.name, r.key),
            }
        }
    }
    // One controller per Deployment: no leader election between an old and a new process.
    env.retain(|(k, _)| k != "NUMAFLOW_LEADER_ELECTION_DISABLED");
    env.push(("NUMAFLOW_LEADER_ELECTION_DISABLED".into(), "true".into()));
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let Some(cm_name) = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .and_then(|v| v.config_map.as_ref())
            .map(|c| c.name.clone())
        else {
            continue;
        };
        let data = data_of(&cm_name)
            .with_context(|| format!("volume {}: ConfigMap {cm_name} not found", m.name))?;
        mounts.push((m.mount_path.clone(), data));
    }
    Ok(Some(Desired {
        template: serde_json::to_string(&spec.template).unwrap_or_default(),
        version,
        args: container.args.clone().unwrap_or_default(),
        env,
        service_account: pod
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into()),
        mounts,
    }))
}

/// `quay.io/numaproj/numaflow:v1.8.1` → `1.8.1`.
fn image_version(image: &str) -> Option<String> {
    let tag = image.rsplit_once(':')?.1;
    let v = tag.trim_start_matches('v');
    (!v.is_empty() && !v.contains('/') && v.chars().next()?.is_ascii_digit()).then(|| v.to_string())
}

async fn start(
    client: &Client,
    cfg: &RunnerConfig,
    (ns, name): &(String, String),
    want: &Desired,
) -> Result<Pod> {
    let (built, program, exact) = cfg.bins.numaflow_for(&want.version);
    if exact {
        info!(namespace = %ns, deployment = %name, version = %built, "starting numaflow controller");
    } else {
        warn!(namespace = %ns, deployment = %name, wanted = %want.version, running = %built,
            "no numaflow controller binary of this version can be built here; running the nearest one");
    }
    let dir = cfg.dir.join(format!("{ns}.{name}"));
    std::fs::create_dir_all(&dir)?;
    let token = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(
            &want.service_account,
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    audiences: Vec::new(),
                    expiration_seconds: Some(24 * 3600),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("token of ServiceAccount {}", want.service_account))?
        .status
        .map(|s| s.token)
        .context("TokenRequest without a token")?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        crate::controlplane::kubeconfig(
            &format!("https://127.0.0.1:{}", cfg.apiserver_port),
            &base64_encode(&cfg.ca_pem),
            &want.service_account,
            &token,
        ),
    )?;
    let mut mounts = Vec::new();
    for (i, (path, files)) in want.mounts.iter().enumerate() {
        let m = mount_dir(cfg, &(ns.clone(), name.clone()), i);
        let _ = std::fs::remove_dir_all(&m);
        write_mount(&m, files)?;
        mounts.push((m, path.clone()));
    }
    let mut env = want.env.clone();
    env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let spec = PodSpec {
        program: program.to_path_buf(),
        args: want.args.clone(),
        env,
        mounts,
        hosts: Vec::new(),
        forwards: vec![
            Forward::local(cfg.apiserver_port, ([127, 0, 0, 1], cfg.apiserver_port)),
            Forward::local(super::daemon::DAEMON_PORT, cfg.daemon),
        ],
    };
    let dir2 = dir.clone();
    let pids = cfg.pids.clone();
    tokio::task::spawn_blocking(move || Pod::start(&dir2, &pids, "numaflow-controller", &spec))
        .await
        .context("starting the pod thread")?
}

/// Host directory of a controller's `i`-th ConfigMap mount.
fn mount_dir(cfg: &RunnerConfig, (ns, name): &(String, String), i: usize) -> PathBuf {
    cfg.dir
        .join(format!("{ns}.{name}"))
        .join(format!("mount-{i}"))
}

/// Writes a ConfigMap's files into `dir` (in place, so a bind mount of `dir` sees them).
fn write_mount(dir: &std::path::Path, files: &BTreeMap<String, String>) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for (file, text) in files {
        std::fs::write(dir.join(file), text)?;
    }
    Ok(())
}

fn base64_encode(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_versions() {
        assert_eq!(
            image_version("quay.io/numaproj/numaflow:v1.8.1").as_deref(),
            Some("1.8.1")
        );
        assert_eq!(image_version("numaflow:1.7.5").as_deref(), Some("1.7.5"));
        assert_eq!(image_version("localhost:5000/numaflow"), None);
        assert_eq!(image_version("numaflow:latest"), None);
        assert_eq!(image_version("numaflow"), None);
    }
}
