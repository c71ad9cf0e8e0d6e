//! `dashboard`: a local web server showing every rollout the user can list, each rollout's
//! children, assessment, analysis, Events and history, live from watches, with the plugin's
//! actions. Every read and write uses the user's kubeconfig, so the API server's RBAC decides
//! what the page may see and do.

mod actions;
mod assets;
pub mod detail;
pub mod live;
mod server;
pub mod table;

use crate::cli::DashboardArgs;
use crate::cluster::Cluster;
use anyhow::{Context, Result};
use std::net::SocketAddr;

pub async fn run(cluster: &Cluster, args: &DashboardArgs, namespace: Option<&str>) -> Result<i32> {
    let (scope, narrowed) = live::scope(&cluster.client, namespace, &cluster.namespace).await;
    let table = live::Table::new(scope);
    table.start(&cluster.client);
    let addr = SocketAddr::new(args.address, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr} (choose another with --port)"))?;
    let bound = listener.local_addr()?;
    let state = server::State::new(cluster.client.clone(), table.clone(), bound, narrowed);
    // The first line is the address, for scripts and tests (`--port 0` picks a free one).
    println!("Numaplane dashboard: http://{bound}/");
    println!(
        "Showing rollouts of {}; every read and action uses your kubeconfig. Ctrl-C to stop.",
        table.scope.describe()
    );
    // Not a graceful shutdown: the browsers' event streams never end, so waiting for them would
    // keep Ctrl-C from stopping it. Nothing is left half-done: actions are single requests.
    tokio::select! {
        served = axum::serve(listener, server::router(state)) => {
            served.context("serving the dashboard")?;
        }
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(crate::commands::EXIT_OK)
}
