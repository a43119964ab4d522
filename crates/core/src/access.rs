//! Who may do what: the caller's identity ([`Principal`]), the authorization seam
//! ([`Authorizer`], implemented with Cedar in `switchboard-policy`), per-principal and per-tool
//! rate limits, and the audit record of every operation.
//!
//! One admission point for every path: requests of both eras (`Gateway::handle`, `pipeline`,
//! which the HTTP+SSE transport uses too) and client notifications all call [`Access::admit`] before
//! anything reaches the backend or a routing table, and [`Admitted::finish`] after, which filter list
//! results (and discovery capability flags) to what the caller may use and write the audit
//! line. A forbidden tool is therefore indistinguishable from a missing one in every list, on
//! both eras, including the re-lists a client does after `list_changed`.
//!
//! Aggregating (`serve`), exposed names can shift at run time, so the policy also gets each
//! target's [`Origin`] (backend and the backend's own name) from the merged lists
//! ([`Origins`], answered by `vmcp`): the request's from the routing decision itself, each
//! list item's from the current view. Routing then confirms it reached that same origin
//! ([`Admitted::confirm_route`]). Audit lines of routed operations name the backend.
//!
//! The audit log also records what is not an operation on the backend: session lifecycle
//! (`initialize`, through [`Access::audit_only`], which neither gates nor counts it, and each
//! session's end, [`Access::record_session_end`]) and refused authentication (HTTP 401,
//! [`Access::record_unauthenticated`]). Every line is built here, by one builder, with the
//! same head: `time`, `principal` (absent when nobody was authenticated), `session` and `era`
//! (MCP lines), `method` (a client's JSON-RPC method) or `event` (a gateway event), `outcome`.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use switchboard_wire::{Message, MessageKind};

use crate::audit::AuditLog;
pub use crate::principal::Principal;
use crate::ratelimit::RateLimiter;
use crate::session::SessionId;
use crate::BackendId;
use crate::CoreError;

mod admitted;
mod decide;
mod gate;
mod lines;
mod workflow;

pub(crate) use admitted::Admitted;
use decide::{allowed, decide};
pub(crate) use lines::session_label;
use lines::{line, truncate};
pub(crate) use workflow::RunScope;

/// What an action is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A tool, by name.
    Tool(String),
    /// A resource, by exact URI.
    Resource(String),
    /// A resource template, by its `uriTemplate`.
    ResourceTemplate(String),
    /// A prompt, by name.
    Prompt(String),
    /// The server as a whole (list operations, methods without a narrower target).
    Server,
}

impl Target {
    /// A resource by URI, its scheme lower-cased (`catalog::canonical_scheme`): a scheme is
    /// case-insensitive, so every case of it names one resource, for routing and policy alike.
    pub(crate) fn resource(uri: String) -> Target {
        match crate::catalog::canonical_scheme(&uri) {
            std::borrow::Cow::Owned(canonical) => Target::Resource(canonical),
            std::borrow::Cow::Borrowed(_) => Target::Resource(uri),
        }
    }

    /// The name or URI the client used, if the target has one.
    pub(crate) fn name(&self) -> Option<&str> {
        match self {
            Target::Tool(n) | Target::Prompt(n) => Some(n),
            Target::Resource(u) | Target::ResourceTemplate(u) => Some(u),
            Target::Server => None,
        }
    }

    pub(super) fn audit(&self) -> Value {
        match self {
            Target::Tool(n) => json!({ "tool": n }),
            Target::Resource(u) => json!({ "resource": u }),
            Target::ResourceTemplate(u) => json!({ "resourceTemplate": u }),
            Target::Prompt(n) => json!({ "prompt": n }),
            Target::Server => Value::Null,
        }
    }
}

