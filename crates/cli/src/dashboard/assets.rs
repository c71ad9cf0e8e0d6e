//! The page, compiled into the binary: nothing is downloaded at run time.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// The pages may not be framed by another site, run only their own script and style, and never
/// send their address (it holds the token) to another site as a referrer.
const SECURITY: [(header::HeaderName, &str); 4] = [
    (header::X_FRAME_OPTIONS, "DENY"),
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; frame-ancestors 'none'",
    ),
    (header::CACHE_CONTROL, "no-cache"),
    (header::REFERRER_POLICY, "no-referrer"),
];

pub fn page() -> impl IntoResponse {
    (
        SECURITY,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        PAGE,
    )
}

pub fn script() -> impl IntoResponse {
    (
        SECURITY,
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
}

pub fn style() -> impl IntoResponse {
    (
        SECURITY,
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLE,
    )
}
