//! Whole-second time arithmetic. Status times are serialised to the second, so the engine
//! decides on whole seconds: a decision re-run from the recorded status after a restart sees
//! exactly the times it recorded.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// Seconds since the Unix epoch.
pub(crate) type Secs = i64;

pub(crate) fn secs_of(t: &Time) -> Secs {
    t.0.as_second()
}

/// Out-of-range seconds (only from a hand-edited status) clamp to the representable range.
pub(crate) fn timestamp_at(s: Secs) -> Timestamp {
    Timestamp::from_second(s).unwrap_or(if s < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

pub(crate) fn time_at(s: Secs) -> Time {
    Time(timestamp_at(s))
}

pub(crate) fn secs(d: Duration) -> Secs {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}
