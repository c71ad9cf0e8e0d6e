//! A real node beside KWOK's fake one: kubelet and containerd (runc, CNI bridge) running real
//! containers from images imported from OCI archives, never pulled.
//!
//! Everything of the node lives in a network and mount namespace of its own ([`crate::netns`]):
//! kubelet, containerd, its shims, the CNI bridge and the pods' namespaces. The namespace is
//! joined to the host by a veth pair with private addresses (`10.250.<k>.1` on the host,
//! `10.250.<k>.2` the node's), so the API server (on the host) reaches kubelet for logs and exec,
//! and the host routes the pods' subnet through the node (the API server's proxy to a pod).
//! kubelet reaches the API server through a relay in the namespace, which pods reach too: the
//! `kubernetes` Service points at it. Nothing is masqueraded.
//!
//! Kubelet registers the node as [`NODE_NAME`] with label `type=real` and the taint
//! [`TAINT_KEY`]`=true:NoSchedule`: only pods that select and tolerate it land there (KWOK manages
//! nodes labelled `type=kwok` only).
//!
//! Clean-up: every process of the node joins cgroups of its own (kubelet nests the pods' cgroups
//! under them), so a script can kill them all, shims and containers included, even those that
//! left the namespace's process group. It runs on drop and from the control plane's watchdog
//! (`cleanup.d/`). The node's mounts (containerd's snapshots and sandboxes, kubelet's volumes)
//! were made in its private mount namespace: they go with its last process. A tmpfs on `/run`
//! inside keeps containerd's fixed paths (shim sockets, network namespaces) private too.

use std::fmt::Write as _;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use tracing::debug;

use crate::binaries::RealNodeBinaries;
use crate::netns::{Forward, Pod, PodSpec};

/// The node's name.
pub const NODE_NAME: &str = "real-node-0";
/// The node's label `type=real` (KWOK's node is `type=kwok`).
pub const NODE_LABEL: (&str, &str) = ("type", "real");
/// The key of the node's `NoSchedule` taint (value `true`).
pub const TAINT_KEY: &str = "numaplane.io/real-node";

/// The cluster domain the node's CoreDNS serves (`<service>.<namespace>.svc.cluster.local`).
pub const CLUSTER_DOMAIN: &str = "cluster.local";

const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// The EndpointSlice of the `kubernetes` Service that [`publish_apiserver`] writes.
const APISERVER_SLICE: &str = "kubernetes-real-node";
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// What [`RealNode::start`] needs from the control plane.
pub struct NodeInputs<'a> {
    pub bins: &'a RealNodeBinaries,
    /// The node's state: configuration, containerd's root, kubelet's root, logs.
    pub dir: &'a Path,
    /// The control plane's pid file (the watchdog kills these process groups).
    pub pids: &'a Path,
    /// The watchdog's clean-up scripts directory.
    pub cleanup_dir: &'a Path,
    pub apiserver_port: u16,
    pub ca_pem: &'a str,
    pub token: &'a str,
}

/// A running real node. Dropping it kills all its processes and containers.
pub struct RealNode {
    pod: Option<Pod>,
    dir: PathBuf,
    ctr: PathBuf,
    crane: PathBuf,
    snapshotter: String,
    cleanup: PathBuf,
    node_ip: Ipv4Addr,
    pod_subnet: (Ipv4Addr, u8),
}

