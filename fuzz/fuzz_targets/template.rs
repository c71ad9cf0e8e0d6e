//! Templating: never panics; text without a tag comes back unchanged; every JSON value is
//! rendered string by string, so a tag-free document is returned as it is.
#![no_main]

use libfuzzer_sys::fuzz_target;
use numaplane_core::template::{TemplateVars, render_json, render_str};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let vars = TemplateVars::new()
        .with(".pipeline-name", "p")
        .with(".pipeline-namespace", "ns");
    let rendered = render_str(text, &vars);
    if !text.contains("{{") {
        assert_eq!(rendered.as_deref(), Ok(text));
    }
    if let Ok(doc) = serde_json::from_str::<serde_json::Value>(text) {
        let out = render_json(&doc, &vars);
        if !doc.to_string().contains("{{") {
            assert_eq!(out.as_ref(), Ok(&doc));
        }
    }
});
