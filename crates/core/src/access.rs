//! Who may do what: the caller's identity ([`Principal`]), the authorization seam
//! ([`Authorizer`], implemented with Cedar in `switchboard-policy`), per-principal and per-tool
//! rate limits, and the audit record of every operation.
//!
//! One admission point for every path: Legacy requests ([`Gateway::request`], which the
//! HTTP+SSE transport uses too), Modern requests ([`Gateway::modern`]) and client
//! notifications all call [`Access::admit`] before anything reaches the backend or a routing
//! table, and [`Admitted::finish_legacy`] / [`Admitted::finish_modern`] after, which filter list
//! results (and discovery capability flags) to what the caller may use and write the audit
//! line. A forbidden tool is therefore indistinguishable from a missing one in every list, on
//! both eras, including the re-lists a client does after `list_changed`.
//!
//! The audit log also records what is not an operation on the backend: session lifecycle
//! (`initialize`, through [`Access::audit_only`], which neither gates nor counts it, and each
//! session's end, [`Access::record_session_end`]) and refused authentication (HTTP 401,
//! [`Gateway::audit_unauthenticated`]). Every line is built here, by one builder, with the
//! same head: `time`, `principal` (absent when nobody was authenticated), `session` and `era`
//! (MCP lines), `method` (a client's JSON-RPC method) or `event` (a gateway event), `outcome`.
//!
//! [`Gateway::request`]: crate::Gateway::request
//! [`Gateway::modern`]: crate::Gateway::modern
//! [`Gateway::audit_unauthenticated`]: crate::Gateway::audit_unauthenticated

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use switchboard_wire::{
    method, object_member, restore_response, with_member, Message, MessageKind, RequestId,
};

use crate::audit::AuditLog;
use crate::ratelimit::RateLimiter;
use crate::session::SessionId;
use crate::CoreError;

/// An authenticated caller: who issued its credential, and whom it names. Two principals are
/// the same owner exactly when both are equal (the credential itself takes no part: a caller
/// that refreshed its token is the same caller).
#[derive(Debug, Clone)]
pub struct Principal {
    /// Token issuer (`iss`), `api-key` for static keys, `anonymous` without authentication.
    pub issuer: String,
    /// Subject (`sub`), the key's name, or `anonymous`.
    pub subject: String,
    /// Verified JWT claims, for policies (`context.claims`). Empty for other credentials.
    pub claims: serde_json::Map<String, Value>,
    /// The verified JWT as presented, for a remote backend configured to receive its callers'
    /// tokens; `None` for API keys (a gateway secret, never a remote's) and anonymous callers.
    pub credential: Option<switchboard_upstream::Credential>,
}

impl PartialEq for Principal {
    fn eq(&self, other: &Self) -> bool {
        self.issuer == other.issuer && self.subject == other.subject && self.claims == other.claims
    }
}

impl Eq for Principal {}

impl Principal {
    /// The principal of every unauthenticated caller.
    pub fn anonymous() -> Self {
        Principal {
            issuer: "anonymous".to_owned(),
            subject: "anonymous".to_owned(),
            claims: serde_json::Map::new(),
            credential: None,
        }
    }

    /// Whether this is the principal of unauthenticated callers, whom nothing tells apart.
    pub fn is_anonymous(&self) -> bool {
        self.issuer == "anonymous" && self.subject == "anonymous"
    }

    /// Whether `self` and `other` are the same owner (issuer and subject).
    pub fn same_owner(&self, other: &Principal) -> bool {
        self.issuer == other.issuer && self.subject == other.subject
    }

    pub(crate) fn key(&self) -> String {
        format!("{}\u{0}{}", self.issuer, self.subject)
    }
}

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
    fn audit(&self) -> Value {
        match self {
            Target::Tool(n) => json!({ "tool": n }),
            Target::Resource(u) => json!({ "resource": u }),
            Target::ResourceTemplate(u) => json!({ "resourceTemplate": u }),
            Target::Prompt(n) => json!({ "prompt": n }),
            Target::Server => Value::Null,
        }
    }
}

