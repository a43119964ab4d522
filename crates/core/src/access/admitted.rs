//! An admitted operation: filters its result for the caller (lists, discovery flags) and
//! writes its audit line exactly once.

use std::sync::Arc;
use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use switchboard_wire::{
    codes, method, object_member, restore_response, with_member, ErrorObject, Message, RequestId,
};

use super::gate::{item_action, str_member, LISTS};
use super::lines::{client_info, line, reason_of, session_label, truncate, REASON_LIMIT};
use super::{Access, Origin, Origins, Path, Principal, Target};
use crate::destination::Name;
use crate::session::SessionId;
use crate::BackendId;
use crate::CoreError;

/// An admitted operation: filters its result and writes its audit line exactly once (on
/// completion, or as `cancelled` when the future owning it is dropped).
#[derive(Debug)]
pub(crate) struct Admitted<'a> {
    pub(super) access: &'a Access,
    /// The policy this request is judged by throughout (a reload may install another
    /// meanwhile: this request does not see it).
    pub(super) policy: Option<Arc<dyn crate::Authorizer>>,
    pub(super) principal: &'a Principal,
    pub(super) msg: &'a Message<'a>,
    pub(super) path: Path,
    pub(super) session: Option<String>,
    pub(super) target: Target,
    /// Where targets are served (aggregating only): the merged lists, read again when a list
    /// result is filtered and when the request is routed.
    pub(super) origins: Option<&'a dyn Origins>,
    /// Where the request's target was served when it was admitted.
    pub(super) origin: Option<Origin>,
    /// What the guardrails judged, for a method they check ([`Self::checked_by_guardrails`]):
    /// the route confirms it too.
    pub(super) guarded: Option<crate::guardrails::Checked<'a>>,
    pub(super) started: Instant,
    /// Counted in the request metrics (once, whatever the audit does).
    pub(super) measured: bool,
    pub(super) done: bool,
}

impl<'a> Admitted<'a> {
    /// Completes a request of either era: filters list results (and Modern discovery flags),
    /// counts it, audits it. A Legacy answer's error is read from its body (its status does
    /// not depend on it); a Modern one's from its error code.
    pub(crate) fn finish(
        mut self,
        result: Result<crate::Answer, CoreError>,
    ) -> Result<crate::Answer, CoreError> {
        // Filtered first, so that a list the policy cannot read is counted as the error it
        // becomes.
        let result = match self.done {
            true => result,
            false => result.map(|answer| match answer.error_code {
                Some(_) => answer,
                None => self.filtered(answer),
            }),
        };
        let id = self.msg.id.as_ref().map(RequestId::as_json);
        let legacy = self.path == Path::Legacy;
        self.measure(match &result {
            Ok(answer) if answer.error_code.is_some() => "error",
            Ok(answer) if legacy && crate::metrics::is_error_answer(&answer.body, id) => "error",
            Ok(_) => "ok",
            Err(e) => failure_word(e),
        });
        if self.done {
            return result;
        }
        self.record_result(result.as_ref().map(|a| a.body.as_slice()));
        result
    }

    /// Completes a notification.
    pub(crate) fn finish_notification(
        mut self,
        result: Result<(), CoreError>,
    ) -> Result<(), CoreError> {
        self.measure(result.as_ref().err().map_or("ok", failure_word));
        if !self.done {
            let reason = result.as_ref().err().map(|e| json!(e.to_string()));
            let outcome = if reason.is_some() { "error" } else { "allowed" };
            self.record(outcome, reason, None);
        }
        result
    }

    /// Completes an `initialize` (see [`Access::audit_only`]): `opened` is the session it
    /// opened, the protocol version the client was answered with and the answer, or why
    /// there is none. The line names the session by label and adds `protocolVersion` and the
    /// client's `clientInfo` (`client`: `name`, `version`, bounded).
    pub(crate) fn finish_initialize(
        mut self,
        opened: Result<(&SessionId, &str, &[u8]), &CoreError>,
    ) {
        self.measure(opened.as_ref().err().map_or("ok", |e| failure_word(e)));
        if self.done {
            return;
        }
        let client = client_info(self.msg);
        let (outcome, reason, version, response) = match opened {
            Ok((session, version, response)) => {
                self.session = Some(session_label(session.as_str()));
                ("allowed", None, Some(version), Some(response))
            }
            Err(e) => ("error", Some(reason_of(e)), None, None),
        };
        self.record_with(outcome, reason, response, |entry| {
            if let Some(version) = version {
                entry["protocolVersion"] = json!(version);
            }
            if let Some((client, cut)) = client {
                entry["client"] = client;
                if cut {
                    entry["clientTruncated"] = json!(true);
                }
            }
        });
    }

