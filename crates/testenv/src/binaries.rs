//! Locating the control-plane binaries (etcd, kube-apiserver, kube-controller-manager).
//!
//! They are not shipped by any package registry, so `hack/testenv-binaries.sh` builds them into a
//! cache keyed by Kubernetes version. Environment variables override single binaries (CI).
//! A missing binary is an error that says how to build it: tests fail, they never skip.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The Kubernetes release the binaries are built from.
pub const K8S_VERSION: &str = "v1.37.2";

/// Overrides the cache root (`$HOME/.cache/numaplane/testenv` by default).
pub const CACHE_ENV: &str = "NUMAPLANE_TESTENV_CACHE";

/// Paths of the three control-plane binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
}

impl Binaries {
    /// Finds every binary: `ETCD_BIN`, `KUBE_APISERVER_BIN`, `KUBE_CONTROLLER_MANAGER_BIN`, else
    /// the versioned cache directory. Fails listing every missing binary.
    pub fn locate() -> Result<Self> {
        let cache = cache_dir();
        let find = |env: &str, name: &str| -> (PathBuf, Option<String>) {
            let (path, origin) = match std::env::var_os(env) {
                Some(p) if !p.is_empty() => (PathBuf::from(p), format!("from ${env}")),
                _ => (
                    cache
                        .as_ref()
                        .map_or_else(|| PathBuf::from(name), |c| c.join(name)),
                    format!("(set ${env} to override)"),
                ),
            };
            let problem = if !is_executable(&path) {
                Some(format!(
                    "{name}: no executable at {} {origin}",
                    path.display()
                ))
            } else if is_script(&path) {
                // Debian's etcd-server package also ships an init.d script named `etcd`.
                Some(format!(
                    "{name}: {} is a script, not the {name} binary {origin}",
                    path.display()
                ))
            } else {
                None
            };
            (path, problem)
        };
        let (etcd, e1) = find("ETCD_BIN", "etcd");
        let (kube_apiserver, e2) = find("KUBE_APISERVER_BIN", "kube-apiserver");
        let (kube_controller_manager, e3) =
            find("KUBE_CONTROLLER_MANAGER_BIN", "kube-controller-manager");
        let problems: Vec<String> = [e1, e2, e3].into_iter().flatten().collect();
        if !problems.is_empty() {
            bail!(
                "control-plane binaries missing:\n  {}\nBuild them with `make testenv-binaries` \
                 (or `hack/testenv-binaries.sh`); a cold build takes 10-20 minutes.",
                problems.join("\n  ")
            );
        }
        Ok(Self {
            etcd,
            kube_apiserver,
            kube_controller_manager,
        })
    }
}

/// The kubectl built with the control plane (`KUBECTL_BIN` overrides it), for tests that drive
/// the cluster exactly as README.md and docs/install.md tell a user to.
pub fn kubectl() -> Result<PathBuf> {
    let path = match std::env::var_os("KUBECTL_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => cache_dir().map_or_else(|| PathBuf::from("kubectl"), |c| c.join("kubectl")),
    };
    if !is_executable(&path) {
        bail!(
            "kubectl: no executable at {} (set $KUBECTL_BIN to override); build it with \
             `make testenv-binaries` (or `hack/testenv-binaries.sh`)",
            path.display()
        );
    }
    Ok(path)
}

/// kube-scheduler, built with the control plane (`KUBE_SCHEDULER_BIN` overrides it).
pub fn kube_scheduler() -> Result<PathBuf> {
    let path = match std::env::var_os("KUBE_SCHEDULER_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => cache_dir().map_or_else(|| "kube-scheduler".into(), |c| c.join("kube-scheduler")),
    };
    if !is_executable(&path) {
        bail!(
            "kube-scheduler: no executable at {} (set $KUBE_SCHEDULER_BIN to override); build it \
             with `make testenv-binaries` (or `hack/testenv-binaries.sh`)",
            path.display()
        );
    }
    Ok(path)
}