/// The authorization decision point. Implementations must fail closed: an evaluation error is
/// a denial.
pub trait Authorizer: Send + Sync + fmt::Debug {
    /// Whether `principal` may perform `action` (`call_tool`, `list_tools`, … or, for methods
    /// the gateway does not classify, the method name) on `target`.
    fn is_allowed(&self, principal: &Principal, action: &str, target: &Target) -> bool;
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

/// What one method needs from the policy.
#[derive(Debug)]
enum Gate {
    /// Protocol plumbing every caller needs (handshake, ping, own log level, own unsubscribe).
    Open,
    /// One action on one target.
    Check(Cow<'static, str>, Target),
    /// A Modern `subscriptions/listen`: `subscribe` on each requested URI.
    Listen(Vec<String>),
}

/// Methods that need no permission: they reveal nothing and only affect the caller's own state.
const OPEN: &[&str] = &[
    method::INITIALIZE,
    method::INITIALIZED,
    method::PING,
    method::CANCELLED,
    method::PROGRESS,
    method::SET_LEVEL,
    method::UNSUBSCRIBE,
    method::DISCOVER,
    "notifications/roots/list_changed",
];

/// List methods: (method, action, array member, item key, target constructor).
type Wrap = fn(String) -> Target;
const LISTS: &[(&str, &str, &str, &str, Wrap)] = &[
    ("tools/list", "list_tools", "tools", "name", Target::Tool),
    (
        "prompts/list",
        "list_prompts",
        "prompts",
        "name",
        Target::Prompt,
    ),
    (
        "resources/list",
        "list_resources",
        "resources",
        "uri",
        Target::Resource,
    ),
    (
        "resources/templates/list",
        "list_resources",
        "resourceTemplates",
        "uriTemplate",
        Target::ResourceTemplate,
    ),
];

/// The per-item action that makes an item of a list visible.
fn item_action(target: &Target) -> &'static str {
    match target {
        Target::Tool(_) => "call_tool",
        Target::Prompt(_) => "get_prompt",
        Target::Resource(_) | Target::ResourceTemplate(_) => "read_resource",
        Target::Server => "",
    }
}

fn str_member(obj: Option<&RawValue>, key: &str) -> String {
    obj.and_then(|o| object_member(o, key))
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        .unwrap_or_default()
}

fn check(action: &'static str, target: Target) -> Gate {
    Gate::Check(Cow::Borrowed(action), target)
}

fn gate(msg: &Message<'_>) -> Gate {
    let name = msg.method.unwrap_or_default();
    if OPEN.contains(&name) {
        return Gate::Open;
    }
    if let Some((_, action, ..)) = LISTS.iter().find(|l| l.0 == name) {
        return Gate::Check(Cow::Borrowed(action), Target::Server);
    }
    let param = |k: &str| str_member(msg.params, k);
    match name {
        "tools/call" => check("call_tool", Target::Tool(param("name"))),
        "resources/read" => check("read_resource", Target::Resource(param("uri"))),
        "prompts/get" => check("get_prompt", Target::Prompt(param("name"))),
        method::SUBSCRIBE => check("subscribe", Target::Resource(param("uri"))),
        "completion/complete" => {
            let reference = msg.param("ref");
            match str_member(reference, "type").as_str() {
                "ref/prompt" => check("get_prompt", Target::Prompt(str_member(reference, "name"))),
                "ref/resource" => check(
                    "read_resource",
                    Target::Resource(str_member(reference, "uri")),
                ),
                _ => check("completion/complete", Target::Server),
            }
        }
        "subscriptions/listen" => Gate::Listen(
            msg.param("notifications")
                .and_then(|n| object_member(n, "resourceSubscriptions"))
                .and_then(|a| serde_json::from_str::<Vec<String>>(a.get()).ok())
                .unwrap_or_default(),
        ),
        // Anything else is evaluated as an action named after the method on the server, so it
        // is denied unless the policy names it.
        other => Gate::Check(Cow::Owned(other.to_owned()), Target::Server),
    }
}

impl crate::Gateway {
    /// Whether the policy allows `msg` for `caller`, without consuming rate-limit tokens or
    /// writing an audit line: lets `http` answer a denial with a plain 403 before it commits to
    /// an SSE response. [`Gateway::request`](crate::Gateway::request) and
    /// [`Gateway::modern`](crate::Gateway::modern) decide again (and audit) either way.
    pub fn authorize(
        &self,
        caller: &Principal,
        session: Option<&SessionId>,
        msg: &Message<'_>,
        modern: bool,
    ) -> Result<(), CoreError> {
        let access = &self.config.access;
        if access.authorizer.is_none() || access.decide(caller, msg).1.is_ok() {
            return Ok(());
        }
        // Denied: go through the admission point so the denial is audited exactly as it would
        // have been on the request path (a denial consumes no rate-limit tokens).
        let path = if modern { Path::Modern } else { Path::Legacy };
        access.admit(caller, session, msg, path).map(drop)
    }

