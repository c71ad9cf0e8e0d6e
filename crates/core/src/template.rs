//! Templating of child specs, child metadata and rider definitions (api.md §9).
//!
//! Semantics follow the reference's `fasttemplate` use exactly, because users' manifests depend
//! on them:
//! - a tag is the text between `{{` and the next `}}`, matched **literally** (no whitespace
//!   trimming: `{{ .pipeline-name }}` is not `{{.pipeline-name}}`);
//! - a known tag is replaced by its value, inserted raw (no JSON escaping);
//! - an **unknown** tag is replaced by the empty string (reference compatibility: keeping it
//!   would change the objects existing users get);
//! - a `{{` without a later `}}` is an error.

use serde_json::Value;

/// Why templating failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{{` with no `}}` after it.
    #[error(
        "unterminated template tag: \"{{{{\" at byte {offset} has no closing \"}}}}\" (near {snippet:?})"
    )]
    Unterminated { offset: usize, snippet: String },
    /// Substituted values made the JSON text invalid (e.g. a value containing a quote).
    #[error("templated JSON is not valid: {message}")]
    InvalidJson { message: String },
}

impl TemplateError {
    /// Stable short reason for conditions, events and metrics.
    pub fn reason(&self) -> &'static str {
        "InvalidTemplate"
    }
}

/// The tag → value pairs available to a template. Keys include the leading dot, as written
/// between the braces (`.pipeline-name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateVars(Vec<(String, String)>);

impl TemplateVars {
    /// No variables: every tag renders empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// `.pipeline-name`, `.pipeline-namespace`.
    pub fn pipeline(name: &str, namespace: &str) -> Self {
        Self::new()
            .with(".pipeline-name", name)
            .with(".pipeline-namespace", namespace)
    }

    /// Pipeline variables plus `.vertex-name` (per-vertex riders only).
    pub fn pipeline_vertex(name: &str, namespace: &str, vertex: &str) -> Self {
        Self::pipeline(name, namespace).with(".vertex-name", vertex)
    }

    /// `.monovertex-name`, `.monovertex-namespace`.
    pub fn monovertex(name: &str, namespace: &str) -> Self {
        Self::new()
            .with(".monovertex-name", name)
            .with(".monovertex-namespace", namespace)
    }

    /// `.isbsvc-name`, `.isbsvc-namespace`.
    pub fn isbsvc(name: &str, namespace: &str) -> Self {
        Self::new()
            .with(".isbsvc-name", name)
            .with(".isbsvc-namespace", namespace)
    }

    /// Adds (or replaces) a variable.
    pub fn with(mut self, key: &str, value: &str) -> Self {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.to_string(),
            None => self.0.push((key.to_string(), value.to_string())),
        }
        self
    }

    /// The value of a tag, if known.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

const OPEN: &str = "{{";
const CLOSE: &str = "}}";