/// Where an aggregated target is served (`switchboard serve`): the backend, and that
/// backend's own name (or URI) for it. An exposed name can change at run time (under
/// `conditional`, a prefix appears when another backend adds a colliding name); this pair
/// does not, so a policy or an audit line that names it names one tool for good.
///
/// Not aggregating (`run`), there is none: the one backend's names are the exposed names,
/// and policies and audit lines stay exactly what they were before origins existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The backend serving the target.
    pub backend: BackendId,
    /// The backend's own name for it (a URI is never renamed, so it is the URI).
    pub original: String,
}

/// The authorization decision point. Implementations must fail closed: an evaluation error is
/// a denial.
pub trait Authorizer: Send + Sync + fmt::Debug {
    /// Whether `principal` may perform `action` (`call_tool`, `list_tools`, … or, for methods
    /// the gateway does not classify, the method name) on `target`.
    fn is_allowed(&self, principal: &Principal, action: &str, target: &Target) -> bool;

    /// [`Self::is_allowed`], knowing where `target` is served when the gateway aggregates
    /// (`origin`; `None` otherwise, and for targets that name no backend's item). The
    /// gateway always asks this one; the default ignores the origin, for authorizers that
    /// only know exposed names.
    fn is_allowed_at(
        &self,
        principal: &Principal,
        action: &str,
        target: &Target,
        origin: Option<&Origin>,
    ) -> bool {
        let _ = origin;
        self.is_allowed(principal, action, target)
    }

    /// The policy in force now, when this one can be replaced while serving (hot reload):
    /// one request is judged by one policy from admission to its list filtering. `None`
    /// (the default): this one never changes.
    fn current(&self) -> Option<Arc<dyn Authorizer>> {
        None
    }
}

/// Where targets are served right now: the aggregating gateway's merged lists
/// (`vmcp::Vmcp`). Admission asks it for the request's target, list filtering for each item.
pub(crate) trait Origins: Send + Sync + fmt::Debug {
    /// Where `msg` routes now, for its `target` (the exposed name or URI), if it routes by
    /// name or URI and the merged lists hold it.
    fn of_request(&self, msg: &Message<'_>, target: &Target) -> Option<Origin>;
    /// The backend and original name behind a listed item, if the merged lists hold it.
    fn of_item(&self, target: &Target) -> Option<Origin>;
    /// Whether `tool` is the gateway's own (tool search), served by no backend.
    fn own_tool(&self, _tool: &str) -> bool {
        false
    }
    /// Whether a forbidden tool must look like a missing one (tool search): its call then
    /// counts against the rate limits as an unknown name's does.
    fn masks_denials(&self) -> bool {
        false
    }
    /// Whether `tool` is a composite (`workflow`): listed, served by no backend, so the
    /// policy judges it without an origin, as its call is judged.
    fn composite(&self, _tool: &str) -> bool {
        false
    }
    /// Whether `judge` holds for any item the merged lists hold of `backend` (with its
    /// origin); the items after the first it holds for are not looked at.
    fn any_item_of(
        &self,
        _backend: &BackendId,
        _judge: &mut dyn FnMut(Target, Origin) -> bool,
    ) -> bool {
        false
    }
}

/// Authorization, rate limits and audit, all optional. The default admits everything and
/// records nothing.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// When set, every operation must be allowed by it (unknown methods are denied unless the
    /// policy names them), and lists are filtered.
    pub authorizer: Option<Arc<dyn Authorizer>>,
    /// Token buckets per principal and per (principal, tool).
    pub limits: Option<Arc<RateLimiter>>,
    /// One JSON line per operation.
    pub audit: Option<Arc<AuditLog>>,
}

/// Why a request was refused before it had a principal, as its audit line says. It carries
/// only fixed strings, so no credential or header value can reach the line through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unauthenticated {
    /// No credential (or more than one).
    Missing,
    /// A credential that is not valid, and the kind of failure (a fixed, non-secret text).
    Invalid(&'static str),
}

/// Which era path an operation came in on (audit and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    Legacy,
    Modern,
}

impl Access {
    /// Whether any of authorization, rate limiting or audit is on.
    fn active(&self) -> bool {
        self.authorizer.is_some() || self.limits.is_some() || self.audit.is_some()
    }

