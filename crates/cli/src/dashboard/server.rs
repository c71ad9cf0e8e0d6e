//! HTTP: the page and its assets, the table and a rollout's page as JSON and as server-sent
//! event streams fed by watches, and the actions.

use super::actions;
use super::assets;
use super::detail::{self, Detail};
use super::guard::Guard;
use super::live::{Change, Table};
use axum::Router;
use axum::extract::{Path, Request, State as Extract};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use futures::stream::{self, Stream, StreamExt};
use kube::Client;
use kube::runtime::{WatchStreamExt, watcher};
use numaplane_api::Kind;
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// How long a rollout page waits for more changes before reading again (a burst of watch
/// events, e.g. a child and its pods, becomes one read).
const SETTLE: Duration = Duration::from_millis(150);

#[derive(Clone)]
pub struct State {
    client: Client,
    table: Arc<Table>,
    /// Who may use it: its addresses, its own page, the token.
    guard: Arc<Guard>,
    narrowed: Option<String>,
}

impl State {
    pub fn new(client: Client, table: Arc<Table>, guard: Guard, narrowed: Option<String>) -> Self {
        State {
            client,
            table,
            guard: Arc::new(guard),
            narrowed,
        }
    }
}

async fn guard(Extract(state): Extract<State>, req: Request, next: Next) -> Response {
    match state.guard.check(req.method(), req.uri(), req.headers()) {
        Some(refusal) if refusal.status == StatusCode::UNAUTHORIZED => {
            let mut answer = failure(refusal.status.as_u16(), refusal.message);
            answer.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"numaplane-dashboard\""),
            );
            answer
        }
        Some(refusal) => failure(refusal.status.as_u16(), refusal.message),
        None => next.run(req).await,
    }
}

pub fn router(state: State) -> Router {
    Router::new()
        .route("/", get(|| async { assets::page() }))
        .route("/app.js", get(|| async { assets::script() }))
        .route("/style.css", get(|| async { assets::style() }))
        .route("/api/info", get(info))
        .route("/api/rollouts", get(rows))
        .route("/api/rollouts/stream", get(rows_stream))
        .route("/api/rollouts/{kind}/{namespace}/{name}", get(rollout))
        .route(
            "/api/rollouts/{kind}/{namespace}/{name}/stream",
            get(rollout_stream),
        )
        .route(
            "/api/rollouts/{kind}/{namespace}/{name}/actions/{action}",
            post(action),
        )
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

async fn info(Extract(state): Extract<State>) -> Json<serde_json::Value> {
    let table = state.table.info();
    let mut notes = table.notes;
    if let Some(n) = &state.narrowed {
        notes.insert(0, n.clone());
    }
    Json(json!({
        "scope": table.scope,
        "rollouts": table.rollouts,
        "synced": table.synced,
        "notes": notes,
        "actions": actions::ACTIONS,
    }))
}

async fn rows(Extract(state): Extract<State>) -> Json<serde_json::Value> {
    Json(json!({"rows": state.table.rows()}))
}

fn event(name: &str, data: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|e| Event::default().event("error").data(e.to_string()))
}

/// The whole table, then each change as it happens; a browser that fell behind gets the whole
/// table again.
async fn rows_stream(
    Extract(state): Extract<State>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (rx, rows) = state.table.follow();
    let first = event("rows", &json!({"rows": rows, "info": state.table.info()}));
    let table = state.table.clone();
    let rest = stream::unfold((rx, table), |(mut rx, table)| async move {
        let next = match rx.recv().await {
            Ok(Change::Upsert { row }) => event("upsert", &row),
            Ok(Change::Remove { key }) => event("remove", &json!({"key": key})),
            Err(RecvError::Lagged(_)) => {
                event("rows", &json!({"rows": table.rows(), "info": table.info()}))
            }
            Err(RecvError::Closed) => return None,
        };
        Some((Ok(next), (rx, table)))
    });
    Sse::new(stream::once(async { Ok(first) }).chain(rest)).keep_alive(KeepAlive::default())
}

/// An error answer: the same shape as an action's.
fn failure(code: u16, message: String) -> Response {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY),
        Json(json!({"ok": false, "status": code, "message": message})),
    )
        .into_response()
}

fn unknown_kind(kind: &str) -> Response {
    failure(404, format!("unknown rollout kind {kind:?}"))
}

async fn read(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Detail, (u16, String)> {
    match detail::gather(client, kind, namespace, name).await {
        Ok(Some(d)) => Ok(d),
        Ok(None) => Err((
            404,
            format!(
                "no {} named {name:?} in namespace {namespace}",
                kind.rollout_kind()
            ),
        )),
        Err(e) => {
            let code = e
                .chain()
                .find_map(|c| match c.downcast_ref::<kube::Error>() {
                    Some(kube::Error::Api(s)) if s.code != 0 => Some(s.code),
                    _ => None,
                })
                .unwrap_or(502);
            Err((code, format!("{e:#}")))
        }
    }
}

async fn rollout(
    Extract(state): Extract<State>,
    Path((kind, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let Some(kind) = Kind::parse_resource(&kind) else {
        return unknown_kind(&kind);
    };
    match read(&state.client, kind, &namespace, &name).await {
        Ok(d) => Json(d).into_response(),
        Err((code, message)) => failure(code, message),
    }
}

/// The rollout's page now, then again whenever a watched object of its namespace changes
/// (and the page did): no polling.
async fn rollout_stream(
    Extract(state): Extract<State>,
    Path((kind, namespace, name)): Path<(String, String, String)>,
) -> Response {
    let Some(kind) = Kind::parse_resource(&kind) else {
        return unknown_kind(&kind);
    };
    let triggers = stream::select_all(
        detail::watched(&state.client, kind, &namespace)
            .into_iter()
            .map(|api| {
                watcher(api, watcher::Config::default())
                    .default_backoff()
                    .filter_map(|e| async move {
                        match e {
                            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => Some(()),
                            // A relist or a watch error: read again to be sure.
                            Ok(watcher::Event::InitDone) => Some(()),
                            _ => None,
                        }
                    })
                    .boxed()
            }),
    )
    .boxed();
    let client = state.client.clone();
    let updates = stream::unfold(
        (triggers, client, None::<String>, true),
        move |(mut triggers, client, last, first)| {
            let namespace = namespace.clone();
            let name = name.clone();
            async move {
                loop {
                    if !first {
                        triggers.next().await?;
                        // Let the burst settle into one read.
                        let _ = tokio::time::timeout(SETTLE, async {
                            while triggers.next().await.is_some() {}
                        })
                        .await;
                    }
                    let (name_, body) = match read(&client, kind, &namespace, &name).await {
                        Ok(d) => ("detail", serde_json::to_string(&d).unwrap_or_default()),
                        Err((code, message)) => (
                            "failure",
                            json!({"status": code, "message": message}).to_string(),
                        ),
                    };
                    let text = format!("{name_}\n{body}");
                    if last.as_deref() == Some(text.as_str()) {
                        continue;
                    }
                    let ev = Event::default().event(name_).data(body);
                    return Some((
                        Ok::<_, Infallible>(ev),
                        (triggers, client, Some(text), false),
                    ));
                }
            }
        },
    );
    Sse::new(updates)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn action(
    Extract(state): Extract<State>,
    Path((kind, namespace, name, action)): Path<(String, String, String, String)>,
) -> Response {
    let Some(kind) = Kind::parse_resource(&kind) else {
        return unknown_kind(&kind);
    };
    let outcome = actions::run(&state.client, kind, &namespace, &name, &action).await;
    (
        StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::BAD_GATEWAY),
        Json(outcome),
    )
        .into_response()
}
