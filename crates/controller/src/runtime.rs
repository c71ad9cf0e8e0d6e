//! Wiring: one shared, label-selected watch per kind feeding both the caches the reconcilers
//! read and the triggers that wake exactly the rollouts a change affects.

use crate::child_cache::{ChildCache, INDEXED_LABELS};
use crate::config_watch;
use crate::context::{Ctx, Stores};
use crate::due_steps::Due;
use crate::events::EventSink;
use crate::metrics::Metrics;
use crate::rollout::{self, Rollout};
use crate::settings::Settings;
use crate::watches::{
    Announced, Feed, config_triggers, leadership_gained, scoped, spawn_watch_with, subscribe,
};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::compact::{Compact, RawObject, Unreadable};
use numaplane_api::keys::labels;
use numaplane_api::label_index::LabelIndex;
use numaplane_api::narrow::AnalysisRunPhase;
use numaplane_api::numaflow::{InterStepBufferService, MonoVertex, Pipeline};
use numaplane_api::{
    ISBServiceRollout, MonoVertexRollout, NumaflowControllerRollout, PipelineRollout,
};
use numaplane_core::child::isb_rollout_name_in;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Buffer of each shared watch's subscribers.
const SUBSCRIBER_BUFFER: usize = 1024;

#[derive(Clone, Debug)]
pub struct OperatorOptions {
    pub config_file: PathBuf,
    pub operator_namespace: String,
    pub workers: u16,
    /// Reporting instance of Events (the pod name in a cluster).
    pub instance: Option<String>,
    /// Watch only this namespace (`--watch-namespace`); `None` watches the whole cluster.
    pub watch_namespace: Option<String>,
    /// Where metrics are recorded (the same registry `/metrics` serves).
    pub metrics: Arc<Metrics>,
    /// Leadership from the lease manager; `None` means always leader (no election).
    pub leadership: Option<watch::Receiver<bool>>,
    /// The time bound on the leader's writes, shared with the client's request stack.
    pub fence: Option<Arc<crate::lease_fence::Fence>>,
}

impl OperatorOptions {
    /// Options for one operator without leader election, recording into its own registry.
    pub fn new(config_file: PathBuf, operator_namespace: impl Into<String>) -> Self {
        Self {
            config_file,
            operator_namespace: operator_namespace.into(),
            workers: 16,
            instance: None,
            watch_namespace: None,
            metrics: Arc::default(),
            leadership: None,
            fence: None,
        }
    }
}

/// A running operator: its tasks stop when [`Operator::shutdown`] is called or it is dropped.
pub struct Operator {
    cancel: CancellationToken,
    tasks: JoinSet<()>,
    pub ctx: Arc<Ctx>,
}

