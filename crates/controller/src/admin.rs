//! The admin HTTP endpoints: `/healthz` (the process serves requests), `/readyz` (caches synced;
//! true for the leader and for warm standbys) and `/metrics` (OpenMetrics text).

use crate::metrics::Metrics;
use axum::{Router, http::StatusCode, http::header, response::IntoResponse, routing::get};
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

pub fn probes(ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready.load(Ordering::Acquire) {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
                    }
                }
            }),
        )
}

pub fn metrics(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
                    m.encode(),
                )
                    .into_response()
            }
        }),
    )
}

/// Serves `router` on `addr` until `shutdown`.
pub async fn serve(addr: &str, router: Router, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(parse_bind(addr))
        .await
        .map_err(|e| anyhow::anyhow!("binding {addr}: {e}"))?;
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}
