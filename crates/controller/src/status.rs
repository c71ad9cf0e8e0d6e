//! Rollout status: the phase/condition rules every kind shares, and the single status write per
//! pass (server-side apply of the whole status, skipped when nothing changed). Objects we wrote
//! are remembered until the watch cache catches up, so the next pass never acts on a status
//! older than its own last write.

use crate::context::Ctx;
use crate::error::{Error, KubeContext};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::common::{Phase, RiderStatus, Status};
use numaplane_api::keys::{condition, event_reason, message, reason};
use numaplane_api::{Kind, Reconciled, Subject};
use numaplane_core::conditions::set_condition;
use numaplane_core::health::{Health, HealthStatus};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;

/// Field manager of status writes.
pub const STATUS_MANAGER: &str = "numaplane-status";

/// Access to the parts of a kind's status the shared loop maintains.
pub trait RolloutStatus:
    Clone + Default + PartialEq + Debug + Serialize + DeserializeOwned + Send + Sync
{
    fn common(&self) -> &Status;
    fn common_mut(&mut self) -> &mut Status;
    fn name_count(&self) -> &Option<i32>;
    fn name_count_mut(&mut self) -> &mut Option<i32>;
    fn riders(&self) -> &[RiderStatus];
    fn riders_mut(&mut self) -> &mut Vec<RiderStatus>;
}

macro_rules! rollout_status {
    ($t:ty) => {
        impl RolloutStatus for $t {
            fn common(&self) -> &Status {
                &self.status
            }
            fn common_mut(&mut self) -> &mut Status {
                &mut self.status
            }
            fn name_count(&self) -> &Option<i32> {
                &self.name_count
            }
            fn name_count_mut(&mut self) -> &mut Option<i32> {
                &mut self.name_count
            }
            fn riders(&self) -> &[RiderStatus] {
                &self.riders
            }
            fn riders_mut(&mut self) -> &mut Vec<RiderStatus> {
                &mut self.riders
            }
        }
    };
}
rollout_status!(numaplane_api::PipelineRolloutStatus);
rollout_status!(numaplane_api::MonoVertexRolloutStatus);
rollout_status!(numaplane_api::ISBServiceRolloutStatus);

pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

pub fn mark_pending(st: &mut Status, msg: &str) {
    st.phase = Phase::Pending;
    st.message = if msg.is_empty() {
        message::PROGRESSING.to_string()
    } else {
        msg.to_string()
    };
}

/// `UpgradeStrategyConfigured`: `False`, saying how changes are carried, while no USDE config
/// is loaded (the namespace's strategy `strategy`); removed once one is.
pub fn note_usde_config(
    st: &mut Status,
    kind: numaplane_api::Kind,
    loaded: bool,
    strategy: numaplane_core::config::UserStrategy,
    generation: i64,
    now: &Time,
) {
    if loaded {
        numaplane_core::conditions::remove_condition(
            &mut st.conditions,
            condition::UPGRADE_STRATEGY_CONFIGURED,
        );
        return;
    }
    set_condition(
        &mut st.conditions,
        condition::UPGRADE_STRATEGY_CONFIGURED,
        HealthStatus::False,
        reason::NO_USDE_CONFIG,
        &numaplane_core::usde::unconfigured_note(kind, strategy),
        generation,
        now.clone(),
    );
}

pub fn mark_deployed(st: &mut Status, generation: i64, now: &Time) {
    st.phase = Phase::Deployed;
    st.message = message::DEPLOYED.to_string();
    set_condition(
        &mut st.conditions,
        condition::CHILD_RESOURCE_DEPLOYED,
        HealthStatus::True,
        reason::SUCCESSFUL,
        message::SUCCESSFUL,
        generation,
        now.clone(),
    );
}

pub fn mark_failed(st: &mut Status, err: &Error, now: &Time) {
    // A repeated identical failure keeps its first time, so a failing rollout writes nothing.
    if st.phase != Phase::Failed || st.message != err.to_string() {
        st.last_failure_time = Some(now.clone());
    }
    st.phase = Phase::Failed;
    st.message = err.to_string();
}

pub fn set_health(st: &mut Status, h: &Health, generation: i64, now: &Time) {
    set_condition(
        &mut st.conditions,
        condition::CHILD_RESOURCES_HEALTHY,
        h.status,
        h.reason,
        &h.message,
        generation,
        now.clone(),
    );
}

/// The newer of the cached object and the one we last wrote (by resourceVersion).
pub fn fresher<R>(ctx: &Ctx, obj: Arc<R>) -> Arc<R>
where
    R: Resource + DeserializeOwned,
{
    match newer_written(ctx, &*obj) {
        Some(newer) => Arc::new(newer),
        None => obj,
    }
}

