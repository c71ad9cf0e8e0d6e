//! Status conditions of the Numaplane kinds (docs/compatibility.md): sorted by type, `lastTransitionTime`
//! moving only when status or reason change, `observedGeneration` = the rollout's generation.

use crate::health::Health;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Sets (or adds) the condition `type_`. `status` is a [`crate::health::HealthStatus`] or a
/// string. `lastTransitionTime` is kept when status and reason are unchanged; message and
/// observedGeneration are always updated. Returns whether anything changed, so callers can skip
/// a status write.
pub fn set_condition(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: impl AsRef<str>,
    reason: &str,
    message: &str,
    observed_generation: i64,
    now: Time,
) -> bool {
    let status = status.as_ref();
    let changed = match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let transition = c.status != status || c.reason != reason;
            let changed = transition
                || c.message != message
                || c.observed_generation != Some(observed_generation);
            if transition {
                c.last_transition_time = now;
                c.status = status.to_string();
                c.reason = reason.to_string();
            }
            c.message = message.to_string();
            c.observed_generation = Some(observed_generation);
            changed
        }
        None => {
            conds.push(Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: reason.to_string(),
                message: message.to_string(),
                observed_generation: Some(observed_generation),
                last_transition_time: now,
            });
            true
        }
    };
    sort(conds) || changed
}

/// [`set_condition`] from a [`Health`].
pub fn set_health_condition(
    conds: &mut Vec<Condition>,
    type_: &str,
    health: &Health,
    observed_generation: i64,
    now: Time,
) -> bool {
    set_condition(
        conds,
        type_,
        health.status,
        health.reason,
        &health.message,
        observed_generation,
        now,
    )
}

/// The condition of the given type.
pub fn get_condition<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds.iter().find(|c| c.type_ == type_)
}

/// Whether the condition exists with status `True`.
pub fn is_condition_true(conds: &[Condition], type_: &str) -> bool {
    get_condition(conds, type_).is_some_and(|c| c.status == "True")
}

/// Removes the condition; returns whether it was there.
pub fn remove_condition(conds: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conds.len();
    conds.retain(|c| c.type_ != type_);
    conds.len() != before
}

/// Sorts by type (stable); returns whether the order changed.
fn sort(conds: &mut [Condition]) -> bool {
    if conds.is_sorted_by(|a, b| a.type_ <= b.type_) {
        return false;
    }
    conds.sort_by(|a, b| a.type_.cmp(&b.type_));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::HealthStatus;
    use k8s_openapi::jiff::Timestamp;
    use proptest::prelude::*;

    fn t(s: i64) -> Time {
        Time(Timestamp::from_second(s).expect("valid time"))
    }

    #[test]
    fn adds_in_type_order() {
        let mut c = Vec::new();
        assert!(set_condition(
            &mut c,
            "PipelinePausingOrPaused",
            HealthStatus::False,
            "Unpaused",
            "m",
            1,
            t(10)
        ));
        assert!(set_condition(
            &mut c,
            "ChildResourcesHealthy",
            "True",
            "Successful",
            "Successful",
            1,
            t(10)
        ));
        assert!(set_condition(
            &mut c,
            "ChildResourceDeployed",
            HealthStatus::True,
            "Successful",
            "Successful",
            1,
            t(10)
        ));
        let types: Vec<_> = c.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [
                "ChildResourceDeployed",
                "ChildResourcesHealthy",
                "PipelinePausingOrPaused"
            ]
        );
        assert_eq!(c[2].status, "False");
        assert_eq!(c[2].observed_generation, Some(1));
        assert_eq!(c[2].last_transition_time, t(10));
    }

    #[test]
    fn transition_time_kept_when_status_and_reason_unchanged() {
        let mut c = Vec::new();
        set_condition(&mut c, "A", "True", "R", "m1", 1, t(10));
        // Same everything: no change at all.
        assert!(!set_condition(&mut c, "A", "True", "R", "m1", 1, t(20)));
        assert_eq!(c[0].last_transition_time, t(10));
        // New message and generation: changed, but the transition time stays.
        assert!(set_condition(&mut c, "A", "True", "R", "m2", 2, t(30)));
        assert_eq!(
            (c[0].message.as_str(), c[0].observed_generation),
            ("m2", Some(2))
        );
        assert_eq!(c[0].last_transition_time, t(10));
        // New reason: transition.
        assert!(set_condition(&mut c, "A", "True", "R2", "m2", 2, t(40)));
        assert_eq!(c[0].last_transition_time, t(40));
        // New status: transition.
        assert!(set_condition(&mut c, "A", "False", "R2", "m2", 2, t(50)));
        assert_eq!(
            (c[0].status.as_str(), c[0].last_transition_time.clone()),
            ("False", t(50))
        );
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn health_helper_get_and_remove() {
        let mut c = Vec::new();
        let h = crate::health::pipeline_health(&serde_json::json!({"status": {"phase": "Failed"}}));
        assert!(set_health_condition(
            &mut c,
            "ChildResourcesHealthy",
            &h,
            3,
            t(1)
        ));
        let got = get_condition(&c, "ChildResourcesHealthy").unwrap();
        assert_eq!(
            (got.status.as_str(), got.reason.as_str()),
            ("False", "PipelineFailed")
        );
        assert!(!is_condition_true(&c, "ChildResourcesHealthy"));
        assert!(get_condition(&c, "Other").is_none());
        assert!(!remove_condition(&mut c, "Other"));
        assert!(remove_condition(&mut c, "ChildResourcesHealthy"));
        assert!(c.is_empty());
    }

    #[test]
    fn unsorted_input_is_sorted_and_reported_changed() {
        let mut c = Vec::new();
        set_condition(&mut c, "A", "True", "R", "m", 1, t(1));
        set_condition(&mut c, "B", "True", "R", "m", 1, t(1));
        c.swap(0, 1);
        assert!(set_condition(&mut c, "A", "True", "R", "m", 1, t(2)));
        assert_eq!(c[0].type_, "A");
    }

    proptest! {
        #[test]
        fn stays_sorted_and_idempotent(
            ops in proptest::collection::vec(("[A-E]", prop_oneof!["True", "False", "Unknown"], "[xy]", "[mn]", 0i64..3), 1..30)
        ) {
            let mut c = Vec::new();
            for (i, (ty, st, r, m, g)) in ops.iter().enumerate() {
                let before = c.clone();
                let changed = set_condition(&mut c, ty, st, r, m, *g, t(i as i64));
                prop_assert_eq!(changed, before != c);
                prop_assert!(c.is_sorted_by(|a: &Condition, b: &Condition| a.type_ < b.type_));
                prop_assert!(!set_condition(&mut c, ty, st, r, m, *g, t(1000 + i as i64)));
                let got = get_condition(&c, ty).unwrap();
                prop_assert_eq!(&got.status, st);
                prop_assert_eq!(&got.reason, r);
            }
        }
    }
}