    /// Audits a request refused for want of a valid credential (HTTP 401): the failure's
    /// kind, the HTTP method and the path (never the query, which may carry a session id).
    /// Nothing is recorded without an audit log.
    pub fn audit_unauthenticated(&self, failure: Unauthenticated, http_method: &str, path: &str) {
        self.config
            .access
            .record_unauthenticated(failure, http_method, path);
    }
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

/// Which era path an operation came in on (audit only).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Path {
    Legacy,
    Modern,
}

impl Access {
    /// Whether any of authorization, rate limiting or audit is on.
    fn active(&self) -> bool {
        self.authorizer.is_some() || self.limits.is_some() || self.audit.is_some()
    }

    fn allows(&self, principal: &Principal, action: &str, target: &Target) -> bool {
        self.authorizer
            .as_ref()
            .is_none_or(|a| a.is_allowed(principal, action, target))
    }

    /// Decides whether the operation may proceed. A refusal is audited here; an admission
    /// returns the handle that filters and audits the outcome.
    pub(crate) fn admit<'a>(
        &'a self,
        principal: &'a Principal,
        session: Option<&SessionId>,
        msg: &'a Message<'a>,
        path: Path,
    ) -> Result<Admitted<'a>, CoreError> {
        let mut admitted = Admitted {
            access: self,
            principal,
            msg,
            path,
            // Only audit lines show the session: no allocation when nothing is recorded.
            session: session
                .filter(|_| self.audit.is_some())
                .map(|s| session_label(s.as_str())),
            target: Target::Server,
            started: Instant::now(),
            done: !self.active(),
        };
        if admitted.done {
            return Ok(admitted);
        }
        let (target, verdict) = self.decide(principal, msg);
        admitted.target = target;
        let verdict = verdict.and_then(|()| match (&self.limits, msg.kind) {
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
        match verdict {
            Ok(()) => Ok(admitted),
            Err(e) => {
                let reason = match &e {
                    CoreError::RateLimited(_) => "rate_limited",
                    _ => "policy",
                };
                admitted.record("denied", Some(json!(reason)), None);
                Err(e)
            }
        }
    }

    /// The policy's decision for `msg` (no rate limit, no audit), and the operation's target.
    fn decide(&self, principal: &Principal, msg: &Message<'_>) -> (Target, Result<(), CoreError>) {
        // Without a policy the target is still needed (rate limits, audit).
        match gate(msg) {
            Gate::Open => (Target::Server, Ok(())),
            Gate::Check(action, target) => {
                let verdict = if self.allows(principal, &action, &target) {
                    Ok(())
                } else {
                    Err(CoreError::Forbidden(denial(&action)))
                };
                (target, verdict)
            }
            Gate::Listen(uris) => {
                let denied = uris
                    .into_iter()
                    .find(|u| !self.allows(principal, "subscribe", &Target::Resource(u.clone())));
                match denied {
                    None => (Target::Server, Ok(())),
                    Some(uri) => (
                        Target::Resource(uri),
                        Err(CoreError::Forbidden(denial("subscribe"))),
                    ),
                }
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
            principal,
            msg,
            path: Path::Legacy,
            session: None,
            target: Target::Server,
            started: Instant::now(),
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

    /// Audits a request refused with 401 (see [`crate::Gateway::audit_unauthenticated`]).
    ///
    /// Any client can cause these, as fast as it can send: the audit queue is bounded and,
    /// when the writer falls behind, drops lines and counts them (`audit`), so a flood costs a
    /// bounded amount of memory and never blocks a request (it can crowd other lines out of a
    /// full queue, which the drop count then reports).
    pub(crate) fn record_unauthenticated(
        &self,
        failure: Unauthenticated,
        http_method: &str,
        path: &str,
    ) {
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
        let Some(authorizer) = &self.authorizer else {
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
                    && !authorizer.is_allowed(principal, action, &Target::Server)
                {
                    map.remove(family);
                }
            }
        }
        caps
    }
}

fn denial(action: &str) -> &'static str {
    match action {
        "call_tool" => "call denied by authorization policy",
        "read_resource" => "read denied by authorization policy",
        "get_prompt" => "prompt denied by authorization policy",
        "subscribe" => "subscription denied by authorization policy",
        a if a.starts_with("list_") => "list denied by authorization policy",
        _ => "method denied by authorization policy",
    }
}

/// The session as audit logs show it: a prefix, since ids are bearer-like secrets.
pub(crate) fn session_label(s: &str) -> String {
    let prefix = s.get(..8).unwrap_or(s);
    format!("{prefix}…")
}

/// Longest `clientInfo` name or version an audit line keeps, in bytes.
const CLIENT_INFO_LIMIT: usize = 256;
/// Longest error text an audit line keeps as its `reason`, in bytes (a backend's refusal of
/// a per-session `initialize` quotes the backend's answer).
const REASON_LIMIT: usize = 512;

/// The head every audit line starts with, in this order: `time`; `principal` (issuer,
/// subject), absent when nobody was authenticated; `session` and `era` (label or `stateless`,
/// `legacy`/`modern`) for MCP lines; `what` — `("method", name)` for a client's JSON-RPC
/// method or `("event", kind)` for a gateway event; `outcome`. Every value is a JSON string
/// built by the encoder, so client-chosen text is escaped by construction.
fn line(
    principal: Option<(&str, &str)>,
    scope: Option<(&str, &str)>,
    what: (&str, &str),
    outcome: &str,
) -> Value {
    let mut entry = json!({ "time": crate::audit::now_rfc3339() });
    if let Some((iss, sub)) = principal {
        entry["principal"] = json!({ "iss": iss, "sub": sub });
    }
    if let Some((session, era)) = scope {
        entry["session"] = json!(session);
        entry["era"] = json!(era);
    }
    entry[what.0] = json!(what.1);
    entry["outcome"] = json!(outcome);
    entry
}

/// An error as an audit `reason`, bounded.
fn reason_of(e: &CoreError) -> Value {
    json!(truncate(&e.to_string(), REASON_LIMIT).0)
}

/// The `clientInfo` `name` and `version` of an `initialize`, each cut to
/// [`CLIENT_INFO_LIMIT`] bytes, and whether one was cut. Absent members (and non-strings)
/// are left out; `None` when neither is there.
fn client_info(msg: &Message<'_>) -> Option<(Value, bool)> {
    let info = msg.param("clientInfo")?;
    let mut out = serde_json::Map::new();
    let mut cut = false;
    for key in ["name", "version"] {
        let text =
            object_member(info, key).and_then(|v| serde_json::from_str::<String>(v.get()).ok());
        if let Some(text) = text {
            let (kept, was_cut) = truncate(&text, CLIENT_INFO_LIMIT);
            cut |= was_cut;
            out.insert(key.to_owned(), json!(kept));
        }
    }
    (!out.is_empty()).then_some((Value::Object(out), cut))
}

/// An admitted operation: filters its result and writes its audit line exactly once (on
/// completion, or as `cancelled` when the future owning it is dropped).
#[derive(Debug)]
pub(crate) struct Admitted<'a> {
    access: &'a Access,
    principal: &'a Principal,
    msg: &'a Message<'a>,
    path: Path,
    session: Option<String>,
    target: Target,
    started: Instant,
    done: bool,
}

impl Admitted<'_> {
    /// Completes a Legacy request: filters list results, audits.
    pub(crate) fn finish_legacy(
        mut self,
        result: Result<Vec<u8>, CoreError>,
    ) -> Result<Vec<u8>, CoreError> {
        if self.done {
            return result;
        }
        let result = result.map(|body| self.filter_body(body));
        self.record_result(&result);
        result
    }