impl Operator {
    /// Starts every watch and controller on the current runtime and returns once the caches
    /// have synced.
    pub async fn start(client: Client, opts: OperatorOptions) -> anyhow::Result<Operator> {
        let (initial, last_text) =
            config_watch::load_initial(&opts.config_file).map_err(|why| anyhow::anyhow!(why))?;
        let last_text = Some(last_text);
        crate::logging::set_level(initial.log_level);
        let settings = Arc::new(Settings::new(initial));
        let events = EventSink::new(client.clone(), opts.instance.clone());
        let cancel = CancellationToken::new();
        let mut tasks = JoinSet::new();
        let (deletions, _) = broadcast::channel::<Announced>(1024);

        let (pipelines, pipelines_w) =
            reflector::store_shared::<Compact<Pipeline>>(SUBSCRIBER_BUFFER);
        let (monovertices, monovertices_w) =
            reflector::store_shared::<Compact<MonoVertex>>(SUBSCRIBER_BUFFER);
        let (isbsvcs, isbsvcs_w) =
            reflector::store_shared::<Compact<InterStepBufferService>>(SUBSCRIBER_BUFFER);
        let (isb_rollouts, isb_rollouts_w) =
            reflector::store_shared::<ISBServiceRollout>(SUBSCRIBER_BUFFER);
        let (nc_rollouts, nc_rollouts_w) =
            reflector::store_shared::<NumaflowControllerRollout>(SUBSCRIBER_BUFFER);
        let (statefulsets, statefulsets_w) =
            reflector::store_shared::<StatefulSet>(SUBSCRIBER_BUFFER);
        let (pdbs, pdbs_w) = reflector::store_shared::<PodDisruptionBudget>(SUBSCRIBER_BUFFER);
        let (analysis_runs, analysis_runs_w) = reflector::store::<AnalysisRunPhase>();
        let vertices = crate::vertex_cache::VertexCache::default();

        let pipelines_for_ncr = subscribe(&pipelines_w)?;
        let subs = Subscriptions {
            pipelines: subscribe(&pipelines_w)?,
            pipelines_for_isbr: subscribe(&pipelines_w)?,
            nc_rollouts_for_pr: subscribe(&nc_rollouts_w)?,
            nc_rollouts_for_mvr: subscribe(&nc_rollouts_w)?,
            nc_rollouts_for_isbr: subscribe(&nc_rollouts_w)?,
            monovertices: subscribe(&monovertices_w)?,
            isbsvcs_for_isbr: subscribe(&isbsvcs_w)?,
            isbsvcs_for_pr: subscribe(&isbsvcs_w)?,
            isb_rollouts: subscribe(&isb_rollouts_w)?,
            isb_rollouts_for_pr: subscribe(&isb_rollouts_w)?,
            statefulsets: subscribe(&statefulsets_w)?,
            pdbs: subscribe(&pdbs_w)?,
        };

        let children = watcher::Config::default().labels(labels::PARENT_ROLLOUT_NAME);
        let mut watches = Watches {
            tasks: &mut tasks,
            cancel: &cancel,
            client: &client,
            namespace: &opts.watch_namespace,
            deletions: &deletions,
            metrics: &opts.metrics,
        };
        let pipelines = watches.spawn_indexed(children.clone(), pipelines, pipelines_w);
        let monovertices = watches.spawn_indexed(children.clone(), monovertices, monovertices_w);
        let isbsvcs = watches.spawn_indexed(children.clone(), isbsvcs, isbsvcs_w);
        watches.spawn(watcher::Config::default(), isb_rollouts_w, None);
        watches.spawn(watcher::Config::default(), nc_rollouts_w, None);
        watches.spawn(
            watcher::Config::default().labels(labels::NUMAFLOW_ISBSVC_NAME),
            statefulsets_w,
            None,
        );
        watches.spawn(children, pdbs_w, None);
        vertices.spawn(
            &mut tasks,
            &cancel,
            scoped(&client, &opts.watch_namespace),
            opts.metrics.clone(),
        );

        let stores = Stores {
            pipelines,
            monovertices,
            isbsvcs,
            isb_rollouts,
            nc_rollouts,
            statefulsets,
            pdbs,
            analysis_runs,
            vertices,
        };
        // The configuration first: a reconcile before the USDE config is read would apply a
        // change that needs a pause directly.
        let (config_listed, config_read) = tokio::sync::oneshot::channel();
        {
            let (c, s, e, ns) = (
                client.clone(),
                settings.clone(),
                events.clone(),
                opts.operator_namespace.clone(),
            );
            let (token, scope) = (cancel.clone(), opts.watch_namespace.clone());
            tasks.spawn(async move {
                tokio::select! {
                    _ = token.cancelled() => {}
                    _ = config_watch::watch_configmaps(c, scope, s, e, ns, config_listed) => {}
                }
            });
        }
        stores.pipelines.wait_until_ready().await?;
        stores.monovertices.wait_until_ready().await?;
        stores.isbsvcs.wait_until_ready().await?;
        stores.isb_rollouts.wait_until_ready().await?;
        stores.nc_rollouts.wait_until_ready().await?;
        stores.statefulsets.wait_until_ready().await?;
        stores.pdbs.wait_until_ready().await?;
        config_read
            .await
            .map_err(|_| anyhow::anyhow!("the ConfigMap watch ended before its first list"))?;
        info!("caches synced");

        let mut ctx = Ctx::new(
            client.clone(),
            settings.clone(),
            events.clone(),
            stores,
            opts.operator_namespace.clone(),
        );
        ctx.metrics = opts.metrics.clone();
        if let Some(fence) = &opts.fence {
            ctx.fence = fence.clone();
        }
        let (gained_tx, _) = broadcast::channel::<()>(4);
        if let Some(rx) = &opts.leadership {
            ctx.leader.store(*rx.borrow(), Ordering::Release);
        }
        let ctx = Arc::new(ctx);
        ctx.metrics.leader.set(i64::from(ctx.is_leader()));
        if let Some(mut rx) = opts.leadership.clone() {
            let (ctx, token, gained) = (ctx.clone(), cancel.clone(), gained_tx.clone());
            tasks.spawn(async move {
                // Set when a change arrived while waiting for the fence: taken without waiting.
                let mut pending = false;
                let mut reopened = ctx.fence.reopenings();
                loop {
                    if !std::mem::take(&mut pending) {
                        tokio::select! {
                            _ = token.cancelled() => return,
                            changed = rx.changed() => if changed.is_err() { return },
                            r = reopened.changed() => {
                                // A renewal seen late closed the fence for a moment: what was
                                // skipped meanwhile (reconciles return early) is due now.
                                // (The fence lives in `ctx`, held here: it never closes.)
                                if r.is_err() { return }
                                if ctx.leader.load(Ordering::Acquire) {
                                    info!("lease renewal seen again: reconciling everything");
                                    let _ = gained.send(());
                                }
                                continue;
                            }
                        }
                    }
                    let is_leader = *rx.borrow_and_update();
                    ctx.leader.store(is_leader, Ordering::Release);
                    ctx.metrics.leader.set(i64::from(is_leader));
                    if is_leader {
                        // Writes start once the renewal that opens the fence arrives by watch
                        // (right after the lease is won), unless leadership changes first.
                        tokio::select! {
                            _ = token.cancelled() => return,
                            _ = ctx.fence.opened() => {}
                            changed = rx.changed() => {
                                if changed.is_err() { return }
                                pending = true;
                                continue;
                            }
                        }
                        // The renewal that opened it needs no second reconcile of everything.
                        let _ = reopened.borrow_and_update();
                        info!("became leader: reconciling everything");
                        let _ = gained.send(());
                    } else {
                        warn!("lost the leader lease: writes stopped");
                    }
                }
            });
        }
        spawn_cache_gauges(&mut tasks, &cancel, &ctx, &client);

        {
            let (s, e, ns) = (
                settings.clone(),
                events.clone(),
                opts.operator_namespace.clone(),
            );
            let (path, token) = (opts.config_file.clone(), cancel.clone());
            tasks.spawn(async move {
                tokio::select! {
                    _ = token.cancelled() => {}
                    _ = config_watch::watch_file(path, last_text, s, e, ns) => {}
                }
            });
        }

        let cfg = ControllerConfig::default().concurrency(opts.workers);

        // NumaflowControllerRollout and NumaflowController: their own watches and controllers.
        crate::numaflow_controller::start(
            &mut tasks,
            &cancel,
            ctx.clone(),
            crate::numaflow_controller::Wiring {
                client: &client,
                watch_namespace: &opts.watch_namespace,
                cfg: &cfg,
                gained: &gained_tx,
                pipelines: pipelines_for_ncr,
            },
        )
        .await?;

        crate::run_watch::spawn(
            &mut tasks,
            &cancel,
            scoped(&client, &opts.watch_namespace),
            crate::run_watch::Trials {
                pipelines: ctx.stores.pipelines.clone(),
                monovertices: ctx.stores.monovertices.clone(),
            },
            analysis_runs_w,
            deletions.clone(),
            ctx.due_steps.clone(),
        );
        let wiring = Wiring {
            gained: gained_tx,
            client,
            watch_namespace: opts.watch_namespace.clone(),
            subs,
            cfg,
            deletions,
        };
        let (prs, mvrs) = spawn_controllers(&mut tasks, &cancel, ctx.clone(), wiring);
        // Returned once the rollouts are listed too: a controller stopped before its first list
        // would wait for it forever (kube-runtime holds its runner until the store is ready).
        crate::watches::until_listed(&prs).await?;
        crate::watches::until_listed(&mvrs).await?;
        info!("rollouts listed");
        Ok(Operator { cancel, tasks, ctx })
    }

