//! NumaflowControllerRollout and NumaflowController (docs/install.md):
//! installing and upgrading the Numaflow controller in a namespace from versioned definitions.
//!
//! - [`definitions`]: the `<namespace>/<version>` → manifest store, fed by ConfigMap watches.
//! - [`render`]: templating and object preparation (pure).
//! - `nc_ctx`: what both reconcilers share; `child`: applying and deleting NumaflowControllers; `owned`: caches of the rendered objects; `apply`: apply, recreate, prune.
//! - `controller`: the NumaflowController reconciler; `rollout`: the NumaflowControllerRollout
//!   reconciler and the upgrade-strategy seam; `trial`: a progressive controller upgrade;
//!   `wiring`: watches and controllers.
//!
//! Both reconcilers follow the shape of the rollout loop: observe caches, decide in core
//! (`numaplane_core::controller_rollout`, `controller_trial`, `controller_health`), act with
//! server-side apply, write status once and only if it changed.

mod apply;
mod child;
mod controller;
pub mod definitions;
mod nc_ctx;
mod owned;
pub mod render;
pub mod rollout;
mod trial;
mod wiring;

pub use wiring::{Wiring, start};

pub use nc_ctx::NcCtx;
