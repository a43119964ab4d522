//! `--trust`/`--trust-state` (on `run` and `serve`) and `switchboard trust list|approve|revoke`,
//! which edits the state file a running gateway watches (`switchboard_core::trust::store`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};

use switchboard_core::trust::store;

use crate::config::trust::ModeKey;

/// The trust flags; the config file's `trust:` section where not given.
#[derive(Debug, Clone, Args)]
pub(crate) struct TrustArgs {
    /// Tool pins (`serve`): a tool whose definition changed since it was pinned is
    /// quarantined (`pin`, the default), served with a warning (`warn`), or not checked.
    #[arg(long, value_enum)]
    pub(crate) trust: Option<ModeKey>,
    /// The pins' state file. Default: `<config stem>.trust.json` beside the config file.
    #[arg(long, value_name = "PATH")]
    pub(crate) trust_state: Option<PathBuf>,
}

impl TrustArgs {
    /// Whether either flag was given (`run` warns: it does not pin).
    pub(crate) fn given(&self) -> bool {
        self.trust.is_some() || self.trust_state.is_some()
    }
}

/// `switchboard trust`.
#[derive(Debug, Args)]
pub(crate) struct TrustCmdArgs {
    /// The config file whose state file to edit (its `trust.stateFile`, else
    /// `<stem>.trust.json` beside it).
    #[arg(long, value_name = "FILE", required_unless_present = "state")]
    pub(crate) config: Option<PathBuf>,
    /// The state file itself.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    pub(crate) state: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) action: TrustAction,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TrustAction {
    /// Every pin and every definition waiting for approval.
    List,
    /// Pin the definition the gateway last saw (pending) for BACKEND/TOOL; a running gateway
    /// serves it again within a second.
    Approve {
        #[arg(value_name = "BACKEND/TOOL")]
        tool: String,
    },
    /// Forget BACKEND/TOOL's pin (it is new at next sight).
    Revoke {
        #[arg(value_name = "BACKEND/TOOL")]
        tool: String,
    },
}

/// Runs `switchboard trust`.
pub(crate) fn run(args: &TrustCmdArgs) -> anyhow::Result<()> {
    let path = state_path(args)?;
    match &args.action {
        TrustAction::List => list(&path),
        TrustAction::Approve { tool } => {
            check_key(tool)?;
            let now = now();
            let (ok, _, _) = store::update(&path, |f| {
                let ok = f.approve(tool, &now);
                (ok, ok)
            })?;
            anyhow::ensure!(
                ok,
                "nothing is pending for {tool} in {} (see `switchboard trust list`)",
                path.display()
            );
            println!("approved {tool}");
            Ok(())
        }
        TrustAction::Revoke { tool } => {
            check_key(tool)?;
            let (ok, _, _) = store::update(&path, |f| {
                let ok = f.revoke(tool);
                (ok, ok)
            })?;
            anyhow::ensure!(ok, "{tool} has no pin in {}", path.display());
            println!("revoked {tool}");
            Ok(())
        }
    }
}

fn list(path: &Path) -> anyhow::Result<()> {
    let state = store::load(path)?;
    println!("state file: {}", path.display());
    println!("pinned ({}):", state.pins.len());
    for (key, pin) in &state.pins {
        println!(
            "  {key}  sha256:{}  since {}",
            short(&pin.digest),
            pin.pinned_at
        );
    }
    println!("pending ({}):", state.pending.len());
    for (key, p) in &state.pending {
        let held = if p.quarantined {
            "QUARANTINED"
        } else {
            "served (warn)"
        };
        println!(
            "  {key}  {held}  {}{}  seen {}  sha256:{}",
            p.reason,
            if p.changed.is_empty() {
                String::new()
            } else {
                format!(" ({})", p.changed.join(", "))
            },
            p.seen_at,
            short(&p.digest)
        );
        if let Some(description) = p.definition.as_ref().and_then(|d| d.get("description")) {
            println!("      description: {}", clip(&description.to_string(), 200));
        }
    }
    Ok(())
}

fn state_path(args: &TrustCmdArgs) -> anyhow::Result<PathBuf> {
    if let Some(p) = &args.state {
        return Ok(p.clone());
    }
    let config = args
        .config
        .as_ref()
        .context("--config or --state is required")?;
    let text = std::fs::read_to_string(config)
        .with_context(|| format!("cannot read {}", config.display()))?;
    let doc: serde_json::Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{} is not valid YAML", config.display()))?;
    let dir = config.parent().unwrap_or(Path::new("."));
    Ok(match doc["trust"]["stateFile"].as_str() {
        Some(p) => dir.join(p),
        None => crate::config::trust::default_state_file(config),
    })
}

fn check_key(key: &str) -> anyhow::Result<()> {
    match key.split_once('/') {
        Some((b, t)) if !b.is_empty() && !t.is_empty() => Ok(()),
        _ => anyhow::bail!("expected BACKEND/TOOL, got `{key}`"),
    }
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    format!("{}…", s.chars().take(n).collect::<String>())
}

fn now() -> String {
    switchboard_core::trust::now()
}