    /// Stops the controllers (in-flight reconciles finish) and the watches.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.tasks.abort_all();
    }
}

struct Subscriptions {
    pipelines: reflector::ReflectHandle<Compact<Pipeline>>,
    pipelines_for_isbr: reflector::ReflectHandle<Compact<Pipeline>>,
    nc_rollouts_for_pr: reflector::ReflectHandle<NumaflowControllerRollout>,
    nc_rollouts_for_mvr: reflector::ReflectHandle<NumaflowControllerRollout>,
    nc_rollouts_for_isbr: reflector::ReflectHandle<NumaflowControllerRollout>,
    monovertices: reflector::ReflectHandle<Compact<MonoVertex>>,
    isbsvcs_for_isbr: reflector::ReflectHandle<Compact<InterStepBufferService>>,
    isbsvcs_for_pr: reflector::ReflectHandle<Compact<InterStepBufferService>>,
    isb_rollouts: reflector::ReflectHandle<ISBServiceRollout>,
    isb_rollouts_for_pr: reflector::ReflectHandle<ISBServiceRollout>,
    statefulsets: reflector::ReflectHandle<StatefulSet>,
    pdbs: reflector::ReflectHandle<PodDisruptionBudget>,
}

/// Starts the shared watches of one operator, all in the same scope, announcing deletions of
/// labelled children and counting watch errors.
struct Watches<'a> {
    tasks: &'a mut JoinSet<()>,
    cancel: &'a CancellationToken,
    client: &'a Client,
    namespace: &'a Option<String>,
    deletions: &'a broadcast::Sender<Announced>,
    metrics: &'a Arc<Metrics>,
}

