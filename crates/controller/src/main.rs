//! The `numaplane` controller binary.

use clap::Parser;
use kube_lease_manager::LeaseManagerBuilder;
use numaplane::api_metrics::RequestMetricsLayer;
use numaplane::cli::Options;
use numaplane::lease_fence::{self, Fence, FenceLayer};
use numaplane::lease_release;
use numaplane::metrics::Metrics;
use numaplane::{Operator, OperatorOptions, admin};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The reference's lease name.
const LEASE_NAME: &str = "numaplane-controller-lock";
/// Seconds a lease stays valid after its last renewal (a standby takes over within this).
const LEASE_DURATION: u64 = 15;
/// Seconds before expiry at which the holder renews (every 8 s).
const LEASE_GRACE: u64 = 7;
/// The leader stops writing this long before its lease could expire (at 11 s without a new
/// renewal): the gap between its last write and a successor's first, and the room left for
/// clock differences and requests in flight. The renewal due at 8 s has 3 s to be seen.
const FENCE_MARGIN: Duration = Duration::from_secs(4);
/// First and longest wait between attempts to set up the lease.
const LEASE_SETUP_RETRY: Duration = Duration::from_millis(500);
const LEASE_SETUP_RETRY_MAX: Duration = Duration::from_secs(15);

/// jemalloc returns the memory of the initial lists to the system; glibc malloc keeps most of
/// that spike resident (measured in `make bench`, bench/README.md). Its purge settings are
/// compiled in from `.cargo/config.toml`.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let opts = Options::parse();
    if let Some(why) = opts.unsupported() {
        // A command-line error, like clap's own: exit code 2, before touching the cluster.
        eprintln!("numaplane: {why}");
        return ExitCode::from(2);
    }
    numaplane::logging::init(numaplane_core::config::LogLevel::Info);
    match run(opts).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One clear line, no backtrace.
            eprintln!("numaplane: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn client(
    opts: &Options,
    metrics: &Arc<Metrics>,
    fence: FenceLayer,
) -> anyhow::Result<kube::Client> {
    let config = match &opts.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("reading kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!("no cluster configuration found (in-cluster or kubeconfig): {e}")
        })?,
    };
    let url = config.cluster_url.clone();
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&RequestMetricsLayer::new(metrics.clone()))
        .with_layer(&fence)
        .build();
    reachable(&client)
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the Kubernetes API server at {url}: {e}"))?;
    Ok(client)
}

/// How long start-up waits for an API server that refuses connections or answers 5xx/429 (a
/// restart, an overloaded control plane) before giving up; a refusal that retrying cannot fix
/// (401, 403, a bad certificate) ends start-up at once.
const STARTUP_PATIENCE: Duration = Duration::from_secs(30);

async fn reachable(client: &kube::Client) -> Result<(), kube::Error> {
    let deadline = tokio::time::Instant::now() + STARTUP_PATIENCE;
    let mut pause = Duration::from_millis(250);
    loop {
        match client.apiserver_version().await {
            Ok(_) => return Ok(()),
            Err(e)
                if numaplane::error::is_transient_api(&e)
                    && tokio::time::Instant::now() + pause < deadline =>
            {
                tracing::warn!("the API server is not answering yet ({e}); retrying in {pause:?}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(4));
            }
            Err(e) => return Err(e),
        }
    }
}

fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "numaplane".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}_{}_{nanos:08x}", std::process::id())
}

