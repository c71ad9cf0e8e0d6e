//! JSON logs whose level follows the config file's `logLevel` live.

use numaplane_core::config::LogLevel;
use std::sync::OnceLock;
use tracing_subscriber::{
    EnvFilter, Registry, layer::SubscriberExt, reload, util::SubscriberInitExt,
};

static HANDLE: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

fn filter_for(level: LogLevel) -> EnvFilter {
    // Our crates at the configured level; dependencies stay at warn so VERBOSE stays readable.
    let ours = match level {
        LogLevel::Verbose => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
    };
    EnvFilter::new(format!("warn,numaplane={ours},numaplane_core={ours}"))
}

/// Installs the global JSON subscriber (once per process; later calls only set the level).
pub fn init(level: LogLevel) {
    let (layer, handle) = reload::Layer::new(filter_for(level));
    let installed = tracing_subscriber::registry()
        .with(layer)
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(false),
        )
        .try_init()
        .is_ok();
    if installed {
        let _ = HANDLE.set(handle);
    } else {
        set_level(level);
    }
}

/// Changes the log level of a running process.
pub fn set_level(level: LogLevel) {
    if let Some(h) = HANDLE.get() {
        let _ = h.modify(|f| *f = filter_for(level));
    }
}