/// Substitutes every `{{tag}}` in `input`.
pub fn render_str(input: &str, vars: &TemplateVars) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after_open = &rest[start + OPEN.len()..];
        let Some(end) = after_open.find(CLOSE) else {
            let offset = input.len() - rest.len() + start;
            return Err(TemplateError::Unterminated {
                offset,
                snippet: rest[start..].chars().take(40).collect(),
            });
        };
        if let Some(value) = vars.get(&after_open[..end]) {
            out.push_str(value);
        }
        rest = &after_open[end + CLOSE.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Templates a JSON value the way the reference does: serialise to JSON text, substitute, parse.
/// Values are inserted into the JSON text unescaped, so a value containing `"` yields an error.
pub fn render_json(value: &Value, vars: &TemplateVars) -> Result<Value, TemplateError> {
    let text = value.to_string();
    if !text.contains(OPEN) {
        return Ok(value.clone());
    }
    let rendered = render_str(&text, vars)?;
    serde_json::from_str(&rendered).map_err(|e| TemplateError::InvalidJson {
        message: format!("{e} in {rendered:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn vars() -> TemplateVars {
        TemplateVars::pipeline("my-pipeline-3", "ns1")
    }

    #[test]
    fn known_tags_are_replaced() {
        assert_eq!(
            render_str("{{.pipeline-namespace}}-{{.pipeline-name}}", &vars()).unwrap(),
            "ns1-my-pipeline-3"
        );
    }

    #[test]
    fn unknown_tags_render_empty() {
        assert_eq!(render_str("a{{.nope}}b", &vars()).unwrap(), "ab");
        assert_eq!(render_str("a{{}}b", &vars()).unwrap(), "ab");
    }

    #[test]
    fn tags_are_matched_literally_without_trimming() {
        assert_eq!(render_str("x{{ .pipeline-name }}y", &vars()).unwrap(), "xy");
    }

    #[test]
    fn tag_runs_to_the_first_close_after_the_open() {
        // The tag text is "{.pipeline-name" (unknown), so nothing but the trailing "}" remains.
        assert_eq!(render_str("{{{.pipeline-name}}}", &vars()).unwrap(), "}");
        // A second "{{" inside a tag is part of the tag text.
        assert_eq!(render_str("{{a{{.pipeline-name}}!", &vars()).unwrap(), "!");
    }

    #[test]
    fn unterminated_open_is_an_error_with_its_offset() {
        let err = render_str("abc{{.pipeline-name", &vars()).unwrap_err();
        assert_eq!(
            err,
            TemplateError::Unterminated {
                offset: 3,
                snippet: "{{.pipeline-name".into()
            }
        );
        assert!(err.to_string().contains("byte 3"), "{err}");
        assert_eq!(err.reason(), "InvalidTemplate");
        // An unterminated open after a complete tag is still reported at its own offset.
        let err = render_str("{{.pipeline-name}}{{", &vars()).unwrap_err();
        assert!(matches!(
            err,
            TemplateError::Unterminated { offset: 18, .. }
        ));
    }

    #[test]
    fn stray_close_is_literal() {
        assert_eq!(render_str("a}}b", &vars()).unwrap(), "a}}b");
    }

    #[test]
    fn constructors_define_reference_keys() {
        let v = TemplateVars::pipeline_vertex("p", "n", "v");
        assert_eq!(v.get(".pipeline-name"), Some("p"));
        assert_eq!(v.get(".pipeline-namespace"), Some("n"));
        assert_eq!(v.get(".vertex-name"), Some("v"));
        let m = TemplateVars::monovertex("m", "n");
        assert_eq!(m.get(".monovertex-name"), Some("m"));
        assert_eq!(m.get(".monovertex-namespace"), Some("n"));
        assert_eq!(m.get(".pipeline-name"), None);
        let i = TemplateVars::isbsvc("i", "n");
        assert_eq!(i.get(".isbsvc-name"), Some("i"));
        assert_eq!(i.get(".isbsvc-namespace"), Some("n"));
        assert_eq!(
            TemplateVars::new().with("k", "1").with("k", "2").get("k"),
            Some("2")
        );
    }

    #[test]
    fn render_json_templates_keys_and_values() {
        let input = json!({
            "metadata": {"annotations": {"a": "{{.pipeline-namespace}}-{{.pipeline-name}}"}},
            "{{.pipeline-name}}": [1, "{{.x}}"]
        });
        let out = render_json(&input, &vars()).unwrap();
        assert_eq!(
            out,
            json!({
                "metadata": {"annotations": {"a": "ns1-my-pipeline-3"}},
                "my-pipeline-3": [1, ""]
            })
        );
    }

    #[test]
    fn render_json_rejects_values_that_break_json() {
        let v = TemplateVars::new().with(".q", "a\"b");
        let err = render_json(&json!({"k": "{{.q}}"}), &v).unwrap_err();
        assert!(matches!(err, TemplateError::InvalidJson { .. }), "{err}");
        assert!(err.to_string().starts_with("templated JSON is not valid"));
    }

    #[test]
    fn render_json_values_are_inserted_raw() {
        // Raw insertion means a value can even inject JSON structure (reference behaviour).
        let v = TemplateVars::new().with(".n", "5");
        assert_eq!(
            render_json(&json!({"k": "{{.n}}"}), &v).unwrap(),
            json!({"k": "5"})
        );
    }

    proptest! {
        #[test]
        fn text_without_open_is_unchanged(s in "[^{]*") {
            prop_assert_eq!(render_str(&s, &vars()).unwrap(), s);
        }

        #[test]
        fn never_panics(s in ".*") {
            let _ = render_str(&s, &vars());
        }

        #[test]
        fn known_tag_between_plain_text(a in "[a-z ]*", b in "[a-z ]*") {
            let input = format!("{a}{{{{.pipeline-name}}}}{b}");
            prop_assert_eq!(render_str(&input, &vars()).unwrap(), format!("{a}my-pipeline-3{b}"));
        }

        #[test]
        fn json_without_tags_round_trips(k in "[a-z]{1,8}", s in "[^{}]*", n in any::<i64>()) {
            let v = json!({k: [s, n, null, true]});
            prop_assert_eq!(render_json(&v, &vars()).unwrap(), v);
        }
    }
}
