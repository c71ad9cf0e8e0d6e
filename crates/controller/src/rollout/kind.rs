//! What a rollout kind provides to the shared loop: the [`Rollout`] trait, and the shapes its
//! hooks answer with.

use crate::children::{self, ChildObject, DesiredChild};
use crate::context::Ctx;
use crate::error::Error;
use crate::status::RolloutStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use numaplane_api::Namespaced;
use numaplane_api::common::ChildMetadata;
use numaplane_api::keys::labels;
use numaplane_api::strategy::{Analysis, ProgressiveStrategy};
use numaplane_api::{Kind, Reconciled, Subject};
use numaplane_core::health::Health;
use numaplane_core::riders::RiderSpec;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt::Debug;
use tracing::{debug, info};

/// What a kind must provide to run the shared loop.
pub trait Rollout:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Reconciled
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    type Child: ChildObject;
    type Status: RolloutStatus;
    /// Prepared by [`Rollout::resolve`]: what the child needs from other objects.
    type Resolved: Send + Sync;

    /// The kind: its controller, Event source, metric label, USDE key and child kind; read off
    /// the type's [`Reconciled::SUBJECT`] (a NumaflowController is no rollout: a compile error).
    const KIND: Kind = match Self::SUBJECT {
        Subject::Rollout(kind) => kind,
        Subject::NumaflowController => panic!("a NumaflowController is not a rollout"),
    };
    /// What the rollout's deletion waits for before its children go.
    const ON_DELETION: numaplane_core::deletion::Guard = numaplane_core::deletion::Guard::None;

    fn child_template(&self) -> (Option<&ChildMetadata>, &Value);
    fn rider_specs(&self) -> Vec<RiderSpec>;
    fn status_of(&self) -> Option<&Self::Status>;
    fn children(stores: &crate::context::Stores) -> &crate::child_cache::ChildCache<Self::Child>;

    /// Checks the user's child spec; the message names the field and the problem.
    fn validate(spec: &Value) -> Result<(), Error>;

    /// Looks up what the child depends on. [`Resolution::Waiting`] means "not yet": the rollout
    /// waits with the message and is woken when the dependency appears.
    fn resolve(
        &self,
        ctx: &Ctx,
    ) -> impl Future<Output = Result<Resolution<Self::Resolved>, Error>> + Send;

    /// What the child must wait for before it can move to Numaflow controller `instance` (a
    /// pipeline: its ISB service there), as a message.
    fn placement_waits(
        &self,
        ctx: &Ctx,
        resolved: &Self::Resolved,
        instance: &str,
    ) -> Option<String> {
        let _ = (ctx, resolved, instance);
        None
    }

    /// What the child takes from outside the rollout (core's desired child puts it together).
    fn kind_inputs<'a>(
        &'a self,
        resolved: &'a Self::Resolved,
    ) -> numaplane_core::desired::KindInputs<'a>;

    /// How a difference between the live and the desired child is carried over: applied
    /// directly by default; a kind with a strategy may instead take a step of it (writing what
    /// it needs itself) and leave the rollout pending.
    fn carry_update(
        &self,
        ctx: &Ctx,
        st: &mut Self::Status,
        live: &Self::Child,
        desired: DesiredChild,
    ) -> impl Future<Output = Result<Carry<Self::Child>, Error>> + Send {
        let _ = (ctx, st, live);
        async { Ok(Carry::Apply(Box::new(desired))) }
    }

    /// Work to do right before an update is applied (e.g. slow resume of vertices).
    fn before_update(
        &self,
        ctx: &Ctx,
        live: &Self::Child,
        desired: &DesiredChild,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = (ctx, live, desired);
        async { Ok(()) }
    }

    /// Objects that accompany the promoted child (e.g. the ISB service's PDB).
    fn ensure_companions(
        &self,
        ctx: &Ctx,
        child: &Self::Child,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = (ctx, child);
        async { Ok(()) }
    }

    /// Children to retire because of something outside them (e.g. pipelines whose ISB service
    /// is being recreated); the pass marks them recyclable and ends, so nothing is applied to a
    /// child from a cache that doesn't know it yet. `children`: the rollout's cached children.
    fn retiring(
        &self,
        ctx: &Ctx,
        children: &[std::sync::Arc<Self::Child>],
    ) -> Vec<numaplane_core::pass::Retirement<std::sync::Arc<Self::Child>>> {
        let _ = (ctx, children);
        Vec::new()
    }

    /// One step of getting rid of a `recyclable` child; returns when to look again if nothing
    /// wakes the rollout first. By default the child is deleted once
    /// [`Rollout::recyclable_in_use`] allows; pipelines drain first.
    fn recycle(
        &self,
        ctx: &Ctx,
        child: &Self::Child,
    ) -> impl Future<Output = Result<Option<Timestamp>, Error>> + Send {
        async move {
            // Only pipelines drain (they override this); anything else goes once unused.
            let reason = child
                .labels()
                .get(labels::UPGRADE_STATE_REASON)
                .map(String::as_str);
            if let Some(why) = Self::recyclable_in_use(ctx, child).await? {
                debug!(child = %child.name_any(), %why, "recyclable child kept for now");
                return Ok(None);
            }
            info!(child = %child.name_any(), ?reason, "deleting recyclable child");
            let ns = child.ns();
            children::delete::<Self::Child>(ctx, ns, &child.name_any(), child.uid()).await?;
            Ok(None)
        }
    }

    /// Why a recyclable child that needs no draining must stay for now (e.g. an ISB service
    /// still used by pipelines); `None` lets it be deleted.
    fn recyclable_in_use(
        ctx: &Ctx,
        child: &Self::Child,
    ) -> impl Future<Output = Result<Option<String>, Error>> + Send {
        let _ = (ctx, child);
        async { Ok(None) }
    }

    /// Health of the promoted child (`ChildResourcesHealthy`).
    fn health(ctx: &Ctx, child: &Self::Child) -> Health;

    /// Whether the child is unhealthy only because it, or something it needs, is still coming up
    /// (an ISB service whose pods are starting; a pipeline whose ISB service is not running
    /// yet; Numaflow catching up with its own writes): its status may wait like a settling
    /// child's rather than report a state about to clear. The status hold bounds the wait, so
    /// a child that never comes up is reported.
    fn still_coming_up(ctx: &Ctx, child: &Self::Child) -> bool {
        let _ = (ctx, child);
        false
    }

    /// The kind, progressive strategy and analysis of this rollout; `None` for kinds without
    /// the progressive strategy.
    fn progressive_strategy(&self) -> Option<ProgressiveOf<'_>> {
        None
    }

    /// The progressive strategy's view of this rollout; `None` for kinds without it.
    fn progressive_parts(&self) -> Option<Parts<'_>> {
        let (kind, strategy, analysis) = self.progressive_strategy()?;
        // An HPA rider scales a pipeline's vertices or a MonoVertex; the engine removes it
        // while a trial holds the pods split.
        let has_hpa_rider = kind != Kind::IsbService
            && self.rider_specs().iter().any(|r| {
                r.definition.get("kind").and_then(Value::as_str) == Some("HorizontalPodAutoscaler")
            });
        Some(Parts {
            kind,
            strategy,
            analysis,
            has_hpa_rider,
        })
    }

    /// The progressive engine's record in this kind's status.
    fn read_record(st: &Self::Status) -> numaplane_core::progressive::Record {
        let _ = st;
        Default::default()
    }

    fn write_record(rec: &numaplane_core::progressive::Record, st: &mut Self::Status) {
        let _ = (rec, st);
    }

    /// Kind-specific gauges from the status about to be written (pause durations).
    fn observe_metrics(&self, ctx: &Ctx, st: &Self::Status, now: &Time) {
        let _ = (ctx, st, now);
    }

    /// Kind-specific status: pause condition and times, pod selector…
    fn observe_child(status: &mut Self::Status, child: &Self::Child, generation: i64, now: &Time) {
        let _ = (status, child, generation, now);
    }
}