impl RealNode {
    /// Starts containerd and kubelet in a namespace of their own, imports the pause image and
    /// waits until the node is Ready.
    pub async fn start(client: &kube::Client, inputs: NodeInputs<'_>) -> Result<Self> {
        let dir = inputs.dir.to_path_buf();
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::create_dir_all(inputs.cleanup_dir)?;
        let (k, host_if) = create_veth()?;
        let id = format!("numaplane-node-{k}");
        let node_ip = Ipv4Addr::new(10, 250, k, 2);
        let pod_subnet = (Ipv4Addr::new(10, 244, k, 0), 24);
        // The clean-up script exists before anything it removes does.
        let cleanup = inputs.cleanup_dir.join(format!("{id}.sh"));
        write(&cleanup, &cleanup_script(&id, &host_if))?;
        let mut node = RealNode {
            pod: None,
            dir: dir.clone(),
            ctr: inputs.bins.ctr.clone(),
            crane: inputs.bins.crane.clone(),
            snapshotter: String::new(),
            cleanup,
            node_ip,
            pod_subnet,
        };
        create_cgroups(&id)?;
        let sock = dir.join("containerd.sock");
        write(
            &dir.join("containerd.toml.in"),
            &containerd_config(&dir, &sock, inputs.bins),
        )?;
        for registry in MIRRORED {
            fs::create_dir_all(dir.join("certs.d").join(registry))?;
            write(
                &dir.join("certs.d").join(registry).join("hosts.toml"),
                &mirror_hosts(registry),
            )?;
        }
        fs::create_dir_all(dir.join("cni/net.d"))?;
        write(
            &dir.join("cni/net.d/10-bridge.conflist"),
            &cni_config(&dir, pod_subnet),
        )?;
        write(&dir.join("node-ip"), &node_ip.to_string())?;
        // For pods with `dnsPolicy: Default`; ClusterFirst pods get the same server from
        // kubelet's clusterDNS, with the search path.
        write(&dir.join("resolv.conf"), &format!("nameserver {node_ip}\n"))?;
        write(&dir.join("Corefile"), &corefile(&dir))?;
        write(
            &dir.join("kube-proxy.yaml"),
            &kube_proxy_config(&dir, pod_subnet),
        )?;
        write(
            &dir.join("kubelet.yaml"),
            &kubelet_config(&dir, &sock, &id, node_ip),
        )?;
        let ca = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(inputs.ca_pem.as_bytes())
        };
        write(
            &dir.join("kubelet.kubeconfig"),
            &crate::controlplane::kubeconfig(
                &format!("https://127.0.0.1:{}", inputs.apiserver_port),
                &ca,
                "kubelet",
                inputs.token,
            ),
        )?;
        // Not `node.sh`: that is the wrapper `Pod::start` writes for the pod named `node`.
        let script = dir.join("start-node.sh");
        write(
            &script,
            &node_script(&NodeScript {
                dir: &dir,
                id: &id,
                node_if: &node_if(&host_if),
                node_ip,
                bins: inputs.bins,
                sock: &sock,
            }),
        )?;
        let spec = PodSpec {
            program: "/bin/sh".into(),
            args: vec![script.display().to_string()],
            env: vec![("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into())],
            // On every address of the namespace: kubelet dials it on loopback, pods (through
            // the `kubernetes` Service) at the node's address.
            forwards: vec![Forward {
                bind: Ipv4Addr::UNSPECIFIED,
                port: inputs.apiserver_port,
                to: (Ipv4Addr::LOCALHOST, inputs.apiserver_port).into(),
            }],
            ..PodSpec::default()
        };
        let pod = Pod::start(&dir, inputs.pids, "node", &spec)?;
        // Into the namespace `unshare` made; the script waits for it.
        run(
            "ip",
            &[
                "link",
                "set",
                &node_if(&host_if),
                "netns",
                &pod.pid().to_string(),
            ],
        )?;
        node.pod = Some(pod);
        // The host reaches pods (the API server's proxy to a pod, a scrape) through the node;
        // the route goes with the veth pair.
        let (net, len) = pod_subnet;
        run(
            "ip",
            &[
                "route",
                "add",
                &format!("{net}/{len}"),
                "via",
                &node_ip.to_string(),
                "dev",
                &host_if,
            ],
        )?;
        node.wait_ready(client).await?;
        publish_apiserver(client, node_ip, inputs.apiserver_port).await?;
        node.snapshotter = fs::read_to_string(dir.join("snapshotter"))
            .context("reading the snapshotter the node chose")?
            .trim()
            .to_string();
        debug!(%node_ip, snapshotter = node.snapshotter, "real node ready");
        Ok(node)
    }

    /// Imports an OCI image archive (as `hack/realnode-binaries.sh` packs them: the name in
    /// `index.json`'s annotations) into the node's containerd, for pods with
    /// `imagePullPolicy: Never`.
    pub fn import_image(&self, archive: &Path) -> Result<()> {
        import_into(&self.dir, &self.ctr, &self.snapshotter, archive)
    }

    /// Pushes an OCI image archive into the node's registry, from which the node pulls it
    /// whatever the pod's `imagePullPolicy` (`Always` included), as a cluster pulls from its
    /// registries. Returns the image's name.
    pub fn publish_image(&self, archive: &Path) -> Result<String> {
        push_into(&self.crane, self.node_ip, archive)
    }

    /// The node's address (on the veth pair; the API server reaches kubelet there).
    pub fn node_ip(&self) -> Ipv4Addr {
        self.node_ip
    }

    /// The pods' subnet on the node's CNI bridge: `(network, prefix length)`.
    pub fn pod_subnet(&self) -> (Ipv4Addr, u8) {
        self.pod_subnet
    }

    /// The node's state directory (logs: `node.log` is kubelet's, `containerd.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    async fn wait_ready(&mut self, client: &kube::Client) -> Result<()> {
        let nodes: Api<Node> = Api::all(client.clone());
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            // Ready, and kube-controller-manager has lifted the not-ready taint: only ours is left.
            if let Ok(node) = nodes.get(NODE_NAME).await
                && node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                && node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_none_or(|ts| ts.iter().all(|t| t.key == TAINT_KEY))
            {
                return Ok(());
            }
            let exited = self.pod.as_mut().is_some_and(|p| !p.is_running());
            if exited || Instant::now() > deadline {
                let log = crate::controlplane::tail(&self.dir.join("node.log"), 40);
                let ctrd = crate::controlplane::tail(&self.dir.join("containerd.log"), 20);
                bail!(
                    "real node {NODE_NAME} {} within {READY_TIMEOUT:?}; last lines of \
                     containerd.log:\n{ctrd}\nlast lines of node.log:\n{log}",
                    if exited { "exited" } else { "not Ready" }
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        let _ = Command::new("sh")
            .arg(&self.cleanup)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        self.pod = None;
        let _ = fs::remove_file(&self.cleanup);
        // The bulk (snapshots, volumes); the logs stay with a kept state directory.
        for heavy in HEAVY_DIRS {
            let _ = fs::remove_dir_all(self.dir.join(heavy));
        }
    }
}

/// Points the `kubernetes` Service at the API server's relay on the node, so that a pod there
/// reaches the API server as in any cluster: `KUBERNETES_SERVICE_HOST`, the Service's ClusterIP,
/// which kube-proxy sends to `node_ip:port`. The API server runs with
/// `--endpoint-reconciler-type=none` (its loopback address cannot be an endpoint), so the
/// slice is ours, named apart from any the API server would write.
async fn publish_apiserver(client: &kube::Client, node_ip: Ipv4Addr, port: u16) -> Result<()> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": APISERVER_SLICE,
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "numaplane-testenv",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [node_ip.to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }))?;
    Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .patch(
            APISERVER_SLICE,
            &PatchParams::apply("numaplane-testenv").force(),
            &Patch::Apply(&slice),
        )
        .await
        .context("publishing the API server's endpoint for pods on the real node")?;
    Ok(())
}