    /// Completes a notification.
    pub(crate) fn finish_notification(
        mut self,
        result: Result<(), CoreError>,
    ) -> Result<(), CoreError> {
        if !self.done {
            let reason = result.as_ref().err().map(|e| json!(e.to_string()));
            let outcome = if reason.is_some() { "error" } else { "allowed" };
            self.record(outcome, reason, None);
        }
        result
    }

    /// Completes a Modern request: filters list results and discovery flags, audits.
    pub(crate) fn finish_modern(
        mut self,
        result: Result<crate::ModernAnswer, CoreError>,
    ) -> Result<crate::ModernAnswer, CoreError> {
        if self.done {
            return result;
        }
        let result = result.map(|mut answer| {
            if answer.error_code.is_none() {
                answer.body = self.filter_body(std::mem::take(&mut answer.body));
            }
            answer
        });
        let audited = result.as_ref().map(|a| a.body.clone());
        let audited = audited.map_err(|e| CoreError::Unsupported(e.to_string()));
        self.record_result(&audited);
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

    /// A response body with its `result` filtered for the caller (lists, discovery). Bodies
    /// that are errors, or that do not parse, pass unchanged.
    fn filter_body(&self, body: Vec<u8>) -> Vec<u8> {
        let Some(authorizer) = &self.access.authorizer else {
            return body;
        };
        let name = self.msg.method.unwrap_or_default();
        let list = LISTS.iter().find(|l| l.0 == name);
        if list.is_none() && name != method::DISCOVER {
            return body;
        }
        let Ok(parsed) = Message::parse(&body) else {
            return body;
        };
        let (Some(id), Some(result)) = (parsed.id.as_ref(), parsed.result) else {
            return body;
        };
        let filtered = match list {
            Some(&(_, _, member, key, wrap)) => filter_list(result, member, |item| {
                let target = wrap(str_member(Some(item), key));
                authorizer.is_allowed(self.principal, item_action(&target), &target)
            }),
            None => object_member(result, "capabilities")
                .and_then(|c| serde_json::from_str::<Value>(c.get()).ok())
                .map(|caps| self.access.visible_capabilities(self.principal, &caps))
                .and_then(|caps| with_member(result, "capabilities", &caps.to_string())),
        };
        match filtered {
            Some(result) => reencode(id, &result),
            None => body,
        }
    }

    fn record_result(&mut self, result: &Result<Vec<u8>, CoreError>) {
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

    fn record(&mut self, outcome: &str, reason: Option<Value>, response: Option<&[u8]>) {
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
        if !self.done {
            self.record("error", Some(json!("cancelled")), None);
        }
    }
}

/// At most `limit` bytes of `s`, cut on a character boundary.
fn truncate(s: &str, limit: usize) -> (&str, bool) {
    if s.len() <= limit {
        return (s, false);
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

fn reencode(id: &RequestId, result: &RawValue) -> Vec<u8> {
    restore_response(id, "result", result.get())
}

/// `result` with `result[member]` (an array) reduced to the items `keep` accepts. Items are
/// copied verbatim. `None` when the member is absent or not an array.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct OnlyEcho;

    impl Authorizer for OnlyEcho {
        fn is_allowed(&self, _: &Principal, action: &str, target: &Target) -> bool {
            action == "list_tools"
                || (action == "call_tool" && *target == Target::Tool("echo".into()))
        }
    }

    fn access() -> Access {
        Access {
            authorizer: Some(Arc::new(OnlyEcho)),
            ..Access::default()
        }
    }

    #[test]
    fn lists_keep_only_permitted_items_verbatim() {
        let access = access();
        let p = Principal::anonymous();
        let req = br#"{"jsonrpc":"2.0","id":12345678901234567890123,"method":"tools/list"}"#;
        let msg = Message::parse(req).unwrap();
        let admitted = access.admit(&p, None, &msg, Path::Legacy).unwrap();
        let body = br#"{"jsonrpc":"2.0","id":12345678901234567890123,"result":{"tools":[{"name":"add","x":1.0},{"name":"echo","inputSchema":{"default":1e400}}],"nextCursor":"c"}}"#;
        let out = admitted.finish_legacy(Ok(body.to_vec())).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"jsonrpc":"2.0","id":12345678901234567890123,"result":{"tools":[{"name":"echo","inputSchema":{"default":1e400}}],"nextCursor":"c"}}"#
        );
    }

    #[test]
    fn calls_and_unknown_methods_are_checked() {
        let access = access();
        let p = Principal::anonymous();
        for (req, ok) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#,
                true,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add"}}"#,
                false,
            ),
            (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, true),
            (r#"{"jsonrpc":"2.0","id":1,"method":"made/up"}"#, false),
            (r#"{"jsonrpc":"2.0","id":1,"method":"prompts/list"}"#, false),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"x"}}"#,
                false,
            ),
        ] {
            let msg = Message::parse(req.as_bytes()).unwrap();
            let got = access.admit(&p, None, &msg, Path::Legacy);
            assert_eq!(got.is_ok(), ok, "{req}");
            if let Ok(a) = got {
                let _ = a.finish_legacy(Ok(Vec::new()));
            }
        }
    }