    /// Refuses to route the admitted request anywhere but where admission saw its target:
    /// aggregating, the merged lists can be rebuilt between admission and routing (another
    /// caller's refresh), and a name can then mean another backend's item (a `conditional`
    /// prefix that appeared or went away) that the policy was never asked about. The caller
    /// retries; the new lists are then the ones both steps read. Not aggregating, or without
    /// a policy, there is nothing to confirm.
    ///
    /// The guardrails' judgment is confirmed the same way, policy or not
    /// (`guardrails::Checked::confirm`).
    pub(crate) fn confirm_route(&self, backend: &BackendId, name: &Name) -> Result<(), CoreError> {
        if let Some(checked) = &self.guarded {
            checked.confirm(backend, name)?;
        }
        if self.origins.is_none() || self.policy.is_none() {
            return Ok(());
        }
        let Some(exposed) = self.target.name() else {
            return Ok(());
        };
        let original = match name {
            Name::AsClient => exposed,
            Name::Renamed(original) | Name::RenamedRef(original) => original,
        };
        let same = self
            .origin
            .as_ref()
            .is_some_and(|o| o.backend == *backend && o.original == original);
        if same {
            Ok(())
        } else {
            Err(CoreError::ChangedMeanwhile)
        }
    }

    /// Records what the guardrails judged the request's target to be (stage 3½), for
    /// [`Self::confirm_route`].
    pub(crate) fn checked_by_guardrails(&mut self, checked: crate::guardrails::Checked<'a>) {
        self.guarded = Some(checked);
    }

    /// `answer` with its list filtered for the caller; one the policy cannot read is an
    /// error instead (with its code, which a Modern caller's status and the metrics read).
    fn filtered(&self, mut answer: crate::Answer) -> crate::Answer {
        match self.filter_body(std::mem::take(&mut answer.body)) {
            Ok(body) => {
                answer.body = body;
                answer
            }
            Err(e) => match self.msg.id.as_ref() {
                Some(id) => crate::Answer::error(id, &e),
                None => {
                    answer.body = switchboard_wire::encode_error(None, &e);
                    answer
                }
            },
        }
    }

    /// A response body with its `result` filtered for the caller (lists, discovery). Bodies
    /// that are errors pass unchanged; one that does not parse is `Err`: not readable, so not
    /// filterable, never the whole list.
    fn filter_body(&self, body: Vec<u8>) -> Result<Vec<u8>, ErrorObject> {
        let Some(authorizer) = &self.policy else {
            return Ok(body);
        };
        let name = self.msg.method.unwrap_or_default();
        let list = LISTS.iter().find(|l| l.0 == name);
        if list.is_none() && name != method::DISCOVER {
            return Ok(body);
        }
        let Ok(parsed) = Message::parse(&body) else {
            return Err(unfilterable());
        };
        let (Some(id), Some(result)) = (parsed.id.as_ref(), parsed.result) else {
            return Ok(body);
        };
        // A result that reads two ways (a member, or an item's name, repeated in any
        // spelling) is not filtered: the filter would judge one reading, and a client could
        // take the other (a case-insensitive parser reads `Tools` as `tools`).
        if !switchboard_wire::keys_read_one_way(result) {
            return Err(unfilterable());
        }
        // The member in another case only (`Tools`): a loose parser takes it for the member
        // the filter did not find (review LOW of 0899a9f).
        let member = list.map_or("capabilities", |l| l.2);
        if switchboard_wire::has_key_variant(result.get(), member) {
            return Err(unfilterable());
        }
        let filtered = match list {
            Some(&(_, _, member, key, wrap)) => filter_list(result, member, |item| {
                // Named in another case only (`Name`): judged by a name a loose parser does
                // not read, so not shown.
                if switchboard_wire::has_key_variant(item.get(), key) {
                    return false;
                }
                let target = wrap(str_member(Some(item), key));
                if let (Some(origins), Target::Tool(name)) = (self.origins, &target) {
                    if origins.own_tool(name) {
                        return true;
                    }
                }
                // Aggregating, each item's origin comes from the current merged lists (what a
                // call of it would route by now); an item they no longer hold cannot be used,
                // so it is not shown (fail closed: no origin means no backend for a policy).
                // A composite is the gateway's own even when a backend lists a tool of the
                // same name (its call runs the composite): judged first, without an origin.
                let origin = match self.origins {
                    Some(origins) if matches!(&target, Target::Tool(n) if origins.composite(n)) => {
                        None
                    }
                    Some(origins) => match origins.of_item(&target) {
                        Some(origin) => Some(origin),
                        None => return false,
                    },
                    None => None,
                };
                authorizer.is_allowed_at(
                    self.principal,
                    item_action(&target),
                    &target,
                    origin.as_ref(),
                )
            }),
            None => object_member(result, "capabilities")
                .and_then(|c| serde_json::from_str::<Value>(c.get()).ok())
                .map(|caps| {
                    super::visible_capabilities(self.policy.as_deref(), self.principal, &caps)
                })
                .and_then(|caps| with_member(result, "capabilities", &caps.to_string())),
        };
        match filtered {
            Some(result) => Ok(reencode(id, &result)),
            // Nothing to filter: the answer holds no such member, or `null`.
            None if object_member(result, member).is_none_or(|m| m.get() == "null") => Ok(body),
            // A member that is there but cannot be filtered (not a list, not an object) is
            // not passed unfiltered.
            None => Err(unfilterable()),
        }
    }