    /// The policy a request is judged by, from admission to the end (see
    /// [`Authorizer::current`]).
    pub(crate) fn policy_now(&self) -> Option<Arc<dyn Authorizer>> {
        self.authorizer
            .as_ref()
            .map(|a| a.current().unwrap_or_else(|| a.clone()))
    }

    /// Whether an authorization policy is configured.
    pub(crate) fn has_policy(&self) -> bool {
        self.authorizer.is_some()
    }

    /// Whether a request must be authorized before it is handled ([`Self::authorize`]) rather
    /// than only by the request path's admission: when its answer is a stream (`streamed`: a
    /// denial must be a plain 403, not an event on a 200 stream), or when it may be forwarded
    /// to another replica (`replicated`: denied here, not there). Otherwise deciding early
    /// would evaluate the policy twice for the same answer.
    pub(crate) fn decides_early(streamed: bool, replicated: bool) -> bool {
        streamed || replicated
    }

    /// Whether [`Self::authorize`] has anything to judge for `msg`: a policy is configured,
    /// and `msg` is not a `tools/call` under tool search (`tool_search`), where a forbidden
    /// tool is answered as an unknown one, on the request path: no early 403 may tell them
    /// apart.
    pub(crate) fn judges_early(&self, msg: &Message<'_>, tool_search: bool) -> bool {
        self.authorizer.is_some() && !(msg.method == Some("tools/call") && tool_search)
    }

    /// Whether the policy allows `msg` for `caller`, without consuming rate-limit tokens or
    /// writing an audit line: lets `http` answer a denial with a plain 403 before it commits to
    /// an SSE response. The request path's admission ([`Self::admit`]) decides again (and
    /// audits) either way.
    ///
    /// Aggregating, `origins` are the merged lists the request routes by, built first (as the
    /// request itself would), so this gate sees the same backend and original name as the
    /// real one.
    ///
    /// Only where the request path's own decision would come too late (see
    /// [`Self::decides_early`]), and only when [`Self::judges_early`]: elsewhere that one
    /// decision is the only one.
    pub(crate) fn authorize(
        &self,
        caller: &Principal,
        session: Option<&SessionId>,
        msg: &Message<'_>,
        origins: Option<&dyn Origins>,
        path: Path,
    ) -> Result<(), CoreError> {
        match decide(self.policy_now().as_deref(), caller, msg, origins).2 {
            // A hidden item is refused on the request path, in the answer's own delivery,
            // exactly as a missing one is: refusing it here would differ (a JSON error where
            // the missing one gets an event on a stream).
            Ok(()) | Err(CoreError::UnknownName(..)) => return Ok(()),
            Err(_) => {}
        }
        // Denied: go through the admission point so the denial is audited exactly as it would
        // have been on the request path (a denial consumes no rate-limit tokens).
        self.admit(caller, session, msg, origins, path).map(drop)
    }

    /// Whether `principal` may do `action` on `target` (served at `origin`) under the
    /// current policy; true without one. For re-judging what was admitted under an older
    /// policy (subscriptions): no audit line, no rate limit.
    pub(crate) fn allows(
        &self,
        principal: &Principal,
        action: &str,
        target: &Target,
        origin: Option<&Origin>,
    ) -> bool {
        allowed(
            self.policy_now().as_deref(),
            principal,
            action,
            target,
            origin,
        )
    }

    /// Whether `who` may watch `uri` under the current policy: subscribe to it, and see it (a
    /// resource it may not read is hidden, whatever `subscribe` says), the merged lists'
    /// `origins` saying where it is served when aggregating.
    pub(crate) fn may_watch(
        &self,
        origins: Option<&dyn Origins>,
        who: &Principal,
        uri: &str,
    ) -> bool {
        let target = Target::resource(uri.to_owned());
        let origin = origins.and_then(|o| o.of_item(&target));
        self.allows(who, "subscribe", &target, origin.as_ref())
            && self.allows(who, "read_resource", &target, origin.as_ref())
    }