/// The annotations that send every pod of a namespace to the real node, through the API
/// server's `PodNodeSelector` and `PodTolerationRestriction` admission plugins
/// (docs/real-node.md).
pub fn namespace_annotations() -> std::collections::BTreeMap<String, String> {
    let tolerations = serde_json::json!([{
        "key": TAINT_KEY,
        "operator": "Exists",
        "effect": "NoSchedule"
    }]);
    [
        (
            "scheduler.alpha.kubernetes.io/node-selector".to_string(),
            format!("{}={}", NODE_LABEL.0, NODE_LABEL.1),
        ),
        (
            "scheduler.alpha.kubernetes.io/defaultTolerations".to_string(),
            tolerations.to_string(),
        ),
    ]
    .into()
}

/// The name of the default StorageClass the real node's claims get.
pub const STORAGE_CLASS: &str = "standard";

/// Where kube-controller-manager's host-path provisioner puts volumes (fixed by Kubernetes).
const HOSTPATH_VOLUMES: &str = "/tmp/hostpath_pv";

/// An environment's volumes outlive it when it ends before its claims are deleted; those left
/// longer than this by environments long gone are removed when a new one starts.
const STALE_VOLUMES: Duration = Duration::from_secs(6 * 3600);

fn remove_stale_volumes() {
    let Ok(entries) = fs::read_dir(HOSTPATH_VOLUMES) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_VOLUMES);
        if old {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// A default StorageClass served by kube-controller-manager's host-path provisioner (volumes
/// under `/tmp/hostpath_pv` on this machine, seen by the node as by the host): what a
/// JetStream ISB service's claims need to bind, as on a cluster with a default class. Volumes
/// earlier environments left there for hours are removed first.
pub async fn default_storage_class(client: &kube::Client) -> Result<()> {
    use k8s_openapi::api::storage::v1::StorageClass;
    remove_stale_volumes();
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}
        },
        "provisioner": "kubernetes.io/host-path",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate"
    }))?;
    kube::Api::<StorageClass>::all(client.clone())
        .patch(
            STORAGE_CLASS,
            &PatchParams::apply("numaplane-testenv").force(),
            &Patch::Apply(&class),
        )
        .await
        .context("creating the default StorageClass for the real node")?;
    Ok(())
}