impl Watches<'_> {
    /// A watch of children, kept compact and filed by parent rollout.
    fn spawn_indexed<K>(
        &mut self,
        cfg: watcher::Config,
        store: Store<Compact<K>>,
        writer: reflector::store::Writer<Compact<K>>,
    ) -> ChildCache<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + RawObject
            + Clone
            + 'static,
    {
        let index = Arc::new(LabelIndex::of_keys(INDEXED_LABELS));
        self.spawn(cfg, writer, Some(index.clone()));
        ChildCache::new(store, index)
    }

    fn spawn<K>(
        &mut self,
        cfg: watcher::Config,
        writer: reflector::store::Writer<K>,
        index: Option<Arc<LabelIndex>>,
    ) where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let deletions = self.deletions.clone();
        let on_delete = move |obj: &K| {
            if let Some(parent) = obj.labels().get(labels::PARENT_ROLLOUT_NAME) {
                let _ = deletions.send(Announced {
                    kind: K::kind(&()).into_owned(),
                    namespace: obj.ns().to_string(),
                    parent: parent.clone(),
                    isb_rollout: obj.labels().get(labels::ISBSVC_NAME).cloned(),
                });
            }
        };
        spawn_watch_with(
            self.tasks,
            self.cancel,
            scoped(self.client, self.namespace),
            cfg,
            Feed { writer, index },
            self.metrics.clone(),
            on_delete,
        );
    }
}

