//! Child names (docs/compatibility.md): `<rollout>-<index>`, the index drawn from `status.nameCount`.
//! Other controllers recover the rollout name by stripping the final `-<digits>`, so this
//! format is load-bearing.

/// Highest index before the counter wraps back to 0.
pub const MAX_INDEX: i32 = 999;

/// `<rollout>-<index>`.
pub fn child_name(rollout: &str, index: i32) -> String {
    format!("{rollout}-{index}")
}

/// Given `status.nameCount`, returns the index to use now and the `nameCount` to store.
///
/// Unset starts at 0; the stored value is the next index, wrapping to 0 after [`MAX_INDEX`].
/// A count outside `0..=999` (only possible by editing the status by hand) restarts at 0 rather
/// than producing a negative or over-long name.
pub fn allocate_index(name_count: Option<i32>) -> (i32, i32) {
    let index = match name_count {
        Some(n) if (0..=MAX_INDEX).contains(&n) => n,
        _ => 0,
    };
    let next = if index + 1 > MAX_INDEX { 0 } else { index + 1 };
    (index, next)
}

/// The first name from `status.nameCount` on that no live child has (`taken`), and the
/// `nameCount` to store; `None` when all indices are taken. A count that fell behind (a lost
/// status write, a rollout deleted and created again while its children remain) must never
/// hand out the name of a live child.
pub fn allocate_free(
    rollout: &str,
    name_count: Option<i32>,
    taken: impl Fn(&str) -> bool,
) -> Option<(String, i32)> {
    let mut count = name_count;
    for _ in 0..=MAX_INDEX {
        let (index, next) = allocate_index(count);
        count = Some(next);
        let name = child_name(rollout, index);
        if !taken(&name) {
            return Some((name, next));
        }
    }
    None
}

/// `status.nameCount` moved past the live children it would name: a count that fell behind
/// (the status write after a creation lost) is corrected as soon as the child is seen, so the
/// name is not handed out again once that child is deleted (a recreate deletes the old child
/// before it creates the new one). Unchanged when no live child has the name it points at.
pub fn count_past_live(
    rollout: &str,
    name_count: Option<i32>,
    live: impl Fn(&str) -> bool,
) -> Option<i32> {
    let mut count = name_count;
    for _ in 0..=MAX_INDEX {
        let (index, next) = allocate_index(count);
        if !live(&child_name(rollout, index)) {
            return count;
        }
        count = Some(next);
    }
    count
}

/// The rollout a child belongs to: its name without the final `-<digits>`.
pub fn rollout_name_of_child(child: &str) -> Option<&str> {
    let (prefix, digits) = child.rsplit_once('-')?;
    let is_index = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    (is_index && !prefix.is_empty()).then_some(prefix)
}

/// Why `s` is not an RFC 1123 DNS label (what Kubernetes requires of namespace names and label
/// values used as names): 1 to 63 characters of `a-z`, `0-9` and `-`, starting and ending with a
/// letter or digit. `None` when it is one.
pub fn dns_label_problem(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > 63 {
        return Some(format!("must be at most 63 characters, has {}", s.len()));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Some(format!(
            "{c:?} is not allowed (only lower-case letters, digits and '-')"
        ));
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Some("must start and end with a letter or digit".into());
    }
    None
}