/// `${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}/<K8S_VERSION>`, if a root is known.
pub fn cache_dir() -> Option<PathBuf> {
    let root = match std::env::var_os(CACHE_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache/numaplane/testenv"),
    };
    Some(root.join(K8S_VERSION))
}

/// The Argo CD release whose built-in Numaplane health checks are compared with config/argocd.
pub const ARGOCD_VERSION: &str = "v3.6.2";

/// Where `hack/argocd-builtins.sh` put Argo CD's built-in Numaplane health checks (one directory
/// per kind: `health.lua`, `testdata/*.yaml`).
pub fn argocd_builtins() -> Result<PathBuf> {
    let dir = cache_dir()
        .map(|c| c.with_file_name(format!("argocd-{ARGOCD_VERSION}")))
        .unwrap_or_default();
    if !dir.join(".complete").is_file() {
        bail!(
            "Argo CD's built-in health checks are missing at {}: fetch them with `make \
             testenv-binaries` (hack/argocd-builtins.sh)",
            dir.display()
        );
    }
    Ok(dir)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether the file starts with `#!`. The real binaries are ELF executables.
fn is_script(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 2];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"#!")
}

/// The Numaflow controller versions `hack/realstack-binaries.sh` builds (the only ones the Go
/// module proxy serves).
pub const NUMAFLOW_VERSIONS: [&str; 2] = ["1.8.1", "1.7.5"];

/// Paths of the real stack's binaries beyond the control plane: kube-scheduler (built with the
/// control plane), KWOK, the Numaflow controller per version, the Argo Rollouts controller and
/// Prometheus (built or fetched by `hack/realstack-binaries.sh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealStackBinaries {
    pub kube_scheduler: PathBuf,
    pub kwok: PathBuf,
    /// `(version without "v", path)`, newest first.
    pub numaflow: Vec<(String, PathBuf)>,
    pub rollouts_controller: PathBuf,
    pub prometheus: PathBuf,
    /// Prometheus's rule checker and tester (the shipped alerting rules are tested with it).
    pub promtool: PathBuf,
    /// Helm, which renders and installs charts/numaplane in its tests.
    pub helm: PathBuf,
}

impl RealStackBinaries {
    /// Finds every binary in the cache (`KUBE_SCHEDULER_BIN` overrides the scheduler). Fails
    /// listing every missing one, with the command that builds them.
    pub fn locate() -> Result<Self> {
        let cache = cache_dir().map(|c| c.with_file_name("realstack"));
        let in_cache = |name: &str| {
            cache
                .as_ref()
                .map_or_else(|| PathBuf::from(name), |c| c.join(name))
        };
        let scheduler = match std::env::var_os("KUBE_SCHEDULER_BIN") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => cache_dir().map_or_else(|| "kube-scheduler".into(), |c| c.join("kube-scheduler")),
        };
        let bins = Self {
            kube_scheduler: scheduler,
            kwok: in_cache("kwok"),
            numaflow: NUMAFLOW_VERSIONS
                .iter()
                .map(|v| (v.to_string(), in_cache(&format!("numaflow-v{v}"))))
                .collect(),
            rollouts_controller: in_cache("rollouts-controller"),
            prometheus: in_cache("prometheus"),
            promtool: in_cache("promtool"),
            helm: in_cache("helm"),
        };
        let mut all = vec![
            &bins.kube_scheduler,
            &bins.kwok,
            &bins.rollouts_controller,
            &bins.prometheus,
            &bins.promtool,
            &bins.helm,
        ];
        all.extend(bins.numaflow.iter().map(|(_, p)| p));
        let missing: Vec<String> = all
            .into_iter()
            .filter(|p| !is_executable(p))
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            bail!(
                "real-stack binaries missing:\n  {}\nBuild them with `make testenv-binaries` \
                 (`hack/testenv-binaries.sh` and `hack/realstack-binaries.sh`); a cold build \
                 takes about 20 minutes.",
                missing.join("\n  ")
            );
        }
        Ok(bins)
    }

    /// The controller binary for Numaflow `version` (`1.8.1` or `v1.8.1`): the exact one when it
    /// was built, else the newest built one older than it, else the oldest built one. The second
    /// value says whether it is the exact version.
    pub fn numaflow_for(&self, version: &str) -> (&str, &Path, bool) {
        let want = version.trim_start_matches('v');
        if let Some((v, p)) = self.numaflow.iter().find(|(v, _)| v == want) {
            return (v, p, true);
        }
        let key = |v: &str| -> Vec<u64> { v.split('.').filter_map(|p| p.parse().ok()).collect() };
        let older = self
            .numaflow
            .iter()
            .filter(|(v, _)| key(v) < key(want))
            .max_by_key(|(v, _)| key(v));
        let (v, p) = older
            .or_else(|| self.numaflow.iter().min_by_key(|(v, _)| key(v)))
            .map(|(v, p)| (v.as_str(), p.as_path()))
            .unwrap_or(("", Path::new("numaflow")));
        (v, p, false)
    }
}

