//! The USDE ConfigMap (`numaplane-controller-usde-config`, docs/compatibility.md): per child kind, the
//! spec fields whose change needs a recreate, risks data loss, or warrants a progressive upgrade.
//! Only parsing lives here; comparing fields is the strategy decision's job.

use super::ConfigError;
use super::value::{get, invalid, join, list, load_yaml, object, required_str, weak_bool};
use numaplane_api::Kind;
use std::collections::BTreeMap;

/// A dotted spec path; arrays on the way are traversed element-wise by the comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecField {
    pub path: String,
    /// Compare the whole subtree rather than a leaf (or, for a map, its presence).
    pub include_subfields: bool,
}

/// The three field lists of one child kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsdeKindConfig {
    pub recreate: Vec<SpecField>,
    pub data_loss: Vec<SpecField>,
    pub progressive: Vec<SpecField>,
}

/// The whole USDE config. A kind without an entry has empty lists (every change is a direct
/// apply).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsdeConfig {
    pub pipeline: UsdeKindConfig,
    pub interstepbufferservice: UsdeKindConfig,
    pub monovertex: UsdeKindConfig,
    pub numaflowcontroller: UsdeKindConfig,
}

impl UsdeConfig {
    /// The lists for a child kind.
    pub fn for_kind(&self, kind: Kind) -> &UsdeKindConfig {
        match kind {
            Kind::Pipeline => &self.pipeline,
            Kind::IsbService => &self.interstepbufferservice,
            Kind::MonoVertex => &self.monovertex,
            Kind::NumaflowController => &self.numaflowcontroller,
        }
    }

    /// The lists for a ConfigMap key naming a child kind, case-insensitively.
    fn slot(&mut self, key: &str) -> Option<&mut UsdeKindConfig> {
        Some(match Kind::from_child_kind(key)? {
            Kind::Pipeline => &mut self.pipeline,
            Kind::IsbService => &mut self.interstepbufferservice,
            Kind::MonoVertex => &mut self.monovertex,
            Kind::NumaflowController => &mut self.numaflowcontroller,
        })
    }
}

/// Parses the ConfigMap's `data`. Keys are lower-cased kinds; other keys are ignored.
pub fn parse_usde_configmap(data: &BTreeMap<String, String>) -> Result<UsdeConfig, ConfigError> {
    let mut cfg = UsdeConfig::default();
    for (key, text) in data {
        if let Some(slot) = cfg.slot(key) {
            *slot = parse_kind(text, key)?;
        }
    }
    Ok(cfg)
}

fn parse_kind(text: &str, key: &str) -> Result<UsdeKindConfig, ConfigError> {
    let doc = load_yaml(text, key)?;
    let Some(root) = object(&doc, key)? else {
        return Ok(UsdeKindConfig::default());
    };
    let fields = |name: &str| -> Result<Vec<SpecField>, ConfigError> {
        let at = join(key, name);
        list(get(root, name), &at)?
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let at = format!("{at}[{i}]");
                let m = object(item, &at)?
                    .ok_or_else(|| invalid(&at, "expected a mapping, got null"))?;
                Ok(SpecField {
                    path: required_str(m, "path", &join(&at, "path"))?.to_string(),
                    include_subfields: get(m, "includeSubfields")
                        .map(|v| weak_bool(v, &join(&at, "includeSubfields")))
                        .transpose()?
                        .unwrap_or(false),
                })
            })
            .collect()
    };
    Ok(UsdeKindConfig {
        recreate: fields("recreate")?,
        data_loss: fields("dataLoss")?,
        progressive: fields("progressive")?,
    })
}