/// Why a NumaflowController's `instanceID` can't be used, naming the field `at`: it must be
/// absent, empty (no instance) or a DNS label, as the CRD's pattern requires. An object stored
/// before that pattern existed may hold anything, and the ID becomes part of object names,
/// labels and the Numaflow controller's configuration.
pub fn instance_id_problem(instance_id: Option<&str>, at: &str) -> Option<String> {
    let id = instance_id.filter(|id| !id.is_empty())?;
    dns_label_problem(id)
        .map(|problem| format!("{at}: {id:?} is not a valid instance ID: {problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_child_is_index_zero() {
        assert_eq!(allocate_index(None), (0, 1));
        assert_eq!(child_name("my-pipeline", 0), "my-pipeline-0");
    }

    #[test]
    fn counter_advances_and_wraps_after_999() {
        assert_eq!(allocate_index(Some(5)), (5, 6));
        assert_eq!(allocate_index(Some(998)), (998, 999));
        // A live child's name is skipped, and the count moves past it.
        let taken = |n: &str| n == "p-0" || n == "p-1";
        assert_eq!(
            super::allocate_free("p", None, taken),
            Some(("p-2".into(), 3))
        );
        assert_eq!(
            super::allocate_free("p", Some(5), taken),
            Some(("p-5".into(), 6))
        );
        assert_eq!(super::allocate_free("p", None, |_| true), None);
        assert_eq!(allocate_index(Some(999)), (999, 0));
    }

    #[test]
    fn a_count_behind_a_live_child_moves_past_it() {
        let live = |n: &str| n == "isb-8" || n == "isb-9";
        assert_eq!(super::count_past_live("isb", Some(8), live), Some(10));
        assert_eq!(super::count_past_live("isb", Some(10), live), Some(10));
        assert_eq!(
            super::count_past_live("isb", None, |n| n == "isb-0"),
            Some(1)
        );
        assert_eq!(super::count_past_live("isb", None, |_| false), None);
        // Wrapping: 999 live, the count moves to 0.
        assert_eq!(
            super::count_past_live("p", Some(999), |n| n == "p-999"),
            Some(0)
        );
    }

    #[test]
    fn out_of_range_counter_restarts_at_zero() {
        assert_eq!(allocate_index(Some(-4)), (0, 1));
        assert_eq!(allocate_index(Some(1000)), (0, 1));
        assert_eq!(allocate_index(Some(i32::MAX)), (0, 1));
    }

    #[test]
    fn rollout_name_strips_the_index() {
        assert_eq!(rollout_name_of_child("my-pipeline-12"), Some("my-pipeline"));
        assert_eq!(rollout_name_of_child("a-0"), Some("a"));
        assert_eq!(rollout_name_of_child("my-pipeline"), None);
        assert_eq!(rollout_name_of_child("my-pipeline-"), None);
        assert_eq!(rollout_name_of_child("my-pipeline-1a"), None);
        assert_eq!(rollout_name_of_child("-3"), None);
        assert_eq!(rollout_name_of_child("7"), None);
    }

    proptest! {
        #[test]
        fn allocation_stays_in_range(n in proptest::option::of(any::<i32>())) {
            let (index, next) = allocate_index(n);
            prop_assert!((0..=MAX_INDEX).contains(&index));
            prop_assert!((0..=MAX_INDEX).contains(&next));
            prop_assert_eq!(next, (index + 1) % (MAX_INDEX + 1));
        }

        #[test]
        fn child_name_round_trips(rollout in "[a-z]([-a-z0-9]{0,30}[a-z])?", n in 0..=MAX_INDEX) {
            let child = child_name(&rollout, n);
            prop_assert_eq!(rollout_name_of_child(&child), Some(rollout.as_str()));
        }
    }

    #[test]
    fn dns_labels() {
        for ok in ["a", "0", "blue-3", &"a".repeat(63)] {
            assert_eq!(dns_label_problem(ok), None, "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "a\n---", &"a".repeat(64)] {
            assert!(dns_label_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn instance_ids_are_empty_or_dns_labels() {
        assert_eq!(instance_id_problem(None, "spec.instanceID"), None);
        assert_eq!(instance_id_problem(Some(""), "spec.instanceID"), None);
        assert_eq!(instance_id_problem(Some("abc-1"), "spec.instanceID"), None);
        let injected = "x\n---\napiVersion: v1\nkind: Secret";
        let msg = instance_id_problem(Some(injected), "spec.instanceID").unwrap();
        assert!(
            msg.starts_with("spec.instanceID: \"x\\n---"),
            "names the field and shows the value escaped: {msg}"
        );
        assert!(instance_id_problem(Some(" "), "spec.controller.instanceID").is_some());
    }
}
