//! A tower layer on the kube `Client` that counts every API request by verb, resource and status
//! code (`numaplane_kube_requests_total`, and the reference's unlabelled
//! `numaplane_kube_request_total`).

use crate::metrics::Metrics;
use http::{Method, Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

#[derive(Clone)]
pub struct RequestMetricsLayer {
    metrics: Arc<Metrics>,
}

impl RequestMetricsLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestMetrics {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RequestMetrics<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, RB> Service<Request<B>> for RequestMetrics<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri().path(), req.uri().query());
        let method = req.method().as_str().to_string();
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let metrics = self.metrics.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            // A transport error has no status: count it as 0.
            let code = res.as_ref().map(|r| r.status().as_u16()).unwrap_or(0);
            metrics.kube_request(verb, &resource, code);
            metrics.rest_request(&method, &host, code);
            res
        })
    }
}

/// The Kubernetes verb and resource of a request path, e.g.
/// `GET /apis/numaflow.numaproj.io/v1alpha1/namespaces/ns/pipelines?watch=true` → (WATCH, pipelines).
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> (&'static str, String) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match parts.first() {
        Some(&"api") if parts.len() >= 2 => &parts[2..],
        Some(&"apis") if parts.len() >= 3 => &parts[3..],
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _ns, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    let resource = match rest {
        [] => "other".to_string(),
        [plural] => (*plural).to_string(),
        [plural, _name] => (*plural).to_string(),
        [plural, _name, sub, ..] => format!("{plural}/{sub}"),
    };
    let is_item = rest.len() >= 2;
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "WATCH",
        Method::GET if is_item => "GET",
        Method::GET => "LIST",
        Method::POST => "CREATE",
        Method::PUT => "UPDATE",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    };
    (verb, resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_paths() {
        let c = |m: Method, p: &str, q: Option<&str>| {
            let (v, r) = classify(&m, p, q);
            (v, r)
        };
        assert_eq!(
            c(
                Method::GET,
                "/apis/numaflow.numaproj.io/v1alpha1/namespaces/ns/pipelines",
                Some("watch=true&labelSelector=x")
            ),
            ("WATCH", "pipelines".to_string())
        );
        assert_eq!(
            c(
                Method::PATCH,
                "/apis/numaplane.numaproj.io/v1alpha1/namespaces/ns/pipelinerollouts/pr/status",
                None
            ),
            ("PATCH", "pipelinerollouts/status".to_string())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns/configmaps/c", None),
            ("GET", "configmaps".to_string())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces", None),
            ("LIST", "namespaces".to_string())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/ns", None),
            ("GET", "namespaces".to_string())
        );
        assert_eq!(
            c(
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/ns/events",
                None
            ),
            ("CREATE", "events".to_string())
        );
        assert_eq!(
            c(Method::GET, "/version", None),
            ("LIST", "other".to_string())
        );
    }
}
