//! One binary, three Numaflow user-defined containers that count every message
//! (docs/dataplane.md):
//!
//! - `source`: emits `<instance>/<seq>` at `RATE` messages a second until the file
//!   `$COUNT_DIR/stop` exists; each acknowledged message is appended to
//!   `$COUNT_DIR/produced/<instance>` (acknowledged = written to the pipeline's first buffer).
//! - `map`: passes every message on unchanged (after `MAP_DELAY_MS`, 0 by default).
//! - `sink`: appends `<unix ms> <message>` to `$COUNT_DIR/delivered/<instance>` for every
//!   message before acknowledging it; with `SINK_FAIL=1` it fails every message instead (a broken sink for rollback tests).
//!
//! `<instance>` is the pod's host name and the container's start time, so a restarted container
//! never reuses an earlier one's numbers. `$COUNT_DIR` (default `/counting`) is a hostPath the
//! test reads from the host.

mod files;
mod map;
mod sink;
mod source;

use std::error::Error;

type BoxError = Box<dyn Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let role = std::env::args().nth(1).unwrap_or_default();
    let dir = files::CountDir::from_env()?;
    match role.as_str() {
        "source" => source::serve(dir).await,
        "map" => map::serve().await,
        "sink" => sink::serve(dir).await,
        other => Err(format!("unknown role {other:?}: expected source, map or sink").into()),
    }
}
