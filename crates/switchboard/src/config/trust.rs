//! The `trust:` section: tool pins and quarantine (`switchboard_core::trust`), and where its
//! state file lives.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use switchboard_core::trust::{NewTools, TrustConfig, TrustMode};

use crate::trust_cli::TrustArgs;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TrustSection {
    pub(crate) mode: Option<ModeKey>,
    pub(crate) new_tools: Option<NewToolsKey>,
    /// Relative to the config file's directory.
    pub(crate) state_file: Option<PathBuf>,
    /// Who may approve over HTTP (`TrustConfig::approvers`).
    #[serde(default)]
    pub(crate) approvers: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ModeKey {
    /// A changed tool is quarantined until approved.
    Pin,
    /// A changed tool is served, logged and audited.
    Warn,
    /// No pins.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum NewToolsKey {
    Allow,
    Quarantine,
}

impl From<ModeKey> for TrustMode {
    fn from(m: ModeKey) -> Self {
        match m {
            ModeKey::Pin => TrustMode::Pin,
            ModeKey::Warn => TrustMode::Warn,
            ModeKey::Off => TrustMode::Off,
        }
    }
}

/// `serve`'s trust settings, and whether the operator asked for trust (the section or a
/// flag): that puts even one backend through the aggregating catalog, where pins are kept.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrustSpec {
    pub(crate) config: TrustConfig,
    pub(crate) explicit: bool,
}

/// The settings from the file's section and the flags (a flag wins); the state file
/// defaults to `<config stem>.trust.json` beside the config file.
pub(crate) fn resolve(
    section: Option<&TrustSection>,
    flags: &TrustArgs,
    config: &Path,
) -> TrustSpec {
    let dir = config.parent().unwrap_or(Path::new("."));
    let mode = flags
        .trust
        .or(section.and_then(|s| s.mode))
        .map(TrustMode::from)
        .unwrap_or_default();
    let new_tools = match section.and_then(|s| s.new_tools) {
        Some(NewToolsKey::Quarantine) => NewTools::Quarantine,
        _ => NewTools::Allow,
    };
    let state_file = flags
        .trust_state
        .clone()
        .or_else(|| {
            section
                .and_then(|s| s.state_file.as_ref())
                .map(|p| dir.join(p))
        })
        .unwrap_or_else(|| default_state_file(config));
    TrustSpec {
        config: TrustConfig {
            mode,
            new_tools,
            state_file: Some(state_file),
            approvers: section.map(|s| s.approvers.clone()).unwrap_or_default(),
        },
        explicit: section.is_some() || flags.trust.is_some() || flags.trust_state.is_some(),
    }
}

/// `<dir>/<stem>.trust.json` for the config file `<dir>/<stem>.<ext>`: per config file, so
/// two gateways with different configs never share pins (a backend name means something
/// only in its config).
pub(crate) fn default_state_file(config: &Path) -> PathBuf {
    let stem = config
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "switchboard".to_owned());
    config.with_file_name(format!("{stem}.trust.json"))
}