    #[test]
    fn capability_families_follow_list_permissions() {
        let caps = json!({"tools":{"listChanged":true},"prompts":{},"logging":{}});
        let out = access().visible_capabilities(&Principal::anonymous(), &caps);
        assert_eq!(out, json!({"tools":{"listChanged":true},"logging":{}}));
    }

    /// Collects what the audit writer thread writes, one write per line.
    struct Lines(std::sync::mpsc::Sender<Vec<u8>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.send(buf.to_vec());
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn audited() -> (Access, std::sync::mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let log = AuditLog::to_writer(Box::new(Lines(tx)), None).unwrap();
        let access = Access {
            audit: Some(log),
            ..Access::default()
        };
        (access, rx)
    }

    /// The line's member names, sorted (their order depends on serde_json's features).
    fn keys(line: &Value) -> Vec<&str> {
        let mut keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        keys
    }

    /// The next line, raw and parsed; it must be exactly one line.
    fn next_line(rx: &std::sync::mpsc::Receiver<Vec<u8>>) -> (String, Value) {
        let raw = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("an audit line");
        let raw = String::from_utf8(raw).unwrap();
        assert!(
            raw.ends_with('\n') && raw.matches('\n').count() == 1,
            "{raw:?}"
        );
        let parsed = serde_json::from_str(&raw).unwrap();
        (raw, parsed)
    }

    #[test]
    fn initialize_lines_label_the_session_and_bound_the_client_info() {
        let (access, rx) = audited();
        let alice = Principal {
            issuer: "api-key".into(),
            subject: "alice".into(),
            claims: serde_json::Map::new(),
            credential: None,
        };
        let name = format!("evil\"}},\n\u{2028}{}", "é".repeat(300));
        let req = json!({"jsonrpc":"2.0","id":7,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},
            "clientInfo":{"name":name,"version":"1.2"}}})
        .to_string();
        let msg = Message::parse(req.as_bytes()).unwrap();
        let store = crate::session::SessionStore::new(4, std::time::Duration::from_secs(60));
        let sid = store.create("2025-11-25", &alice).unwrap();