/// A controller on every rollout of `api`, cached compact: without `managedFields` (a rollout
/// the user applies server-side carries a field tree per manager) and with `spec` and `status`
/// as text, parsed when reconciled (parsed, a PipelineRollout's pipeline spec alone takes
/// about 9 KiB; at 10,000 rollouts that was most of the operator's memory). `key` files each
/// rollout under what other objects find it by.
fn compact_controller<K>(
    api: Api<Compact<K>>,
    key: fn(&str) -> Option<String>,
) -> Controller<Compact<K>>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(move |o: &mut Compact<K>| {
            o.meta_mut().managed_fields = None;
            o.with_key(key);
        })
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(stream, reader)
}

/// Keeps `numaplane_kube_resource_monitored` (objects cached) and
/// `numaplane_kube_resource_cache{K8SVersion}` current.
fn spawn_cache_gauges(
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    ctx: &Arc<Ctx>,
    client: &Client,
) {
    let (ctx, token, client) = (ctx.clone(), cancel.clone(), client.clone());
    tasks.spawn(async move {
        // The reference's gauge: the cached resource count, labelled with the cluster version.
        let version = client
            .apiserver_version()
            .await
            .map(|v| v.git_version)
            .unwrap_or_default();
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tick.tick() => {}
            }
            let s = &ctx.stores;
            let n = s.pipelines.len()
                + s.monovertices.len()
                + s.isbsvcs.len()
                + s.isb_rollouts.state().len()
                + s.nc_rollouts.state().len()
                + s.statefulsets.state().len()
                + s.pdbs.state().len();
            ctx.metrics.kube_resource_monitored.set(n as i64);
            ctx.metrics
                .kube_resource_cache
                .get_or_create(&vec![("K8SVersion", version.clone())])
                .set(n as i64);
        }
    });
}

/// What the controllers are built from.
struct Wiring {
    gained: broadcast::Sender<()>,
    client: Client,
    watch_namespace: Option<String>,
    subs: Subscriptions,
    cfg: ControllerConfig,
    deletions: broadcast::Sender<Announced>,
}

