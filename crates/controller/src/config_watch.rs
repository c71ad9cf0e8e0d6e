//! Feeds [`Settings`]: polls the controller config file (a mounted ConfigMap changes by symlink
//! swap, which polling sees reliably) and watches the ConfigMaps labelled
//! `numaplane.numaproj.io/config`. Bad input is logged and reported as a Warning Event on the
//! ConfigMap; the last good value stays in force.

use crate::events::EventSink;
use crate::settings::Settings;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::keys::{config_kind, labels};
use numaplane_core::config::{
    parse_controller_config, parse_namespace_config, parse_usde_configmap,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info, warn};

/// How often the config file is checked for changes.
pub const FILE_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Reads the config file once: the config and its text, or why it cannot be used. Fail closed:
/// a missing or invalid file is not replaced by defaults (whose strategy is `no-strategy`, so
/// one typo and a restart would switch a cluster to direct applies); the caller waits for a
/// valid one instead, not ready.
pub fn load_initial(
    path: &PathBuf,
) -> Result<(numaplane_core::config::ControllerConfig, String), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("controller config {}: cannot read it: {e}", path.display()))?;
    let cfg = parse_controller_config(&text)
        .map_err(|e| format!("controller config {}: {e}", path.display()))?;
    Ok((cfg, text))
}

/// Waits until the config file is readable and valid, reporting why not in `not_ready` (each
/// new reason once in the log). Hot reload keeps the last good config after start-up.
pub async fn wait_for_valid(path: &PathBuf, mut not_ready: impl FnMut(&str)) {
    let mut last_why = String::new();
    loop {
        match load_initial(path) {
            Ok(_) => return,
            Err(why) => {
                if why != last_why {
                    error!(reason = %why, "not starting: the controller config is unusable; nothing is reconciled until it is fixed");
                    not_ready(&why);
                    last_why = why;
                }
            }
        }
        tokio::time::sleep(FILE_POLL_INTERVAL).await;
    }
}

/// Polls the config file and replaces the controller config when its content changes.
pub async fn watch_file(
    path: PathBuf,
    mut last: Option<String>,
    settings: Arc<Settings>,
    events: EventSink,
    operator_namespace: String,
) {
    let mut tick = tokio::time::interval(FILE_POLL_INTERVAL);
    loop {
        tick.tick().await;
        let Ok(text) = tokio::fs::read_to_string(&path).await else {
            continue; // mid-swap or removed: keep the current config
        };
        if last.as_deref() == Some(text.as_str()) {
            continue;
        }
        match parse_controller_config(&text) {
            Ok(cfg) => {
                info!(path = %path.display(), log_level = ?cfg.log_level, "controller config reloaded");
                crate::logging::set_level(cfg.log_level);
                settings.set_controller(cfg);
            }
            Err(e) => {
                error!(path = %path.display(), error = %e, "invalid controller config, keeping the previous one");
                events
                    .config_warning(
                        &operator_namespace,
                        "numaplane-controller-config",
                        &format!("config.yaml: {e}"),
                    )
                    .await;
            }
        }
        last = Some(text);
    }
}

/// Watches every ConfigMap labelled `numaplane.numaproj.io/config` and dispatches on the label.
/// Scoped to one namespace (`--watch-namespace`), the operator's own namespace is watched too:
/// the USDE config lives there whichever namespace the rollouts are in.
///
/// `listed` is sent once every scope has been listed: until then a missing USDE config may only
/// be unread yet, and a change that needs a pause would be applied directly, so the operator
/// reconciles nothing before it.
pub async fn watch_configmaps(
    client: Client,
    watch_namespace: Option<String>,
    settings: Arc<Settings>,
    events: EventSink,
    operator_namespace: String,
    listed: tokio::sync::oneshot::Sender<()>,
) {
    let scopes: Vec<Api<ConfigMap>> = match &watch_namespace {
        None => vec![Api::all(client)],
        Some(ns) if *ns == operator_namespace => vec![Api::namespaced(client, ns)],
        Some(ns) => vec![
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, &operator_namespace),
        ],
    };
    let cfg = watcher::Config::default().labels(labels::CONFIG);
    let mut unlisted = scopes.len();
    let mut listed = Some(listed);
    let mut stream = futures::stream::select_all(
        scopes
            .into_iter()
            .map(|api| watcher(api, cfg.clone()).default_backoff().boxed()),
    );
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                apply(&cm, &settings, &events, &operator_namespace).await;
            }
            Ok(watcher::Event::Delete(cm)) => {
                delete(&cm, &settings, &events, &operator_namespace).await
            }
            Ok(watcher::Event::InitDone) => {
                unlisted = unlisted.saturating_sub(1);
                if unlisted == 0
                    && let Some(tx) = listed.take()
                {
                    let _ = tx.send(());
                }
            }
            Ok(watcher::Event::Init) => {}
            // The backoff restarts the watch; a relist replays current objects.
            Err(e) => warn!(error = %e, "ConfigMap watch error"),
        }
    }
}

async fn apply(cm: &ConfigMap, settings: &Settings, events: &EventSink, operator_namespace: &str) {
    let ns = cm.ns();
    let name = cm.name_any();
    let kind = cm
        .labels()
        .get(labels::CONFIG)
        .map(String::as_str)
        .unwrap_or_default();
    let data = cm.data.clone().unwrap_or_default();
    let result = match kind {
        config_kind::USDE_CONFIG if ns == operator_namespace => {
            parse_usde_configmap(&data).map(|c| {
                info!(%ns, %name, "upgrade strategy (USDE) config loaded");
                settings.set_usde(Some(c));
            })
        }
        config_kind::NAMESPACE_LEVEL_CONFIG if ns != operator_namespace => {
            parse_namespace_config(&data).map(|s| {
                info!(%ns, %name, strategy = ?s, "namespace upgrade strategy set");
                settings.set_namespace_strategy(ns, Some(s));
            })
        }
        // Definitions are read by the NumaflowController controller from its own watch.
        config_kind::NUMAFLOW_CONTROLLER_DEFINITIONS => Ok(()),
        other => {
            warn!(%ns, %name, label = other, "ConfigMap with an unsupported numaplane.numaproj.io/config value (or in the wrong namespace) ignored");
            Ok(())
        }
    };
    if let Err(e) = result {
        error!(%ns, %name, error = %e, "invalid configuration, keeping the previous one");
        events.config_warning(ns, &name, &e.to_string()).await;
    }
}

async fn delete(cm: &ConfigMap, settings: &Settings, events: &EventSink, operator_namespace: &str) {
    let ns = cm.ns();
    match cm.labels().get(labels::CONFIG).map(String::as_str) {
        // Fail closed: a deleted (or unlabelled) USDE ConfigMap does not switch the cluster to
        // direct applies; the last good one stays in force until a new one arrives.
        Some(config_kind::USDE_CONFIG) if ns == operator_namespace => {
            let name = cm.name_any();
            warn!(%ns, %name, "USDE config deleted: keeping the last one loaded until it returns");
            events
                .config_event(
                    ns,
                    &name,
                    "ConfigDeleted",
                    "upgrade-strategy (USDE) ConfigMap deleted or unlabelled: the last one loaded \
                     stays in force until it returns",
                )
                .await;
        }
        Some(config_kind::NAMESPACE_LEVEL_CONFIG) if ns != operator_namespace => {
            info!(%ns, "namespace upgrade strategy removed");
            settings.set_namespace_strategy(ns, None);
        }
        _ => {}
    }
}