        access.audit_only(&alice, &msg).finish_initialize(Ok((
            &sid,
            "2025-11-25",
            b"{}".as_slice(),
        )));
        let (raw, line) = next_line(&rx);
        assert!(
            !raw.contains(sid.as_str()),
            "the raw session id is never logged"
        );
        assert_eq!(line["principal"], json!({"iss":"api-key","sub":"alice"}));
        assert_eq!(line["session"], session_label(sid.as_str()));
        assert_eq!(
            (&line["era"], &line["method"], &line["outcome"], &line["id"]),
            (
                &json!("legacy"),
                &json!("initialize"),
                &json!("allowed"),
                &json!("7")
            )
        );
        assert_eq!(line["protocolVersion"], "2025-11-25");
        assert_eq!(line["client"]["version"], "1.2");
        let kept = line["client"]["name"].as_str().unwrap();
        assert!(kept.len() <= CLIENT_INFO_LIMIT && kept.len() > CLIENT_INFO_LIMIT - 4);
        assert!(
            name.starts_with(kept),
            "a prefix, cut on a character boundary"
        );
        assert_eq!(line["clientTruncated"], true);
        assert!(
            line.get("response").is_none(),
            "bodies only with a body limit"
        );

        // Refused: no session, the reason; the client still named.
        access
            .audit_only(&alice, &msg)
            .finish_initialize(Err(&CoreError::TooManySessions(4)));
        let (_, line) = next_line(&rx);
        assert_eq!(
            (&line["outcome"], &line["reason"], &line["session"]),
            (
                &json!("error"),
                &json!("too many sessions (limit 4)"),
                &json!("stateless")
            )
        );
        assert!(line.get("protocolVersion").is_none() && line["client"]["version"] == "1.2");