    fn record_result(&mut self, result: Result<&[u8], &CoreError>) {
        match result {
            Ok(body) => {
                let error = Message::parse(body).ok().and_then(|m| {
                    m.error
                        .and_then(|e| object_member(e, "code"))
                        .map(|c| c.get().to_owned())
                });
                match error {
                    Some(code) => self.record(
                        "error",
                        Some(json!(format!("JSON-RPC error {code}"))),
                        Some(body),
                    ),
                    None => self.record("allowed", None, Some(body)),
                }
            }
            Err(CoreError::Cancelled) => self.record("error", Some(json!("cancelled")), None),
            Err(e) => self.record("error", Some(reason_of(e)), None),
        }
    }

    /// Counts the operation in the request metrics, once.
    pub(super) fn measure(&mut self, outcome: &'static str) {
        if !self.measured {
            self.measured = true;
            let method = self.msg.method.unwrap_or_default();
            let modern = self.path == Path::Modern;
            crate::metrics::request(method, modern, outcome, self.started.elapsed());
        }
    }

    pub(super) fn record(&mut self, outcome: &str, reason: Option<Value>, response: Option<&[u8]>) {
        self.record_with(outcome, reason, response, |_| {});
    }

    /// [`Self::record`], with `more` adding the operation's own members (before `reason`).
    fn record_with(
        &mut self,
        outcome: &str,
        reason: Option<Value>,
        response: Option<&[u8]>,
        more: impl FnOnce(&mut Value),
    ) {
        self.done = true;
        let Some(audit) = &self.access.audit else {
            return;
        };
        let era = match self.path {
            Path::Legacy => "legacy",
            Path::Modern => "modern",
        };
        let mut entry = line(
            Some((&self.principal.issuer, &self.principal.subject)),
            Some((self.session.as_deref().unwrap_or("stateless"), era)),
            ("method", self.msg.method.unwrap_or_default()),
            outcome,
        );
        entry["latencyMs"] =
            json!((self.started.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0);
        if let Some(id) = &self.msg.id {
            entry["id"] = json!(truncate(id.as_json(), 128).0);
        }
        let target = self.target.audit();
        if !target.is_null() {
            entry["target"] = target;
        }
        if let Some(origin) = &self.origin {
            entry["backend"] = json!(origin.backend.as_str());
            if self.target.name() != Some(origin.original.as_str()) {
                entry["original"] = json!(truncate(&origin.original, REASON_LIMIT).0);
            }
        }
        more(&mut entry);
        if let Some(reason) = reason {
            entry["reason"] = reason;
        }
        if let Some(limit) = audit.body_limit() {
            if let Some(params) = self.msg.params {
                let (text, cut) = truncate(params.get(), limit);
                entry["request"] = json!(text);
                if cut {
                    entry["requestTruncated"] = json!(true);
                }
            }
            if let Some(body) = response {
                let text = String::from_utf8_lossy(body);
                let (text, cut) = truncate(&text, limit);
                entry["response"] = json!(text);
                if cut {
                    entry["responseTruncated"] = json!(true);
                }
            }
        }
        audit.record(&entry);
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.measure("cancelled");
        if !self.done {
            self.record("error", Some(json!("cancelled")), None);
        }
    }
}

/// A failed operation's outcome word in the request metrics.
fn failure_word(e: &CoreError) -> &'static str {
    match e {
        CoreError::Cancelled => "cancelled",
        CoreError::Forbidden(_) => "denied",
        CoreError::RateLimited(_) => "rate_limited",
        _ => "failed",
    }
}

fn reencode(id: &RequestId, result: &RawValue) -> Vec<u8> {
    restore_response(id, "result", result.get())
}

/// `result` with `result[member]` (an array) reduced to the items `keep` accepts. Items are
/// copied verbatim. `None` when the member is absent or not an array.
/// The error answering a list or discovery result the policy could not filter.
fn unfilterable() -> ErrorObject {
    ErrorObject::new(
        codes::INTERNAL_ERROR,
        "Internal error: the answer could not be read to filter it",
    )
}

fn filter_list(
    result: &RawValue,
    member: &str,
    mut keep: impl FnMut(&RawValue) -> bool,
) -> Option<Box<RawValue>> {
    let items: Vec<&RawValue> = serde_json::from_str(object_member(result, member)?.get()).ok()?;
    let mut out = String::from("[");
    for item in items.into_iter().filter(|i| keep(i)) {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(item.get());
    }
    out.push(']');
    with_member(result, member, &out)
}