/// The object last written for `obj`'s UID if it is newer than `obj`; an older one is
/// forgotten (the cache has caught up with it).
fn newer_written<R>(ctx: &Ctx, obj: &R) -> Option<R>
where
    R: Resource + DeserializeOwned,
{
    let (uid, rv) = (obj.uid()?, rv_of(obj.resource_version().as_deref())?);
    let mut written = ctx.written.lock().unwrap_or_else(|e| e.into_inner());
    match written.get(&uid) {
        Some((wrv, value)) if *wrv > rv => serde_json::from_value::<R>(value.clone()).ok(),
        Some(_) => {
            written.remove(&uid);
            None
        }
        None => None,
    }
}

fn rv_of(rv: Option<&str>) -> Option<u64> {
    rv?.parse().ok()
}

/// Remembers an object as written, so [`fresher`] prefers it to an older cached copy.
pub(crate) fn remember<R: Resource + Serialize>(ctx: &Ctx, written: &R) {
    if let (Some(uid), Some(rv)) = (written.uid(), rv_of(written.resource_version().as_deref()))
        && let Ok(mut v) = serde_json::to_value(written)
    {
        // Like the caches, without the field-manager bookkeeping.
        if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("managedFields");
        }
        ctx.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid, (rv, v));
    }
}

/// An object whose status a pass writes: a namespaced Numaplane kind.
pub trait StatusOf:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Reconciled
{
}

impl<R> StatusOf for R where
    R: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Reconciled
{
}

/// What the API server holds of one object's status as far as the pass knows (what the pass
/// started from, then what it wrote), and the only way a pass writes status: a record a
/// strategy must have on the server before it acts on it ([`Ledger::record_before_acting`]),
/// and the pass's outcome when it differs ([`Ledger::write`]). Any status type will do (the
/// NumaflowController kinds have no child names or riders).
pub struct Ledger<S> {
    on_server: S,
}

impl<S: PartialEq + Serialize + Clone> Ledger<S> {
    /// The ledger of a pass that read `on_server`.
    pub fn new(on_server: S) -> Self {
        Ledger { on_server }
    }

    pub fn on_server(&self) -> &S {
        &self.on_server
    }

    /// Writes `shown` now, whatever it was (no comparison, no hold): for a record that must be
    /// on the server before the pass acts on it (a progressive step, a child name it
    /// allocates), so that a pass cut short after acting finds it.
    pub async fn record_before_acting<R>(
        &mut self,
        obj: &R,
        ctx: &Ctx,
        shown: &S,
    ) -> Result<(), Error>
    where
        R: StatusOf,
    {
        write::<R>(obj, ctx, applyable(shown)?).await?;
        self.on_server = shown.clone();
        Ok(())
    }

    /// Writes `st` when it differs from what the server holds.
    pub async fn write<R>(&mut self, obj: &R, ctx: &Ctx, st: &S) -> Result<(), Error>
    where
        R: StatusOf,
    {
        write_if_changed(obj, ctx, &self.on_server, st).await?;
        self.on_server = st.clone();
        Ok(())
    }
}

/// Writes the status when it differs from what the object had.
async fn write_if_changed<R, S>(obj: &R, ctx: &Ctx, before: &S, after: &S) -> Result<(), Error>
where
    R: StatusOf,
    S: PartialEq + Serialize,
{
    if before == after {
        return Ok(());
    }
    // Compared as written: a status that quotes a character server-side apply refuses is
    // stored escaped, and must not look changed on every pass after.
    let written = applyable(after)?;
    if serde_json::to_value(before).ok().as_ref() == Some(&written) {
        return Ok(());
    }
    write::<R>(obj, ctx, written).await
}

/// `st` as JSON, with what server-side apply would refuse escaped.
fn applyable<S: Serialize>(st: &S) -> Result<serde_json::Value, Error> {
    let mut v = serde_json::to_value(st)
        .map_err(|e| Error::InvalidSpec(format!("status not serializable: {e}")))?;
    numaplane_core::child::make_applyable(&mut v);
    Ok(v)
}

async fn write<R>(obj: &R, ctx: &Ctx, st: serde_json::Value) -> Result<(), Error>
where
    R: StatusOf,
{
    ctx.ensure_leader()?;
    let api: Api<R> = Api::namespaced(ctx.client.clone(), obj.ns());
    let body = serde_json::json!({
        "apiVersion": R::api_version(&()),
        "kind": R::kind(&()),
        "status": st,
    });
    let written = api
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(STATUS_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .ctx(|| "writing status".into());
    let written = match written {
        Ok(w) => w,
        Err(e) => {
            if !e.is_not_found() {
                // The reference's MonoVertexRollout names it differently.
                let reason = if R::SUBJECT == Subject::Rollout(Kind::MonoVertex) {
                    event_reason::STATUS_UPDATE_FAILED
                } else {
                    event_reason::UPDATE_STATUS_FAILED
                };
                ctx.events
                    .write_refused(obj, reason, format!("failed to update status: {e}"))
                    .await;
            }
            return Err(e);
        }
    };
    remember(ctx, &written);
    Ok(())
}
