//! Watches and controllers of the two kinds. The rendered objects are watched by the
//! `tracking-id` label only (so Secrets and ConfigMaps of others are never cached), in the same
//! scope as everything else; definitions are watched in that scope and, when it is one
//! namespace, also in the operator's own namespace and the listed trusted ones.

use super::definitions::{self, Changed, Definitions};
use super::nc_ctx::NcCtx;
use super::owned::OwnedStores;
use super::{controller, rollout};
use crate::context::Ctx;
use crate::watches::{config_triggers, leadership_gained, scoped, spawn_watch_with, subscribe};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, ReflectHandle, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::keys::labels;
use numaplane_api::{NumaflowController, NumaflowControllerRollout};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::debug;

const BUFFER: usize = 1024;

/// What the operator hands over.
pub struct Wiring<'a> {
    pub client: &'a Client,
    pub watch_namespace: &'a Option<String>,
    pub cfg: &'a ControllerConfig,
    /// Fires when this replica becomes leader.
    pub gained: &'a broadcast::Sender<()>,
    /// Pipelines: a NumaflowControllerRollout's pause request waits until those of its
    /// namespace are paused.
    pub pipelines:
        ReflectHandle<numaplane_api::compact::Compact<numaplane_api::numaflow::Pipeline>>,
}

type Wake<K> = mpsc::UnboundedSender<ObjectRef<K>>;

fn channel_stream<K: Resource + 'static>(
    rx: mpsc::UnboundedReceiver<ObjectRef<K>>,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K::DynamicType: Send,
{
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) })
}

/// The controller owner of `obj` if it is a `K`, as an object reference.
fn controller_of<K, O>(obj: &O) -> Option<ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
    O: Resource,
{
    let ns = obj.meta().namespace.clone().unwrap_or_default();
    obj.owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == K::kind(&()))
        .map(|o| ObjectRef::new(&o.name).within(&ns))
}

/// A label-selected watch of one rendered kind: a cache, a stream for the controller, and
/// deletions mapped to the owning NumaflowController (shared streams drop them).
fn owned_watch<K>(
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    ctx: &Ctx,
    w: &Wiring<'_>,
    deleted: &Wake<NumaflowController>,
) -> anyhow::Result<(Store<K>, ReflectHandle<K>)>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store_shared::<K>(BUFFER);
    let sub = subscribe(&writer)?;
    let deleted = deleted.clone();
    spawn_watch_with(
        tasks,
        cancel,
        scoped::<K>(w.client, w.watch_namespace),
        watcher::Config::default().labels(labels::TRACKING_ID),
        writer.into(),
        ctx.metrics.clone(),
        move |obj: &K| {
            if let Some(nc) = controller_of::<NumaflowController, K>(obj) {
                let _ = deleted.send(nc);
            }
        },
    );
    Ok((store, sub))
}

/// NumaflowControllers affected by changed definitions: those of the version, anywhere when the
/// namespace is trusted (the operator's own or listed in the controller config); otherwise only
/// those of that namespace, whose status then says the definition there is ignored.
fn definition_triggers(
    rx: broadcast::Receiver<Changed>,
    ncs: Store<NumaflowController>,
    trust: definitions::Trust,
) -> impl Stream<Item = ObjectRef<NumaflowController>> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(c) => Some((Some(c), rx)),
            // Missed some: every NumaflowController may be affected.
            Err(broadcast::error::RecvError::Lagged(_)) => Some((None, rx)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
    .flat_map(move |changed: Option<Changed>| {
        let everywhere = changed.as_ref().is_none_or(|c| trust(&c.namespace));
        let refs: Vec<_> = ncs
            .state()
            .iter()
            .filter(|nc| match &changed {
                None => true,
                Some(c) => {
                    c.versions.contains(&nc.spec.version)
                        && (everywhere || nc.namespace().as_deref() == Some(c.namespace.as_str()))
                }
            })
            .map(|nc| ObjectRef::from_obj(&**nc))
            .collect();
        futures::stream::iter(refs)
    })
}

