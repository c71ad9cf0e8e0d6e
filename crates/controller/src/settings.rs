//! Live configuration: the controller config file, the USDE ConfigMap and namespace-level
//! ConfigMaps. Readers take a cheap snapshot (`Arc`) per reconcile; writers replace whole values,
//! so a reconcile never sees half a config. Invalid input keeps the last good value.

use numaplane_core::config::{ControllerConfig, UsdeConfig, UserStrategy};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::sync::broadcast;

/// Which rollouts a configuration change can affect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigScope {
    All,
    Namespace(String),
}

pub struct Settings {
    controller: RwLock<Arc<ControllerConfig>>,
    usde: RwLock<Option<Arc<UsdeConfig>>>,
    namespace_strategies: RwLock<HashMap<String, UserStrategy>>,
    changes: broadcast::Sender<ConfigScope>,
}

impl Settings {
    pub fn new(controller: ControllerConfig) -> Self {
        let (changes, _) = broadcast::channel(64);
        Self {
            controller: RwLock::new(Arc::new(controller)),
            usde: RwLock::new(None),
            namespace_strategies: RwLock::new(HashMap::new()),
            changes,
        }
    }

    pub fn controller(&self) -> Arc<ControllerConfig> {
        // A poisoned lock only means a writer panicked mid-replace of an Arc: the value is intact.
        self.controller
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_controller(&self, cfg: ControllerConfig) {
        *self.controller.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(cfg);
        self.notify(ConfigScope::All);
    }

    pub fn usde(&self) -> Option<Arc<UsdeConfig>> {
        self.usde.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_usde(&self, cfg: Option<UsdeConfig>) {
        *self.usde.write().unwrap_or_else(|e| e.into_inner()) = cfg.map(Arc::new);
        self.notify(ConfigScope::All);
    }

    /// The namespace's own strategy, if a namespace-level ConfigMap sets one.
    pub fn namespace_strategy(&self, namespace: &str) -> Option<UserStrategy> {
        self.namespace_strategies
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(namespace)
            .copied()
    }

    pub fn set_namespace_strategy(&self, namespace: &str, strategy: Option<UserStrategy>) {
        {
            let mut map = self
                .namespace_strategies
                .write()
                .unwrap_or_else(|e| e.into_inner());
            match strategy {
                Some(s) => map.insert(namespace.to_string(), s),
                None => map.remove(namespace),
            };
        }
        self.notify(ConfigScope::Namespace(namespace.to_string()));
    }

    /// The upgrade strategy in effect for a namespace.
    pub fn user_strategy(&self, namespace: &str) -> UserStrategy {
        numaplane_core::config::effective_strategy(
            self.namespace_strategy(namespace),
            &self.controller(),
        )
    }

    /// A stream of configuration changes (for waking the affected rollouts).
    pub fn changes(&self) -> impl futures::Stream<Item = ConfigScope> + Send + 'static {
        let rx = self.changes.subscribe();
        futures::stream::unfold(rx, |mut rx| async move {
            match rx.recv().await {
                Ok(scope) => Some((scope, rx)),
                // Missed changes: everything may be affected.
                Err(broadcast::error::RecvError::Lagged(_)) => Some((ConfigScope::All, rx)),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
    }

    fn notify(&self, scope: ConfigScope) {
        // No subscribers yet (start-up) is fine: controllers reconcile everything when they start.
        let _ = self.changes.send(scope);
    }
}