/// Starts the rollout controllers and returns the stores of those that watch their rollouts
/// themselves: they are ready once the controller has listed.
fn spawn_controllers(
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    ctx: Arc<Ctx>,
    wiring: Wiring,
) -> (
    Store<Compact<PipelineRollout>>,
    Store<Compact<MonoVertexRollout>>,
) {
    let Wiring {
        gained,
        client,
        watch_namespace,
        subs,
        cfg,
        deletions,
    } = wiring;
    let (watch_namespace, deletions) = (&watch_namespace, &deletions);
    // PipelineRollout: its Pipelines, the ISB services and ISBServiceRollouts it refers to.
    let prs = compact_controller(
        scoped::<Compact<PipelineRollout>>(&client, watch_namespace),
        isb_rollout_name_in,
    )
    .with_config(cfg.clone());
    let pr_store = prs.store();
    let (by_isbsvc, by_isbr, by_ncr, pr_listed) = (
        pr_store.clone(),
        pr_store.clone(),
        pr_store.clone(),
        pr_store.clone(),
    );
    let prs = prs
        .owns_shared_stream(subs.pipelines)
        .watches_shared_stream(subs.isbsvcs_for_pr, move |isb| {
            let ns = isb.ns();
            let rollout = isb
                .labels()
                .get(labels::PARENT_ROLLOUT_NAME)
                .cloned()
                .unwrap_or_default();
            prs_using(&by_isbsvc, ns, &rollout)
        })
        .watches_shared_stream(subs.isb_rollouts_for_pr, move |isbr| {
            prs_using(&by_isbr, isbr.ns(), &isbr.name_any())
        })
        // A NumaflowControllerRollout's pause request and controller trial concern every
        // pipeline of its namespace.
        .watches_shared_stream(subs.nc_rollouts_for_pr, move |ncr| {
            in_namespace_of(&by_ncr, &ncr)
        })
        .reconcile_on(config_triggers(&ctx.settings, pr_store))
        .reconcile_on(deletion_triggers(
            deletions,
            &["Pipeline", crate::run_watch::PIPELINE_RUN],
        ));
    run_controller::<PipelineRollout, _>(tasks, cancel, prs, ctx.clone(), &gained);

    let mvrs = compact_controller(
        scoped::<Compact<MonoVertexRollout>>(&client, watch_namespace),
        |_| None,
    )
    .with_config(cfg.clone());
    let mvr_store = mvrs.store();
    let (mvr_listed, mvr_by_ncr) = (mvr_store.clone(), mvr_store.clone());
    let mvrs = mvrs
        .owns_shared_stream(subs.monovertices)
        // A Numaflow controller trial places every MonoVertex of its namespace.
        .watches_shared_stream(subs.nc_rollouts_for_mvr, move |ncr| {
            in_namespace_of(&mvr_by_ncr, &ncr)
        })
        .reconcile_on(config_triggers(&ctx.settings, mvr_store))
        .reconcile_on(deletion_triggers(
            deletions,
            &["MonoVertex", crate::run_watch::MONOVERTEX_RUN],
        ));
    run_controller::<MonoVertexRollout, _>(tasks, cancel, mvrs, ctx.clone(), &gained);

    // ISBServiceRollout: its ISB services, their StatefulSets (health) and PDBs (self-heal).
    let isbrs = Controller::for_shared_stream(subs.isb_rollouts, ctx.stores.isb_rollouts.clone())
        .with_config(cfg);
    let isbsvc_store = ctx.stores.isbsvcs.clone();
    let isbr_by_ncr = ctx.stores.isb_rollouts.clone();
    let isbrs = isbrs
        .owns_shared_stream(subs.isbsvcs_for_isbr)
        // A Numaflow controller trial places every ISB service of its namespace.
        .watches_shared_stream(subs.nc_rollouts_for_isbr, move |ncr| {
            in_namespace_of(&isbr_by_ncr, &ncr)
        })
        // Pipelines on it: a pause request waits until they are paused.
        .watches_shared_stream(subs.pipelines_for_isbr, |p| {
            p.labels()
                .get(labels::ISBSVC_NAME)
                .map(|r| ObjectRef::new(r).within(p.ns()))
        })
        .watches_shared_stream(subs.statefulsets, move |sts| {
            let ns = sts.ns();
            let isb = sts
                .labels()
                .get(labels::NUMAFLOW_ISBSVC_NAME)
                .cloned()
                .unwrap_or_default();
            isbsvc_store
                .named(ns, &isb)
                .and_then(|i| i.labels().get(labels::PARENT_ROLLOUT_NAME).cloned())
                .map(|r| ObjectRef::new(&r).within(ns))
        })
        .watches_shared_stream(subs.pdbs, |pdb| {
            pdb.labels()
                .get(labels::PARENT_ROLLOUT_NAME)
                .map(|r| ObjectRef::new(r).within(pdb.ns()))
        })
        .reconcile_on(config_triggers(
            &ctx.settings,
            ctx.stores.isb_rollouts.clone(),
        ))
        .reconcile_on(deletion_triggers(
            deletions,
            &["InterStepBufferService", "PodDisruptionBudget"],
        ))
        // A recreate deletes the ISB service once its pipelines are gone.
        .reconcile_on(deletion_triggers_by(deletions, &["Pipeline"], |d| {
            d.isb_rollout.clone()
        }));
    run_controller::<ISBServiceRollout, _>(tasks, cancel, isbrs, ctx, &gained);
    (pr_listed, mvr_listed)
}

/// Rollouts whose children of `kinds` were deleted.
fn deletion_triggers<R>(
    deletions: &broadcast::Sender<Announced>,
    kinds: &'static [&'static str],
) -> impl Stream<Item = ObjectRef<R>> + Send + 'static
where
    R: Resource<DynamicType = ()> + 'static,
{
    deletion_triggers_by(deletions, kinds, |d| Some(d.parent.clone()))
}