        // Abandoned (the client left): cancelled.
        drop(access.audit_only(&alice, &msg));
        let (_, line) = next_line(&rx);
        assert_eq!(
            (&line["outcome"], &line["reason"]),
            (&json!("error"), &json!("cancelled"))
        );
    }

    #[test]
    fn session_ends_and_refused_credentials_are_events() {
        let (access, rx) = audited();
        let id = "0123456789abcdef0123456789abcdef";
        access.record_session_end(&("iss".into(), "bob".into()), id, "expired");
        let (raw, line) = next_line(&rx);
        assert!(!raw.contains(id));
        assert_eq!(
            keys(&line),
            [
                "era",
                "event",
                "outcome",
                "principal",
                "reason",
                "session",
                "time"
            ]
        );
        assert_eq!(
            (&line["principal"]["sub"], &line["session"], &line["event"]),
            (&json!("bob"), &json!("01234567…"), &json!("session_end"))
        );
        assert_eq!(
            (&line["outcome"], &line["reason"]),
            (&json!("ended"), &json!("expired"))
        );

        access.record_unauthenticated(Unauthenticated::Missing, "GET", "/sse");
        let (_, line) = next_line(&rx);
        assert_eq!(
            keys(&line),
            ["event", "httpMethod", "outcome", "path", "reason", "time"]
        );
        assert_eq!(
            (
                &line["outcome"],
                &line["reason"],
                &line["httpMethod"],
                &line["path"]
            ),
            (
                &json!("unauthenticated"),
                &json!("missing_credential"),
                &json!("GET"),
                &json!("/sse")
            )
        );
        access.record_unauthenticated(Unauthenticated::Invalid("unknown API key"), "POST", "/mcp");
        let (_, line) = next_line(&rx);
        assert_eq!(
            (&line["reason"], &line["detail"]),
            (&json!("invalid_credential"), &json!("unknown API key"))
        );
    }
}