/// What [`Rollout::resolve`] found.
pub enum Resolution<T> {
    /// Everything the child depends on is there.
    Ready(T),
    /// Something is not there yet: the message says what.
    Waiting(String),
}

/// What [`Rollout::carry_update`] decided.
pub enum Carry<C> {
    /// Apply this child now (as a direct update).
    Apply(Box<DesiredChild>),
    /// A step was taken; the child is as returned and the rollout waits (message says for what).
    Prepared { child: C, pending: Option<String> },
}

/// A rollout's kind, `strategy.progressive` and `strategy.analysis`.
pub type ProgressiveOf<'a> = (Kind, Option<&'a ProgressiveStrategy>, Option<&'a Analysis>);

/// The rider specs of a rollout's `spec.riders`.
pub(super) fn rider_specs<'a, T: 'a>(riders: &'a Option<Vec<T>>) -> Vec<RiderSpec>
where
    RiderSpec: From<&'a T>,
{
    riders.iter().flatten().map(RiderSpec::from).collect()
}

/// What a kind needs to take part in progressive upgrades.
pub struct Parts<'a> {
    pub kind: Kind,
    pub strategy: Option<&'a ProgressiveStrategy>,
    pub analysis: Option<&'a Analysis>,
    pub has_hpa_rider: bool,
}

/// An Event about the rollout, from its kind's event source.
pub(super) async fn publish<R: Rollout>(
    events: &crate::events::EventSink,
    obj: &R,
    t: kube::runtime::events::EventType,
    reason: &str,
    note: String,
) {
    debug!(reason, %note, "event");
    events
        .publish(
            R::KIND.event_source(),
            &obj.object_ref(&()),
            t,
            reason,
            note,
        )
        .await;
}
