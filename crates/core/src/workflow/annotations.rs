//! A composite's annotations are a floor computed from its steps' tools: read-only only if
//! every step's tool is, destructive if any non-read-only one is, open-world if any is, with
//! the MCP defaults for what a tool leaves out (`readOnlyHint: false`, `destructiveHint: true`,
//! `openWorldHint: true`). A composite whose configured annotations claim to be safer than that
//! floor is refused, naming the step that breaks the claim.

use serde_json::{Map, Value};

/// The three hints that say how safe a tool is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    pub read_only: bool,
    pub destructive: bool,
    pub open_world: bool,
}

impl Hints {
    /// A tool's hints from its `annotations` (absent members take the spec's defaults).
    pub fn of(annotations: Option<&Map<String, Value>>) -> Hints {
        let flag = |k: &str| annotations.and_then(|a| a.get(k)).and_then(Value::as_bool);
        let read_only = flag("readOnlyHint").unwrap_or(false);
        Hints {
            read_only,
            destructive: !read_only && flag("destructiveHint").unwrap_or(true),
            open_world: flag("openWorldHint").unwrap_or(true),
        }
    }
}

/// A composite claiming more safety than a step allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("composite tool `{composite}` claims {claim} but its step `{step}` calls `{tool}`, which is not")]
pub struct UnsafeClaim {
    pub composite: String,
    pub claim: &'static str,
    pub step: String,
    pub tool: String,
}

/// One step's tool and its hints.
#[derive(Debug)]
pub struct StepTool<'a> {
    pub step: &'a str,
    pub tool: &'a str,
    pub hints: Hints,
}

/// The floor over `steps` (a composite with no tool step is read-only and closed-world).
pub fn floor(steps: &[StepTool<'_>]) -> Hints {
    Hints {
        read_only: steps.iter().all(|s| s.hints.read_only),
        destructive: steps.iter().any(|s| s.hints.destructive),
        open_world: steps.iter().any(|s| s.hints.open_world),
    }
}

/// The annotations the composite is listed with: its configured ones, with each of the three
/// hints it leaves out set from the floor; refused when a configured hint is safer.
pub fn derive(
    composite: &str,
    configured: Option<&Map<String, Value>>,
    steps: &[StepTool<'_>],
) -> Result<Map<String, Value>, UnsafeClaim> {
    let flag = |k: &str| configured.and_then(|a| a.get(k)).and_then(Value::as_bool);
    let refuse = |claim: &'static str, breaks: &dyn Fn(&Hints) -> bool| {
        steps
            .iter()
            .find(|s| breaks(&s.hints))
            .map(|s| UnsafeClaim {
                composite: composite.to_owned(),
                claim,
                step: s.step.to_owned(),
                tool: s.tool.to_owned(),
            })
    };
    if flag("readOnlyHint") == Some(true) {
        if let Some(e) = refuse("readOnlyHint: true", &|h| !h.read_only) {
            return Err(e);
        }
    }
    if flag("destructiveHint") == Some(false) {
        if let Some(e) = refuse("destructiveHint: false", &|h| h.destructive) {
            return Err(e);
        }
    }
    if flag("openWorldHint") == Some(false) {
        if let Some(e) = refuse("openWorldHint: false", &|h| h.open_world) {
            return Err(e);
        }
    }
    let f = floor(steps);
    let mut out = configured.cloned().unwrap_or_default();
    for (key, value) in [
        ("readOnlyHint", f.read_only),
        ("destructiveHint", f.destructive),
        ("openWorldHint", f.open_world),
    ] {
        out.entry(key).or_insert(Value::Bool(value));
    }
    Ok(out)
}