    /// Whether `caller`'s lists show `tool` (always, without a policy), the merged lists'
    /// `origins` saying where it is served when aggregating.
    pub(crate) fn shows_tool(
        &self,
        origins: Option<&dyn Origins>,
        caller: &Principal,
        tool: &str,
    ) -> bool {
        if !self.has_policy() {
            return true;
        }
        let target = Target::Tool(tool.to_owned());
        let origin = origins.and_then(|o| o.of_item(&target));
        let composite = origins.is_some_and(|o| o.composite(tool));
        (origins.is_none() || origin.is_some() || composite)
            && self.allows(caller, "call_tool", &target, origin.as_ref())
    }

    /// Whether `caller`'s lists show anything of `backend` (always, without a policy): what
    /// the gateway does on its own for a caller (a listen's warm processes, started as the
    /// caller) reaches no backend the caller may use nothing of.
    pub(crate) fn shows_any_of(
        &self,
        origins: &dyn Origins,
        caller: &Principal,
        backend: &BackendId,
    ) -> bool {
        !self.has_policy()
            || origins.any_item_of(backend, &mut |target, origin| {
                self.allows_listed(caller, &target, Some(&origin), false)
            })
    }

    /// Whether a list would show `target` to `principal`, with `origin` from the merged
    /// lists (aggregating, an item without one is hidden, as list filtering hides it, unless
    /// it is a composite tool: the gateway's own, judged without a backend as its call is).
    pub(crate) fn allows_listed(
        &self,
        principal: &Principal,
        target: &Target,
        origin: Option<&Origin>,
        composite: bool,
    ) -> bool {
        self.policy_now().is_none_or(|a| {
            (origin.is_some() || composite)
                && a.is_allowed_at(principal, gate::item_action(target), target, origin)
        })
    }

