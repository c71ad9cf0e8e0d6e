//! `dashboard`: a local web server showing every rollout the user can list, each rollout's
//! children, assessment, analysis, Events and history, live from watches, with the plugin's
//! actions. Every read and write uses the user's kubeconfig, so the API server's RBAC decides
//! what the page may see and do. It listens on loopback unless told otherwise, and its API
//! answers only requests that name its address and carry the token it prints (`guard`).

mod actions;
mod assets;
pub mod detail;
mod guard;
pub mod live;
mod server;
pub mod table;

use crate::cli::DashboardArgs;
use crate::cluster::Cluster;
use anyhow::{Context, Result, anyhow};
use std::net::SocketAddr;

pub async fn run(cluster: &Cluster, args: &DashboardArgs, namespace: Option<&str>) -> Result<i32> {
    guard::check_address(args.address, args.allow_remote).map_err(|why| anyhow!(why))?;
    let token = guard::Token::generate()?;
    let (scope, narrowed) = live::scope(&cluster.client, namespace, &cluster.namespace).await;
    let table = live::Table::new(scope);
    table.start(&cluster.client);
    let addr = SocketAddr::new(args.address, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr} (choose another with --port)"))?;
    let bound = listener.local_addr()?;
    let rules = guard::Guard::new(bound, token.clone());
    let state = server::State::new(cluster.client.clone(), table.clone(), rules, narrowed);
    // The first line is the address with the token, for the user, scripts and tests (`--port 0`
    // picks a free one). Only this output shows the token.
    println!(
        "Numaplane dashboard: http://{bound}/?{}={}",
        guard::TOKEN_PARAM,
        token.as_str()
    );
    if !bound.ip().is_loopback() {
        eprintln!(
            "warning: listening on {bound}, which other machines may reach; the token and every \
             page travel unencrypted over HTTP"
        );
    }
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
