//! Command-line flags of the controller binary (the reference's flags, plus ours).

use clap::Parser;
use std::path::PathBuf;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "numaplane",
    version,
    about = "Numaplane: deploys and upgrades Numaflow pipelines, monovertices, ISB services and controllers"
)]
pub struct Options {
    /// Address the Prometheus metrics endpoint binds to.
    #[arg(long, default_value = ":8080")]
    pub metrics_bind_address: String,
    /// Address the /healthz and /readyz probes bind to.
    #[arg(long, default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Hold the Lease `numaplane-controller-lock` before writing (run several replicas).
    #[arg(long, default_value_t = false)]
    pub leader_elect: bool,
    /// Serve metrics over HTTPS with authentication and authorization: NOT SUPPORTED, refused
    /// at start-up (metrics are plain HTTP; restrict who reaches the port instead).
    /// `--metrics-secure=false` is accepted.
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        default_value_t = false,
        value_name = "BOOL",
        action = clap::ArgAction::Set
    )]
    pub metrics_secure: bool,
    /// Enable HTTP/2 for the metrics server (accepted for compatibility).
    #[arg(long, default_value_t = false)]
    pub enable_http2: bool,
    /// Path of a kubeconfig; default: in-cluster config, then $KUBECONFIG, then ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The controller config file (the `config.yaml` key of `numaplane-controller-config`).
    #[arg(long, default_value = "/etc/numaplane/config.yaml")]
    pub config_file: PathBuf,
    /// Namespace Numaplane runs in (where its USDE ConfigMap and Lease live).
    /// Default: $POD_NAMESPACE, then the service-account namespace file, then numaplane-system.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Watch only this namespace (default: the whole cluster).
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// Concurrent reconciles per controller (never the same object twice at once).
    #[arg(long, default_value_t = 16)]
    pub workers: u16,
}

impl Options {
    /// Why these flags cannot be honoured, if they cannot: a flag that asks for protection this
    /// binary does not give is refused rather than ignored.
    pub fn unsupported(&self) -> Option<String> {
        self.metrics_secure.then(|| {
            "--metrics-secure is not supported: this build serves metrics over plain HTTP, without \
             the TLS and the TokenReview/SubjectAccessReview checks the flag asks for, so it \
             refuses to start rather than expose them unprotected. Remove the flag (or pass \
             --metrics-secure=false) and restrict who can reach --metrics-bind-address (for \
             example with a NetworkPolicy, or by binding 127.0.0.1 behind an authenticating \
             proxy)"
                .to_string()
        })
    }

    /// The operator namespace as documented on `--namespace`.
    pub fn operator_namespace(&self) -> String {
        if let Some(ns) = &self.namespace {
            return ns.clone();
        }
        if let Ok(ns) = std::env::var("POD_NAMESPACE")
            && !ns.is_empty()
        {
            return ns;
        }
        std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "numaplane-system".to_string())
    }
}
