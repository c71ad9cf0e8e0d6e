//! The admin HTTP endpoints: `/healthz` (the process serves requests), `/readyz` (a valid
//! controller config and caches synced, true for the leader and for warm standbys; else why not) and `/metrics` (OpenMetrics text).

use crate::metrics::Metrics;
use axum::{Router, http::StatusCode, http::header, response::IntoResponse, routing::get};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use tokio_util::sync::CancellationToken;

/// `:8081` (Go style, all interfaces) or `host:port`.
pub fn parse_bind(addr: &str) -> String {
    if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_string()
    }
}

/// Whether the operator is ready, and if not, why (served by `/readyz`).
#[derive(Debug)]
pub struct Readiness {
    ready: AtomicBool,
    why: RwLock<String>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            ready: AtomicBool::new(false),
            why: RwLock::new("caches not synced".into()),
        }
    }
}

impl Readiness {
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn set_not_ready(&self, why: impl Into<String>) {
        *self.why.write().unwrap_or_else(|e| e.into_inner()) = why.into();
        self.ready.store(false, Ordering::Release);
    }

    /// `None` when ready, else why not.
    pub fn not_ready(&self) -> Option<String> {
        if self.ready.load(Ordering::Acquire) {
            None
        } else {
            Some(self.why.read().unwrap_or_else(|e| e.into_inner()).clone())
        }
    }
}

pub fn probes(readiness: Arc<Readiness>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move {
                    match readiness.not_ready() {
                        None => (StatusCode::OK, "ok".to_string()),
                        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
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
