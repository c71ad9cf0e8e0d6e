//! The `numaplane` controller binary.

use clap::Parser;
use numaplane::cli::Options;
use numaplane::{Operator, OperatorOptions};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> ExitCode {
    let opts = Options::parse();
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

async fn client(opts: &Options) -> anyhow::Result<kube::Client> {
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
    let client = kube::Client::try_from(config)?;
    client
        .apiserver_version()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the Kubernetes API server at {url}: {e}"))?;
    Ok(client)
}

async fn run(opts: Options) -> anyhow::Result<()> {
    let client = client(&opts).await?;
    if opts.leader_elect {
        tracing::warn!(
            "--leader-elect is accepted but leader election is not implemented yet: run one replica"
        );
    }
    let shutdown = CancellationToken::new();
    let ready = Arc::new(AtomicBool::new(false));
    let probes = {
        let (addr, ready, token) = (
            opts.health_probe_bind_address.clone(),
            ready.clone(),
            shutdown.clone(),
        );
        tokio::spawn(async move { numaplane::probes::serve(&addr, ready, token).await })
    };
    let operator = Operator::start(
        client,
        OperatorOptions {
            config_file: opts.config_file.clone(),
            operator_namespace: opts.operator_namespace(),
            workers: opts.workers,
            instance: std::env::var("POD_NAME").ok(),
            watch_namespace: opts.watch_namespace.clone(),
        },
    )
    .await?;
    ready.store(true, Ordering::Relaxed);
    tracing::info!("numaplane started");
    wait_for_signal().await;
    tracing::info!("shutting down: finishing in-flight reconciles");
    ready.store(false, Ordering::Relaxed);
    operator.shutdown().await;
    shutdown.cancel();
    let _ = probes.await;
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
