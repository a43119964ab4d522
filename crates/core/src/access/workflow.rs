//! Audit lines of composite tool runs (`core::workflow`): `workflow_started`,
//! `workflow_step_started`, `workflow_step_finished`, `workflow_finished`. Built here, with
//! the head every line shares; the run's inner `tools/call`s are audited as operations of
//! their own on the ordinary request path.

use serde_json::{json, Map, Value};

use super::lines::{line, truncate, REASON_LIMIT};
use super::{session_label, Access, Principal};
use crate::session::SessionId;

/// Where a run's lines say it happened.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunScope<'a> {
    pub(crate) principal: &'a Principal,
    pub(crate) session: Option<&'a SessionId>,
    pub(crate) modern: bool,
}

impl Access {
    /// One workflow audit line: `event`, `outcome`, the composite's name as `tool`, and
    /// `fields` (step id, status, attempt; strings cut to a bound).
    pub(crate) fn record_workflow(
        &self,
        scope: RunScope<'_>,
        event: &str,
        outcome: &str,
        tool: &str,
        fields: &[(&str, Value)],
    ) {
        let Some(audit) = &self.audit else {
            return;
        };
        let label = scope.session.map(|s| session_label(s.as_str()));
        let era = if scope.modern { "modern" } else { "legacy" };
        let mut entry = line(
            Some((&scope.principal.issuer, &scope.principal.subject)),
            Some((label.as_deref().unwrap_or("stateless"), era)),
            ("event", event),
            outcome,
        );
        entry["tool"] = json!(tool);
        let mut extra = Map::new();
        for (k, v) in fields {
            let v = match v {
                Value::String(s) => json!(truncate(s, REASON_LIMIT).0),
                other => other.clone(),
            };
            extra.insert((*k).to_owned(), v);
        }
        if let Value::Object(map) = &mut entry {
            map.extend(extra);
        }
        audit.record(&entry);
    }
}