/// Imports an OCI image archive into the containerd of the node whose state directory is
/// `dir` (`numaplane-testenv import-image` uses it on a node `up` started).
pub fn import_image_at(dir: &Path, archive: &Path) -> Result<()> {
    let snapshotter = fs::read_to_string(dir.join("snapshotter"))
        .with_context(|| format!("no running real node at {}", dir.display()))?;
    let ctr = RealNodeBinaries::locate()?.ctr;
    import_into(dir, &ctr, snapshotter.trim(), archive)
}

/// Pushes an OCI image archive into the registry of the node whose state directory is `dir`
/// (`numaplane-testenv publish-image`); returns the image's name.
pub fn publish_image_at(dir: &Path, archive: &Path) -> Result<String> {
    let ip: Ipv4Addr = fs::read_to_string(dir.join("node-ip"))
        .with_context(|| format!("no running real node at {}", dir.display()))?
        .trim()
        .parse()
        .context("the node's address")?;
    push_into(&RealNodeBinaries::locate()?.crane, ip, archive)
}

/// The node's state directory under an environment directory kept with
/// [`crate::TestEnvOptions::dir`].
pub const KEPT_DIR: &str = "realnode-data";

/// The directories [`RealNode`]'s drop removes: the bulk, never the logs.
pub const HEAVY_DIRS: [&str; 5] = ["containerd", "kubelet", "pod-logs", "cni", "registry"];

/// The port of the node's registry (`crane registry serve`, in the node's namespace).
pub const REGISTRY_PORT: u16 = 5000;

/// The registries whose images the node pulls from its own registry instead (containerd's
/// `certs.d`): every one the shipped definitions, the reference samples and the tests name.
pub const MIRRORED: [&str; 5] = [
    "quay.io",
    "docker.io",
    "registry.k8s.io",
    "ghcr.io",
    "numaplane.local",
];

