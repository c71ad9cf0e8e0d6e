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

/// `${NUMAPLANE_TESTENV_CACHE:-$HOME/.cache/numaplane/testenv}/<K8S_VERSION>`, if a root is known.
pub fn cache_dir() -> Option<PathBuf> {
    let root = match std::env::var_os(CACHE_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache/numaplane/testenv"),
    };
    Some(root.join(K8S_VERSION))
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