/// Where definitions are watched: the whole watch scope (so definitions in untrusted namespaces
/// can be reported as ignored), and, with one watched namespace, also the operator's and the
/// trusted ones the controller config lists when the operator starts (one listed later is
/// watched from the next start).
fn definition_scopes(
    watch_namespace: &Option<String>,
    operator_ns: &str,
    listed: &[String],
) -> Vec<Option<String>> {
    let Some(watched) = watch_namespace else {
        return vec![None];
    };
    let mut scopes: Vec<Option<String>> = Vec::new();
    for ns in [watched.as_str(), operator_ns]
        .into_iter()
        .chain(listed.iter().map(String::as_str))
    {
        if !scopes.iter().any(|s| s.as_deref() == Some(ns)) {
            scopes.push(Some(ns.to_string()));
        }
    }
    scopes
}

/// Starts the watches, waits for their first listing (so no NumaflowController fails for a
/// definition not read yet), then starts both controllers.
pub async fn start(
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    ctx: Arc<Ctx>,
    w: Wiring<'_>,
) -> anyhow::Result<()> {
    let (nc_deleted, nc_deleted_rx) = mpsc::unbounded_channel();
    let (rollout_deleted, rollout_deleted_rx) = mpsc::unbounded_channel();

    // NumaflowControllers, shared by both controllers; a deletion wakes the owning rollout.
    let (ncs, ncs_w) = reflector::store_shared::<NumaflowController>(BUFFER);
    let ncs_for_self = subscribe(&ncs_w)?;
    let ncs_for_rollouts = subscribe(&ncs_w)?;
    spawn_watch_with(
        tasks,
        cancel,
        scoped::<NumaflowController>(w.client, w.watch_namespace),
        watcher::Config::default(),
        ncs_w.into(),
        ctx.metrics.clone(),
        move |nc: &NumaflowController| {
            if let Some(r) = controller_of::<NumaflowControllerRollout, _>(nc) {
                let _ = rollout_deleted.send(r);
            }
        },
    );

    let (deployments, deployments_s) =
        owned_watch::<Deployment>(tasks, cancel, &ctx, &w, &nc_deleted)?;
    let (configmaps, configmaps_s) =
        owned_watch::<ConfigMap>(tasks, cancel, &ctx, &w, &nc_deleted)?;
    let (serviceaccounts, serviceaccounts_s) =
        owned_watch::<ServiceAccount>(tasks, cancel, &ctx, &w, &nc_deleted)?;
    let (roles, roles_s) = owned_watch::<Role>(tasks, cancel, &ctx, &w, &nc_deleted)?;
    let (rolebindings, rolebindings_s) =
        owned_watch::<RoleBinding>(tasks, cancel, &ctx, &w, &nc_deleted)?;
    let (services, services_s) = owned_watch::<Service>(tasks, cancel, &ctx, &w, &nc_deleted)?;
    let (secrets, secrets_s) = owned_watch::<Secret>(tasks, cancel, &ctx, &w, &nc_deleted)?;
    let owned = OwnedStores {
        deployments,
        configmaps,
        serviceaccounts,
        roles,
        rolebindings,
        services,
        secrets,
    };

    let defs = Arc::new(Definitions::new());
    let changes = defs.subscribe();
    let operator_ns = ctx.operator_namespace.clone();
    let trust: definitions::Trust = {
        let (ctx, operator_ns) = (ctx.clone(), operator_ns.clone());
        Arc::new(move |ns: &str| {
            definitions::trusted(
                ns,
                &operator_ns,
                &ctx.settings.controller().definitions_namespaces,
            )
        })
    };
    let scopes = definition_scopes(
        w.watch_namespace,
        &operator_ns,
        &ctx.settings.controller().definitions_namespaces,
    );
    for scope in &scopes {
        let api: Api<ConfigMap> = match scope {
            Some(ns) => Api::namespaced(w.client.clone(), ns),
            None => Api::all(w.client.clone()),
        };
        let (scope, defs, events, token, trust) = (
            scope.clone(),
            defs.clone(),
            ctx.events.clone(),
            cancel.clone(),
            trust.clone(),
        );
        tasks.spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = definitions::watch(api, scope, defs, events, trust) => {}
            }
        });
    }

    owned.wait_until_ready().await?;
    ncs.wait_until_ready().await?;
    defs.wait_listed(scopes.len()).await;

    let nctx = Arc::new(NcCtx {
        ctx: ctx.clone(),
        definitions: defs,
        owned,
        controllers: ncs.clone(),
        applied: Default::default(),
        included: Default::default(),
        running: Default::default(),
    });

    // NumaflowController: its rendered objects (changes and deletions), its definitions, the
    // controller config (includedResources).
    let ncc = Controller::for_shared_stream(ncs_for_self, ncs.clone())
        .with_config(w.cfg.clone())
        .owns_shared_stream(deployments_s)
        .owns_shared_stream(configmaps_s)
        .owns_shared_stream(serviceaccounts_s)
        .owns_shared_stream(roles_s)
        .owns_shared_stream(rolebindings_s)
        .owns_shared_stream(services_s)
        .owns_shared_stream(secrets_s)
        .reconcile_on(channel_stream(nc_deleted_rx))
        .reconcile_on(definition_triggers(changes, ncs.clone(), trust))
        .reconcile_on(config_triggers(&ctx.settings, ncs))
        .reconcile_all_on(leadership_gained(w.gained));
    {
        let (token, nctx) = (cancel.clone(), nctx.clone());
        tasks.spawn(async move {
            ncc.graceful_shutdown_on(async move { token.cancelled().await })
                .run(controller::reconcile, crate::reconcile::error_policy, nctx)
                .for_each(|res| async move {
                    if let Err(e) = res {
                        debug!(error = %e, "controller event");
                    }
                })
                .await;
        });
    }

    // NumaflowControllerRollout: its NumaflowController (changes and deletions), the
    // namespace's strategy.
    let nfcrs = Controller::new(
        scoped::<NumaflowControllerRollout>(w.client, w.watch_namespace),
        watcher::Config::default(),
    )
    .with_config(w.cfg.clone());
    let nfcr_store = nfcrs.store();
    let (by_pipeline, listed) = (nfcr_store.clone(), nfcr_store.clone());
    let nfcrs = nfcrs
        .owns_shared_stream(ncs_for_rollouts)
        .watches_shared_stream(w.pipelines, move |p| {
            let ns = p.ns();
            by_pipeline
                .state()
                .iter()
                .filter(|r| r.namespace().as_deref() == Some(ns))
                .map(|r| ObjectRef::from_obj(&**r))
                .collect::<Vec<_>>()
        })
        .reconcile_on(channel_stream(rollout_deleted_rx))
        .reconcile_on(config_triggers(&ctx.settings, nfcr_store))
        .reconcile_all_on(leadership_gained(w.gained));
    let token = cancel.clone();
    tasks.spawn(async move {
        nfcrs
            .graceful_shutdown_on(async move { token.cancelled().await })
            .run(rollout::reconcile, crate::reconcile::error_policy, nctx)
            .for_each(|res| async move {
                if let Err(e) = res {
                    debug!(error = %e, "controller event");
                }
            })
            .await;
    });
    // A controller stopped before its first list would wait for it forever (kube-runtime holds
    // its runner until the store is ready).
    crate::watches::until_listed(&listed).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_watched_where_they_may_be_trusted() {
        let listed = vec!["platform".to_string(), "team".to_string()];
        assert_eq!(definition_scopes(&None, "sys", &listed), vec![None]);
        let one = Some("team".to_string());
        assert_eq!(
            definition_scopes(&one, "sys", &listed),
            vec![
                Some("team".to_string()),
                Some("sys".to_string()),
                Some("platform".to_string())
            ]
        );
        let own = Some("sys".to_string());
        assert_eq!(
            definition_scopes(&own, "sys", &[]),
            vec![Some("sys".to_string())]
        );
    }
}