/// containerd's `hosts.toml` for `registry`: its images come from the node's registry.
fn mirror_hosts(registry: &str) -> String {
    let server = match registry {
        "docker.io" => "https://registry-1.docker.io".to_string(),
        r => format!("https://{r}"),
    };
    format!(
        "server = \"{server}\"\n\n[host.\"http://127.0.0.1:{REGISTRY_PORT}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    )
}

/// Pushes an OCI image archive (as `hack/realnode-binaries.sh` packs them) into the node's
/// registry under the name `index.json` gives it, without its registry host: containerd asks
/// the mirror for `<path>:<tag>` whichever registry the name has.
fn push_into(crane: &Path, node_ip: Ipv4Addr, archive: &Path) -> Result<String> {
    let layout = tempfile::tempdir().context("a directory for the image layout")?;
    run(
        "tar",
        &[
            "-xf",
            &archive.display().to_string(),
            "-C",
            &layout.path().display().to_string(),
        ],
    )?;
    let index: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(layout.path().join("index.json"))
            .with_context(|| format!("{} has no index.json", archive.display()))?,
    )
    .with_context(|| format!("{}: index.json", archive.display()))?;
    let name = index["manifests"][0]["annotations"]["io.containerd.image.name"]
        .as_str()
        .with_context(|| format!("{}: no io.containerd.image.name", archive.display()))?
        .to_string();
    let path = match name.split_once('/') {
        Some((host, rest)) if host.contains('.') || host.contains(':') => rest,
        _ => name.as_str(),
    };
    let target = format!("{node_ip}:{REGISTRY_PORT}/{path}");
    let out = Command::new(crane)
        .args(["push", "--insecure"])
        .arg(layout.path())
        .arg(&target)
        .output()
        .with_context(|| format!("running {}", crane.display()))?;
    if !out.status.success() {
        bail!(
            "pushing {} to {target}: {}{}",
            archive.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(name)
}

fn import_into(dir: &Path, ctr: &Path, snapshotter: &str, archive: &Path) -> Result<()> {
    let out = Command::new(ctr)
        .arg("--address")
        .arg(dir.join("containerd.sock"))
        .args([
            "-n",
            "k8s.io",
            "images",
            "import",
            "--snapshotter",
            snapshotter,
        ])
        .arg(archive)
        .output()
        .with_context(|| format!("running {}", ctr.display()))?;
    if !out.status.success() {
        bail!(
            "importing {}: {}{}",
            archive.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Mount points at or under `dir` in any process's view: empty once a node is gone.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    let mut found = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return found;
    };
    for e in procs.flatten() {
        let Ok(text) = fs::read_to_string(e.path().join("mountinfo")) else {
            continue;
        };
        // Field 5 is the mount point (octal escapes for spaces do not matter for a prefix).
        for line in text.lines() {
            if let Some(point) = line.split(' ').nth(4)
                && point.starts_with(&prefix)
                && !found.iter().any(|f| f == point)
            {
                found.push(point.to_string());
            }
        }
    }
    found
}

/// Creates a veth pair `npn<k>h` (host) / `npn<k>n` (moved into the node later), with `k` the
/// first free of a few starting at a random one: the subnet `10.250.<k>.0/24` is then the
/// node's alone. Returns `k` and the host end's name.
fn create_veth() -> Result<(u8, String)> {
    let start = crate::controlplane::random_bytes::<1>()?[0];
    let mut last = String::new();
    for i in 0..32u8 {
        let k = start.wrapping_add(i.wrapping_mul(7));
        let host_if = format!("npn{k}h");
        let out = Command::new("ip")
            .args(["link", "add", &host_if, "type", "veth", "peer", "name"])
            .arg(node_if(&host_if))
            .output()
            .context("running `ip` (iproute2)")?;
        if !out.status.success() {
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            continue;
        }
        let cidr = format!("10.250.{k}.1/24");
        run("ip", &["addr", "add", &cidr, "dev", &host_if])?;
        run("ip", &["link", "set", &host_if, "up"])?;
        return Ok((k, host_if));
    }
    bail!("could not create a veth pair for the real node: {last}")
}

fn node_if(host_if: &str) -> String {
    format!("{}n", host_if.trim_end_matches('h'))
}

/// The cgroup v1 hierarchies kubelet's cgroupfs driver wants its root in (every mounted one;
/// the cgroup v2 `unified` mount of a hybrid host is not used by it).
fn hierarchies() -> Result<Vec<PathBuf>> {
    // On a cgroup v2-only host the directories under the root are cgroups, not hierarchies.
    if Path::new(CGROUP_ROOT).join("cgroup.controllers").exists() {
        bail!(
            "{CGROUP_ROOT} is a cgroup v2 hierarchy; the real node is set up for cgroup v1 \
             (or hybrid) hosts only"
        );
    }
    let mut out = Vec::new();
    for e in fs::read_dir(CGROUP_ROOT).with_context(|| format!("reading {CGROUP_ROOT}"))? {
        let p = e?.path();
        if p.file_name().is_some_and(|n| n != "unified") && p.join("cgroup.procs").exists() {
            out.push(p);
        }
    }
    if out.is_empty() {
        bail!("no cgroup v1 hierarchy under {CGROUP_ROOT}: the real node needs one");
    }
    Ok(out)
}

fn create_cgroups(id: &str) -> Result<()> {
    for h in hierarchies()? {
        let dir = h.join(id);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // A new cpuset has no CPUs or memory nodes: nothing could join it.
        for f in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(v) = fs::read_to_string(h.join(f)) {
                fs::write(dir.join(f), v.trim())
                    .with_context(|| format!("writing {}", dir.join(f).display()))?;
            }
        }
    }
    Ok(())
}

/// Kills every process in the node's cgroups (until none is left: a dying shim's children may
/// appear briefly), removes the cgroups deepest first and the veth pair.
fn cleanup_script(id: &str, host_if: &str) -> String {
    format!(
        r#"# Clean-up of the real node {id} (crates/testenv/src/realnode.rs).
n=0
while [ "$n" -lt 100 ]; do
  pids=$(cat {root}/*/{id}/cgroup.procs {root}/*/{id}/*/cgroup.procs {root}/*/{id}/*/*/cgroup.procs {root}/*/{id}/*/*/*/cgroup.procs {root}/*/{id}/*/*/*/*/cgroup.procs 2>/dev/null | sort -u)
  [ -z "$pids" ] && break
  kill -s KILL $pids 2>/dev/null
  sleep 0.05
  n=$((n+1))
done
for h in {root}/*/{id}; do
  [ -d "$h" ] && find "$h" -depth -type d -exec rmdir {{}} + 2>/dev/null
done
ip link del {host_if} 2>/dev/null
true
"#,
        root = CGROUP_ROOT
    )
}

struct NodeScript<'a> {
    dir: &'a Path,
    id: &'a str,
    node_if: &'a str,
    node_ip: Ipv4Addr,
    bins: &'a RealNodeBinaries,
    sock: &'a Path,
}

/// Runs inside the node's namespaces: joins the cgroups, makes `/run` private, takes the veth
/// end, starts containerd (overlayfs, else `native` where overlay cannot mount), imports the
/// pause image, then execs kubelet.
fn node_script(s: &NodeScript<'_>) -> String {
    let d = s.dir.display();
    let mut out = String::from("set -e\n");
    let _ = write!(
        out,
        r#"for c in {root}/*/{id}; do
  if [ -d "$c" ]; then echo $$ > "$c/cgroup.procs"; fi
done
mount --make-rshared /
mount -t tmpfs -o mode=755 numaplane-node-run /run
n=0
until ip link show {nif} >/dev/null 2>&1; do
  n=$((n+1)); [ "$n" -gt 500 ] && {{ echo "veth {nif} never arrived"; exit 1; }}
  sleep 0.02
done
ip link set {nif} name eth0
ip addr add {ip}/24 dev eth0
ip link set eth0 up
mkdir -p {d}/containerd {d}/probe/l {d}/probe/u {d}/probe/w {d}/probe/m
if mount -t overlay overlay -o lowerdir={d}/probe/l,upperdir={d}/probe/u,workdir={d}/probe/w {d}/probe/m 2>/dev/null; then
  umount {d}/probe/m; snap=overlayfs
else
  snap=native
fi
rm -rf {d}/probe
sed "s/@SNAPSHOTTER@/$snap/" {d}/containerd.toml.in > {d}/containerd.toml
# The node's registry: containerd pulls every image through it (certs.d), as a cluster pulls
# from its registries; tests push into it from the host at the node's address.
mkdir -p {d}/registry
{crane} registry serve --address 0.0.0.0:{rport} --disk {d}/registry > {d}/registry.log 2>&1 &
{containerd} --config {d}/containerd.toml > {d}/containerd.log 2>&1 &
n=0
until {ctr} --address {sock} version >/dev/null 2>&1; do
  n=$((n+1)); [ "$n" -gt 500 ] && {{ echo "containerd did not start"; exit 1; }}
  sleep 0.05
done
# Before kubelet asks for a sandbox: a missing sandbox image would be pulled.
{ctr} --address {sock} -n k8s.io images import --snapshotter "$snap" {pause} >/dev/null
echo "$snap" > {d}/snapshotter
# The node routes between the host's veth and the pods' bridge (a new namespace does not).
echo 1 > /proc/sys/net/ipv4/ip_forward
# Replies of a pod answering a ClusterIP on the same bridge must pass kube-proxy's rules.
echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables
{kube_proxy} --config={d}/kube-proxy.yaml > {d}/kube-proxy.log 2>&1 &
{coredns} -conf {d}/Corefile > {d}/coredns.log 2>&1 &
exec {kubelet} --config={d}/kubelet.yaml --kubeconfig={d}/kubelet.kubeconfig \
  --root-dir={d}/kubelet --hostname-override={node} --node-ip={ip} \
  --node-labels={lk}={lv} --v=1
"#,
        root = CGROUP_ROOT,
        id = s.id,
        nif = s.node_if,
        ip = s.node_ip,
        containerd = s.bins.containerd.display(),
        ctr = s.bins.ctr.display(),
        kubelet = s.bins.kubelet.display(),
        kube_proxy = s.bins.kube_proxy.display(),
        coredns = s.bins.coredns.display(),
        crane = s.bins.crane.display(),
        rport = REGISTRY_PORT,
        sock = s.sock.display(),
        pause = s.bins.pause_archive.display(),
        node = NODE_NAME,
        lk = NODE_LABEL.0,
        lv = NODE_LABEL.1,
    );
    out
}

/// containerd 1.6's configuration: everything under `dir`, the CRI plugin with our sandbox image
/// and CNI directories. `restrict_oom_score_adj`: without CAP_SYS_RESOURCE runc cannot lower a
/// sandbox's OOM score, and every sandbox would fail to start.
fn containerd_config(dir: &Path, sock: &Path, bins: &RealNodeBinaries) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{sock}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "@SNAPSHOTTER@"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{d}/containerd/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{d}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#,
        sock = sock.display(),
        pause = bins.pause_image,
        runc = bins.runc.display(),
        cni = bins.cni_bin_dir.display(),
    )
}