async fn run(opts: Options) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let identity = identity();
    let fence = Arc::new(if opts.leader_elect {
        Fence::closed()
    } else {
        Fence::open()
    });
    let user_agent = format!("numaplane/{} ({identity})", env!("CARGO_PKG_VERSION"));
    let layer = FenceLayer::new(fence.clone(), &user_agent, metrics.fenced_writes.clone());
    let client = client(&opts, &metrics, layer).await?;
    let namespace = opts.operator_namespace();
    let shutdown = CancellationToken::new();
    let readiness = Arc::new(admin::Readiness::default());
    let servers = [
        (
            opts.health_probe_bind_address.clone(),
            admin::probes(readiness.clone()),
        ),
        (
            opts.metrics_bind_address.clone(),
            admin::metrics(metrics.clone()),
        ),
    ]
    .map(|(addr, router)| {
        let token = shutdown.clone();
        tokio::spawn(async move { admin::serve(&addr, router, token).await })
    });

    // Fail closed: no lease and no reconcile before the controller config is valid
    // (not ready meanwhile, the reason in /readyz).
    tokio::select! {
        _ = wait_for_signal() => return Ok(()),
        _ = numaplane::config_watch::wait_for_valid(&opts.config_file, |why| {
            readiness.set_not_ready(why)
        }) => readiness.set_not_ready("caches not synced"),
    }
    let lease = if opts.leader_elect {
        // An API server that fails now (restarting, overloaded, RBAC not applied yet) is
        // waited for, not died of: not ready meanwhile, with the reason in /readyz.
        let mut delay = LEASE_SETUP_RETRY;
        let manager = loop {
            let built = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
                .with_namespace(namespace.clone())
                .with_identity(identity.clone())
                .with_duration(LEASE_DURATION)
                .with_grace(LEASE_GRACE)
                .build()
                .await;
            match built {
                Ok(m) => break m,
                Err(e) => {
                    let why = format!("setting up the lease {namespace}/{LEASE_NAME}: {e}");
                    warn!(%why, retry_in = ?delay, "lease not set up yet");
                    readiness.set_not_ready(why);
                    tokio::select! {
                        _ = wait_for_signal() => return Ok(()),
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(LEASE_SETUP_RETRY_MAX);
                }
            }
        };
        readiness.set_not_ready("caches not synced");
        // Each renewal of ours, seen by watch, moves the fence on.
        let (c, n, i, f) = (
            client.clone(),
            namespace.clone(),
            identity.clone(),
            fence.clone(),
        );
        tokio::spawn(
            async move { lease_fence::follow(c, &n, LEASE_NAME, &i, FENCE_MARGIN, f).await },
        );
        Some(manager.watch().await)
    } else {
        None
    };
    let (lease_client, lease_namespace) = (client.clone(), namespace.clone());
    let operator = Operator::start(
        client,
        OperatorOptions {
            config_file: opts.config_file.clone(),
            operator_namespace: namespace,
            workers: opts.workers,
            instance: std::env::var("POD_NAME").ok(),
            watch_namespace: opts.watch_namespace.clone(),
            metrics,
            leadership: lease.as_ref().map(|(rx, _)| rx.clone()),
            fence: Some(fence),
        },
    )
    .await?;
    readiness.set_ready();
    info!(leader_election = opts.leader_elect, "numaplane started");

    tokio::select! {
        _ = wait_for_signal() => {}
        res = async {
            for s in servers {
                if let Ok(Err(e)) = s.await {
                    return Err(e);
                }
            }
            Ok(())
        } => res?,
    }
    info!("shutting down: finishing in-flight reconciles");
    readiness.set_not_ready("shutting down");
    operator.shutdown().await;
    if let Some((rx, task)) = lease {
        // The lease manager stops renewing; the release is ours (see lease_release.rs).
        task.abort();
        drop(rx);
        let released = tokio::time::timeout(
            Duration::from_secs(5),
            lease_release::release(&lease_client, &lease_namespace, LEASE_NAME, &identity),
        )
        .await;
        match released {
            Ok(Ok(true)) => info!("lease released"),
            Ok(Ok(false)) => info!("lease not held any more: nothing to release"),
            Ok(Err(e)) => warn!(error = %e, "releasing the lease failed"),
            Err(_) => warn!("releasing the lease timed out"),
        }
    }
    shutdown.cancel();
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        let _ = ctrl_c.await;
        return;
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}
