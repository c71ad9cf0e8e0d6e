//! Properties of [`decide`] over random specs shaped like the reference config's paths.

use super::tests::reference_config;
use super::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Keys that occur in the shipped USDE paths, so random specs hit listed fields.
const KEYS: &[&str] = &[
    "vertices",
    "udf",
    "container",
    "image",
    "env",
    "envFrom",
    "envfrom",
    "source",
    "kafka",
    "generator",
    "sink",
    "edges",
    "from",
    "to",
    "scale",
    "jetstream",
    "version",
    "replicas",
    "interStepBufferServiceName",
    "containerTemplate",
    "name",
    "value",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..4).prop_map(Value::from),
        (-3i64..4).prop_map(|n| json!(n as f64)),
        prop::sample::select(vec!["a", "b", "1"]).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(prop::sample::select(KEYS), inner, 0..4).prop_map(|m| {
                Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

fn spec() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(prop::sample::select(KEYS), json_value(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

fn user_strategy() -> impl Strategy<Value = UserStrategy> {
    prop::sample::select(vec![
        UserStrategy::Progressive,
        UserStrategy::PauseAndDrain,
        UserStrategy::NoStrategy,
    ])
}

fn kind() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "pipeline",
        "interstepbufferservice",
        "monovertex",
        "numaflowcontroller",
    ])
}

fn decide_specs(kind: &str, user: UserStrategy, desired: &Value, live: &Value) -> Decision {
    let empty = BTreeMap::new();
    decide(&DecisionInput {
        user_strategy: user,
        config: Kind::from_child_kind(kind).map(|k| reference_config().for_kind(k)),
        desired_spec: desired,
        live_spec: live,
        desired_labels: &empty,
        live_labels: &empty,
        desired_annotations: &empty,
        live_annotations: &empty,
        riders: &[],
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_spec_against_itself_is_no_op(s in spec(), user in user_strategy(), kind in kind()) {
        prop_assert_eq!(decide_specs(kind, user, &s, &s), Decision::no_op());
    }

    #[test]
    fn needing_an_update_is_symmetric(
        a in spec(), b in spec(), user in user_strategy(), kind in kind()
    ) {
        prop_assert_eq!(
            decide_specs(kind, user, &a, &b).needs_update(),
            decide_specs(kind, user, &b, &a).needs_update()
        );
        // Changed fields are the same whichever side is desired.
        prop_assert_eq!(
            decide_specs(kind, user, &a, &b).reasons.len(),
            decide_specs(kind, user, &b, &a).reasons.len()
        );
    }

    #[test]
    fn an_unrelated_field_is_at_most_a_direct_apply(
        s in spec(), extra in json_value(), user in user_strategy(), kind in kind()
    ) {
        let mut with = s.as_object().cloned().unwrap_or_else(Map::new);
        with.insert("unrelatedField".into(), extra);
        let with = Value::Object(with);
        let d = decide_specs(kind, user, &with, &s);
        if with["unrelatedField"].is_null() {
            // `"unrelatedField": null` is the same as leaving it out.
            prop_assert_eq!(d, Decision::no_op());
        } else {
            prop_assert_eq!(d.strategy, UpgradeStrategy::DirectApply);
            prop_assert!(!d.recreate);
        }
    }

    #[test]
    fn null_keys_anywhere_change_nothing(s in spec(), user in user_strategy(), kind in kind()) {
        prop_assert_eq!(decide_specs(kind, user, &with_nulls(&s), &s), Decision::no_op());
        prop_assert_eq!(decide_specs(kind, user, &s, &with_nulls(&s)), Decision::no_op());
    }

    #[test]
    fn integers_written_as_floats_change_nothing(s in spec(), user in user_strategy()) {
        prop_assert_eq!(decide_specs("pipeline", user, &as_floats(&s), &s), Decision::no_op());
    }
}

/// `v` with a `"nulled": null` key added to every object, as a Go-generated manifest has them.
fn with_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out: Map<String, Value> =
                m.iter().map(|(k, x)| (k.clone(), with_nulls(x))).collect();
            out.insert("nulled".into(), Value::Null);
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(with_nulls).collect()),
        other => other.clone(),
    }
}

fn as_floats(v: &Value) -> Value {
    match v {
        Value::Number(n) => n.as_i64().map_or_else(|| v.clone(), |i| json!(i as f64)),
        Value::Array(items) => Value::Array(items.iter().map(as_floats).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, x)| (k.clone(), as_floats(x))).collect())
        }
        other => other.clone(),
    }
}