/// Rollouts named by `rollout` of deleted objects of `kinds`.
fn deletion_triggers_by<R>(
    deletions: &broadcast::Sender<Announced>,
    kinds: &'static [&'static str],
    rollout: fn(&Announced) -> Option<String>,
) -> impl Stream<Item = ObjectRef<R>> + Send + 'static
where
    R: Resource<DynamicType = ()> + 'static,
{
    let rx = deletions.subscribe();
    futures::stream::unfold(rx, move |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(d) if kinds.contains(&d.kind.as_str()) => {
                    let Some(name) = rollout(&d) else { continue };
                    return Some((ObjectRef::new(&name).within(&d.namespace), rx));
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// The cached objects of `ncr`'s namespace.
fn in_namespace_of<K>(store: &Store<K>, ncr: &NumaflowControllerRollout) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let ns = ncr.ns();
    store
        .state()
        .iter()
        .filter(|o| o.namespace().as_deref() == Some(ns))
        .map(|o| ObjectRef::from_obj(&**o))
        .collect()
}

/// PipelineRollouts whose pipeline runs on ISBServiceRollout `isb_rollout`.
fn prs_using(
    store: &Store<Compact<PipelineRollout>>,
    ns: &str,
    isb_rollout: &str,
) -> Vec<ObjectRef<Compact<PipelineRollout>>> {
    store
        .state()
        .iter()
        .filter(|pr| pr.namespace().as_deref() == Some(ns) && pr.key() == Some(isb_rollout))
        .map(|pr| ObjectRef::from_obj(&**pr))
        .collect()
}

/// What a rollout controller caches: the rollout itself, or [`Compact`] text parsed for each
/// reconcile.
trait Cached<R: Rollout>:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static
{
    fn rollout(self: Arc<Self>) -> Result<Arc<R>, Unreadable>;
}

impl<R: Rollout> Cached<R> for R {
    fn rollout(self: Arc<Self>) -> Result<Arc<R>, Unreadable> {
        Ok(self)
    }
}

impl<R: Rollout> Cached<R> for Compact<R> {
    fn rollout(self: Arc<Self>) -> Result<Arc<R>, Unreadable> {
        self.typed().map(Arc::new)
    }
}

async fn reconcile_cached<R: Rollout, O: Cached<R>>(
    obj: Arc<O>,
    ctx: Arc<Ctx>,
) -> Result<kube::runtime::controller::Action, crate::error::Error> {
    match obj.clone().rollout() {
        Ok(parsed) => rollout::reconcile::<R>(parsed, ctx).await,
        Err(e) => Ok(rollout::unreadable::<R>(&*obj, &e, &ctx).await),
    }
}

fn run_controller<R: Rollout, O: Cached<R>>(
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
    controller: Controller<O>,
    ctx: Arc<Ctx>,
    gained: &broadcast::Sender<()>,
) {
    // A step falling due gets its pass at once, beside the workers (`due_steps.rs`).
    let (store, lane_ctx) = (controller.store(), ctx.clone());
    ctx.due_steps
        .spawn_lane(tasks, cancel, R::KIND.controller(), move |due: Due| {
            let (store, ctx) = (store.clone(), lane_ctx.clone());
            async move {
                let at = ObjectRef::new(&due.name).within(&due.namespace);
                let Some(obj) = store.get(&at) else { return };
                if obj.meta().uid.as_deref() != Some(due.uid.as_str()) {
                    return;
                }
                // (Its answer is not needed: the runner keeps its own wake for this moment.)
                let _ = reconcile_cached::<R, O>(obj, ctx).await;
            }
        });
    let token = cancel.clone();
    let gained = leadership_gained(gained);
    tasks.spawn(async move {
        controller
            .reconcile_all_on(gained)
            .graceful_shutdown_on(async move { token.cancelled().await })
            .run(
                reconcile_cached::<R, O>,
                crate::reconcile::error_policy,
                ctx,
            )
            .for_each(|res| async move {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "controller event");
                }
            })
            .await;
    });
}