/// What the real node ([`crate::realnode`]) runs: kubelet and kube-proxy (built with the control plane's
/// Kubernetes version), Debian's containerd, runc and CNI plugins, and the OCI image archives
/// `hack/realnode-binaries.sh` packs (the pod sandbox image and a static busybox for tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealNodeBinaries {
    pub kubelet: PathBuf,
    /// Services' ClusterIPs inside the node (iptables mode).
    pub kube_proxy: PathBuf,
    /// Cluster DNS for the node's pods.
    pub coredns: PathBuf,
    /// The node's image registry (`crane registry serve`) and the push into it.
    pub crane: PathBuf,
    pub containerd: PathBuf,
    pub ctr: PathBuf,
    pub runc: PathBuf,
    /// Holds `bridge`, `host-local` and `loopback`.
    pub cni_bin_dir: PathBuf,
    /// The pod sandbox image's archive and the name it is imported under.
    pub pause_archive: PathBuf,
    pub pause_image: String,
    /// A static busybox (`/bin/sh` and friends) for tests' pods, and its name.
    pub busybox_archive: PathBuf,
    pub busybox_image: String,
}

impl RealNodeBinaries {
    /// Finds every part (`KUBELET_BIN` and `KUBE_PROXY_BIN` override kubelet and kube-proxy). Fails listing every missing one, with
    /// the command that provides them.
    pub fn locate() -> Result<Self> {
        let kubelet = match std::env::var_os("KUBELET_BIN") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => cache_dir().map_or_else(|| "kubelet".into(), |c| c.join("kubelet")),
        };
        let kube_proxy = match std::env::var_os("KUBE_PROXY_BIN") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => cache_dir().map_or_else(|| "kube-proxy".into(), |c| c.join("kube-proxy")),
        };
        let images = cache_dir().map_or_else(
            || PathBuf::from("realnode"),
            |c| c.with_file_name("realnode"),
        );
        let mut missing = Vec::new();
        let mut exe = |p: &str| {
            let p = PathBuf::from(p);
            if !is_executable(&p) {
                missing.push(p.display().to_string());
            }
            p
        };
        let (containerd, ctr, runc) = (
            exe("/usr/bin/containerd"),
            exe("/usr/bin/ctr"),
            exe("/usr/sbin/runc"),
        );
        for plugin in ["bridge", "host-local", "loopback"] {
            exe(&format!("/usr/lib/cni/{plugin}"));
        }
        exe("/usr/bin/containerd-shim-runc-v2");
        exe("/usr/sbin/iptables-restore");
        let coredns = images.join("coredns");
        let crane = images.join("crane");
        for p in [&kubelet, &kube_proxy, &coredns, &crane] {
            if !is_executable(p) {
                missing.push(p.display().to_string());
            }
        }
        let mut image = |name: &str| -> (PathBuf, String) {
            let archive = images.join(format!("{name}.oci.tar"));
            let reference = std::fs::read_to_string(images.join(format!("{name}.ref")))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            if !archive.is_file() || reference.is_empty() {
                missing.push(archive.display().to_string());
            }
            (archive, reference)
        };
        let (pause_archive, pause_image) = image("pause");
        let (busybox_archive, busybox_image) = image("busybox");
        if !missing.is_empty() {
            bail!(
                "real-node parts missing:\n  {}\nProvide them with `make testenv-binaries` \
                 (`hack/realnode-binaries.sh`: Debian's containerd, runc and CNI plugins, kubelet \
                 and the images).",
                missing.join("\n  ")
            );
        }
        Ok(Self {
            kubelet,
            kube_proxy,
            coredns,
            crane,
            containerd,
            ctr,
            runc,
            cni_bin_dir: PathBuf::from("/usr/lib/cni"),
            pause_archive,
            pause_image,
            busybox_archive,
            busybox_image,
        })
    }
}