/// A bridge `cni0` with host-local addresses in `subnet`; no masquerading (nothing leaves the
/// node's namespace).
fn cni_config(dir: &Path, (net, len): (Ipv4Addr, u8)) -> String {
    format!(
        r#"{{
  "cniVersion": "1.0.0",
  "name": "numaplane-node",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {{
        "type": "host-local",
        "ranges": [[{{"subnet": "{net}/{len}"}}]],
        "routes": [{{"dst": "0.0.0.0/0"}}],
        "dataDir": "{d}/cni/ipam"
      }}
    }}
  ]
}}
"#,
        d = dir.display()
    )
}

/// Kubelet on a cgroup v1 host, as root without CAP_SYS_RESOURCE, with no eviction or image
/// garbage collection (imported images cannot be pulled back) and everything under `dir`. The
/// API server reaches it anonymously (this namespace is ours alone).
fn kubelet_config(dir: &Path, sock: &Path, id: &str, node_ip: Ipv4Addr) -> String {
    let d = dir.display();
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{id}
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
readOnlyPort: 0
podLogsDir: {d}/pod-logs
volumePluginDir: {d}/volume-plugins
resolvConf: {d}/resolv.conf
clusterDNS: [{node_ip}]
clusterDomain: {CLUSTER_DOMAIN}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{"memory.available": "0%", "nodefs.available": "0%", "imagefs.available": "0%", "nodefs.inodesFree": "0%"}}
mergeDefaultEvictionSettings: false
registerWithTaints:
  - {{key: "{TAINT_KEY}", value: "true", effect: NoSchedule}}
serializeImagePulls: false
"#,
        sock = sock.display()
    )
}

/// CoreDNS on the node's address (port 53 of its namespace), answering for Services and pods
/// from the API server, and nothing else: there is no upstream to forward to.
fn corefile(dir: &Path) -> String {
    format!(
        r#".:53 {{
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {d}/kubelet.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
}}
"#,
        d = dir.display()
    )
}

/// kube-proxy in iptables mode, inside the node's namespace only. It leaves the host-wide knobs
/// alone: no conntrack table sizing or timeouts, no OOM score (root lacks CAP_SYS_RESOURCE), no
/// NodePorts on localhost.
fn kube_proxy_config(dir: &Path, (net, len): (Ipv4Addr, u8)) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {d}/kubelet.kubeconfig}}
hostnameOverride: {NODE_NAME}
mode: iptables
clusterCIDR: {net}/{len}
iptables: {{localhostNodePorts: false, syncPeriod: 5s, minSyncPeriod: 0s}}
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
oomScoreAdj: 0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
"#,
        d = dir.display()
    )
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn write(path: &Path, contents: &str) -> Result<()> {
    fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}
