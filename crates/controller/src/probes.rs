//! `/healthz` (the process serves requests) and `/readyz` (caches synced, controllers running).

use axum::{Router, http::StatusCode, routing::get};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_util::sync::CancellationToken;

/// `:8081` (Go style, all interfaces) or `host:port`.
pub fn parse_bind(addr: &str) -> String {
    if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    }
}

pub async fn serve(
    addr: &str,
    ready: Arc<AtomicBool>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready.load(Ordering::Relaxed) {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(parse_bind(addr)).await?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}