    /// Decides whether the operation may proceed. A refusal is audited here; an admission
    /// returns the handle that filters and audits the outcome. `origins`: where targets are
    /// served, when the gateway aggregates (the policy and the audit line see the request's
    /// backend and original name, list filtering each item's).
    pub(crate) fn admit<'a>(
        &'a self,
        principal: &'a Principal,
        session: Option<&SessionId>,
        msg: &'a Message<'a>,
        origins: Option<&'a dyn Origins>,
        path: Path,
    ) -> Result<Admitted<'a>, CoreError> {
        let mut admitted = Admitted {
            access: self,
            policy: self.policy_now(),
            principal,
            msg,
            path,
            // Only audit lines show the session: no allocation when nothing is recorded.
            session: session
                .filter(|_| self.audit.is_some())
                .map(|s| session_label(s.as_str())),
            target: Target::Server,
            origins,
            origin: None,
            guarded: None,
            started: Instant::now(),
            measured: false,
            done: !self.active(),
        };
        if admitted.done {
            return Ok(admitted);
        }
        let (target, origin, verdict) = decide(admitted.policy.as_deref(), principal, msg, origins);
        admitted.target = target;
        admitted.origin = origin;
        let counts = verdict.is_ok() || origins.is_some_and(|o| o.masks_denials());
        let limited = counts.then(|| match (&self.limits, msg.kind) {
            (Some(limits), MessageKind::Request) => {
                let tool = match &admitted.target {
                    Target::Tool(t) if msg.method == Some("tools/call") => Some(t.as_str()),
                    _ => None,
                };
                limits
                    .check(&principal.key(), tool)
                    .map_err(CoreError::RateLimited)
            }
            _ => Ok(()),
        });
        // A refusal by the rate limits is reported as such even for a forbidden target when
        // denials are masked: an unknown name would have been limited too.
        let verdict = match (verdict, limited) {
            (_, Some(Err(limited))) => Err(limited),
            (verdict, _) => verdict,
        };
        match verdict {
            Ok(()) => Ok(admitted),
            Err(e) => {
                let reason = match &e {
                    CoreError::RateLimited(_) => "rate_limited",
                    _ => "policy",
                };
                admitted.measure(if reason == "policy" { "denied" } else { reason });
                admitted.record("denied", Some(json!(reason)), None);
                Err(e)
            }
        }
    }

    /// An operation that is audited but neither gated by the policy nor counted by the rate
    /// limits: `initialize` (open to every caller, it only creates the caller's own session;
    /// it never went through [`Self::admit`]). Complete it with
    /// [`Admitted::finish_initialize`]; dropped unfinished, it is audited as cancelled.
    pub(crate) fn audit_only<'a>(
        &'a self,
        principal: &'a Principal,
        msg: &'a Message<'a>,
    ) -> Admitted<'a> {
        Admitted {
            access: self,
            policy: None,
            principal,
            msg,
            path: Path::Legacy,
            session: None,
            target: Target::Server,
            origins: None,
            origin: None,
            guarded: None,
            started: Instant::now(),
            measured: false,
            done: self.audit.is_none(),
        }
    }

    /// Audits the end of a session owned by `owner` (issuer, subject), by label, with why it
    /// ended (`deleted`, `expired`, …).
    pub(crate) fn record_session_end(&self, owner: &(String, String), id: &str, reason: &str) {
        let Some(audit) = &self.audit else {
            return;
        };
        let mut entry = line(
            Some((&owner.0, &owner.1)),
            Some((&session_label(id), "legacy")),
            ("event", "session_end"),
            "ended",
        );
        entry["reason"] = json!(reason);
        audit.record(&entry);
    }

    /// Audits a request refused for want of a valid credential (HTTP 401): the failure's
    /// kind, the HTTP method and the path (never the query, which may carry a session id).
    /// Nothing is recorded without an audit log.
    ///
    /// Any client can cause these, as fast as it can send: the audit queue is bounded and,
    /// when the writer falls behind, drops lines and counts them (`audit`), so a flood costs a
    /// bounded amount of memory and never blocks a request (it can crowd other lines out of a
    /// full queue, which the drop count then reports).
    pub fn record_unauthenticated(&self, failure: Unauthenticated, http_method: &str, path: &str) {
        let Some(audit) = &self.audit else {
            return;
        };
        let (class, detail) = match failure {
            Unauthenticated::Missing => ("missing_credential", None),
            Unauthenticated::Invalid(detail) => ("invalid_credential", Some(detail)),
        };
        let mut entry = line(None, None, ("event", "authentication"), "unauthenticated");
        entry["reason"] = json!(class);
        if let Some(detail) = detail {
            entry["detail"] = json!(detail);
        }
        entry["httpMethod"] = json!(truncate(http_method, 32).0);
        entry["path"] = json!(truncate(path, 256).0);
        audit.record(&entry);
    }

    /// Capabilities without the families the caller may not list (`tools` without
    /// `list_tools`, …), for `initialize` and `server/discover`.
    pub(crate) fn visible_capabilities(&self, principal: &Principal, caps: &Value) -> Value {
        visible_capabilities(self.policy_now().as_deref(), principal, caps)
    }
}

/// [`Access::visible_capabilities`] under `policy`.
pub(crate) fn visible_capabilities(
    policy: Option<&dyn Authorizer>,
    principal: &Principal,
    caps: &Value,
) -> Value {
    let Some(authorizer) = policy else {
        return caps.clone();
    };
    let mut caps = caps.clone();
    if let Some(map) = caps.as_object_mut() {
        for (family, action) in [
            ("tools", "list_tools"),
            ("prompts", "list_prompts"),
            ("resources", "list_resources"),
        ] {
            if map.contains_key(family)
                && !authorizer.is_allowed_at(principal, action, &Target::Server, None)
            {
                map.remove(family);
            }
        }
    }
    caps
}

#[cfg(test)]
mod tests;

/// The head of a tool trust audit line (`tool_quarantined`, `tool_changed`,
/// `tool_approved`): a gateway event, no principal or session (a backend's list caused it).
pub(crate) fn trust_line(event: &str, outcome: &str) -> Value {
    line(None, None, ("event", event), outcome)
}