/// The images Numaflow's real data plane runs on the real node (`hack/dataplane-images.sh`,
/// docs/dataplane.md): OCI archives under the names the shipped controller definitions and the
/// reference samples render.
pub struct DataPlaneImages {
    pub archives: Vec<PathBuf>,
}

/// The archives every data-plane scenario needs, by file name.
pub const DATAPLANE_ARCHIVES: [&str; 6] = [
    "numaflow-v1.8.1.oci.tar",
    "nats-2.10.3.oci.tar",
    "nats-2.10.17.oci.tar",
    "nats-reloader.oci.tar",
    "nats-exporter.oci.tar",
    "counting.oci.tar",
];

/// Numaflow 1.7.5's image, for a Numaflow controller upgrade: `make test` does not build it
/// (its scenarios are in `make dataplane` only), so it is published when it exists and a
/// scenario that needs it asks for it ([`DataPlaneImages::require`]).
pub const NUMAFLOW_PREVIOUS_ARCHIVE: &str = "numaflow-v1.7.5.oci.tar";

/// The name the counting source, map and sink run under.
pub const COUNTING_IMAGE: &str = "numaplane.local/counting:testenv";

fn dataplane_dir() -> PathBuf {
    cache_dir().map_or_else(
        || PathBuf::from("dataplane"),
        |c| c.with_file_name("dataplane"),
    )
}

fn missing_images(missing: &[String]) -> anyhow::Error {
    anyhow::anyhow!(
        "data-plane images missing:\n  {}\nBuild them with `make dataplane-images` \
         (`hack/dataplane-images.sh`: Numaflow's Rust data plane, NATS and the counting \
         source and sink).",
        missing.join("\n  ")
    )
}

impl DataPlaneImages {
    /// Finds every archive every scenario needs, and the optional ones that exist; fails
    /// listing the missing ones, with the command that builds them.
    pub fn locate() -> Result<Self> {
        let dir = dataplane_dir();
        let mut archives: Vec<PathBuf> = DATAPLANE_ARCHIVES.iter().map(|a| dir.join(a)).collect();
        let missing: Vec<String> = archives
            .iter()
            .filter(|a| !a.is_file())
            .map(|a| a.display().to_string())
            .collect();
        if !missing.is_empty() {
            return Err(missing_images(&missing));
        }
        let previous = dir.join(NUMAFLOW_PREVIOUS_ARCHIVE);
        if previous.is_file() {
            archives.push(previous);
        }
        Ok(Self { archives })
    }

    /// Fails, with the command that builds it, unless the optional archive `name` exists.
    pub fn require(name: &str) -> Result<()> {
        let path = dataplane_dir().join(name);
        if path.is_file() {
            Ok(())
        } else {
            Err(missing_images(&[path.display().to_string()]))
        }
    }
}
