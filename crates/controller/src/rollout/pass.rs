//! A pass of one rollout: what it is about (the rollout, its namespace, name, uid, generation and
//! the pass's time, read once), the status it started from and the one it builds. Every status
//! write of a pass goes through it: the record a strategy writes before it acts
//! ([`Pass::record_before_acting`]) and the pass's outcome, written or held back
//! ([`Pass::finish`] in `report.rs`, beside the status holds). docs/architecture.md shows the way
//! of a pass through them.

use super::kind::Rollout;
use crate::context::Ctx;
use crate::error::Error;
use crate::status::{self, RolloutStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use numaplane_api::Namespaced;
use numaplane_api::common::UpgradeStrategy;

pub(super) struct Pass<'o, R: Rollout> {
    pub obj: &'o R,
    pub ns: String,
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub now: Time,
    /// The status the pass started from (the cached rollout's).
    pub(super) before: R::Status,
    /// What the API server holds of it: every status write of the pass goes through here.
    pub(super) ledger: status::Ledger<R::Status>,
    /// The status being built; acting records strategy state in it.
    pub st: R::Status,
    pub(super) started: std::time::Instant,
    pub(super) strategy_before: UpgradeStrategy,
}

impl<'o, R: Rollout> Pass<'o, R> {
    pub fn begin(obj: &'o R, ctx: &Ctx) -> Self {
        let uid = obj.uid().unwrap_or_default();
        let before = obj.status_of().cloned().unwrap_or_default();
        // A status held back by an earlier pass is newer than the cached one.
        let st = ctx
            .status_holds
            .held::<R::Status>(&uid)
            .unwrap_or_else(|| before.clone());
        Pass {
            obj,
            ns: obj.ns().to_string(),
            name: obj.name_any(),
            strategy_before: st.common().upgrade_in_progress,
            uid,
            ledger: status::Ledger::new(before.clone()),
            before,
            st,
            generation: obj.meta().generation.unwrap_or_default(),
            now: status::now(),
            started: std::time::Instant::now(),
        }
    }

    /// Writes `shown` now, before the pass acts on what it records (a progressive step, a child
    /// name it allocates): a pass cut short after acting then finds the record. Never held; the
    /// report at the end compares with what this wrote.
    pub async fn record_before_acting(
        &mut self,
        ctx: &Ctx,
        shown: &R::Status,
    ) -> Result<(), Error> {
        self.ledger.record_before_acting(self.obj, ctx, shown).await
    }
}
