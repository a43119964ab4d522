//! The webhook: one signed POST per guardrail and message, bounded by a timeout and a
//! concurrency limit, behind a circuit breaker (`health::breaker`), failing closed or open
//! as configured. `core` builds, signs and judges; the HTTP client is the binary's
//! ([`GuardHook`]), as every other client is.
//!
//! Request body (JSON): `guardrail`, `principal` (`iss`, `sub`), `backend`, `tool` (absent
//! for resources and prompts), `method`, `era` (`legacy`/`modern`), `direction`
//! (`request`/`response`), `message` (the JSON-RPC message). Header
//! `X-Switchboard-Signature: sha256=<hex HMAC-SHA256 of the body with the secret>`.
//! Reply: 2xx with `{"action": "allow" | "reject" | "replace", "message"?, "replacement"?}`;
//! `replacement` is the checked payload's new value (a request's `arguments`, a response's
//! `result`). Anything else is a failure.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde::Deserialize;
use sha2::Sha256;
use std::time::Instant;
use tokio::sync::Semaphore;

use switchboard_guard::{Action, Checked, Event, Failure, Rule, RuleSet, Stage};

use crate::health::breaker::{Admission, Breaker};
use crate::health::BreakerConfig;
use crate::Principal;

/// The header that carries the body's signature.
pub const SIGNATURE_HEADER: &str = "x-switchboard-signature";
/// Largest reply body read from a hook.
pub const MAX_REPLY_BYTES: usize = 4 << 20;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_CONCURRENCY: usize = 32;

/// Sends one hook request (the binary's HTTP client).
pub trait GuardHook: Send + Sync + std::fmt::Debug {
    /// POSTs `body` to `url` with `headers`; the reply's status and body (at most
    /// [`MAX_REPLY_BYTES`]), or why there is none (never quoting the body).
    fn post<'a>(
        &'a self,
        url: &'a str,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    ) -> futures::future::BoxFuture<'a, Result<(u16, Vec<u8>), String>>;
}

/// Who and what a hook is asked about.
#[derive(Debug, Clone, Copy)]
pub struct HookRequest<'a> {
    pub principal: &'a Principal,
    pub backend: &'a str,
    pub tool: Option<&'a str>,
    pub method: &'a str,
    pub era: &'a str,
    pub direction: &'a str,
    /// The JSON-RPC message, raw JSON.
    pub message: &'a str,
}

/// A hook's answer as parsed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookReply {
    pub action: HookAction,
    pub message: Option<String>,
    pub replacement: Option<Box<serde_json::value::RawValue>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookAction {
    Allow,
    Reject,
    Replace,
}

/// The hooks' shared state: the client, the secrets, and per guardrail a concurrency
/// limit and a breaker.
#[derive(Debug, Default)]
pub(crate) struct Hooks {
    client: Option<Arc<dyn GuardHook>>,
    secrets: HashMap<PathBuf, Vec<u8>>,
    state: Mutex<HashMap<Arc<str>, Arc<HookState>>>,
    breaker: BreakerConfig,
}

#[derive(Debug)]
struct HookState {
    slots: Semaphore,
    breaker: Mutex<Breaker>,
}

/// What the hooks decided for one payload.
#[derive(Debug, Default)]
pub(crate) struct Hooked {
    events: Vec<Event>,
    rejected: Option<Arc<str>>,
    replaced: Option<String>,
}

impl Hooked {
    /// Folds the hooks' decision into the built-in checks' (a rejection wins). A hook's
    /// replacement is checked again by the built-in rules (`rescan`), as the original was:
    /// it cannot undo their redaction nor carry what they refuse.
    pub(crate) fn apply(self, checked: &mut Checked, rescan: impl FnOnce(&str) -> Checked) {
        checked.events.extend(self.events);
        if self.rejected.is_some() {
            checked.rejected = self.rejected;
            return;
        }
        let Some(new) = self.replaced else {
            return;
        };
        let again = rescan(&new);
        checked.events.extend(again.events);
        checked.rejected = again.rejected;
        checked.replaced = Some(again.replaced.unwrap_or(new));
    }
}

impl Hooks {
    pub(crate) fn new(
        client: Arc<dyn GuardHook>,
        secrets: HashMap<PathBuf, Vec<u8>>,
        breaker: BreakerConfig,
    ) -> Self {
        Hooks {
            client: Some(client),
            secrets,
            state: Mutex::new(HashMap::new()),
            breaker,
        }
    }

    /// Asks each webhook of `rules` at `stage`, in order, until one rejects.
    pub(crate) async fn run(&self, rules: &RuleSet, stage: Stage, req: HookRequest<'_>) -> Hooked {
        let mut out = Hooked::default();
        for rule in rules.webhooks(stage) {
            let (action, kind) = self.ask(rule, &req).await;
            match action {
                Ok(Verdict::Allow) => continue,
                Ok(Verdict::Replace(new)) => {
                    out.events.push(event(rule, Action::Redact, "webhook"));
                    out.replaced = Some(new);
                }
                Ok(Verdict::Reject) => {
                    out.events.push(event(rule, Action::Reject, "webhook"));
                    out.rejected = Some(rule.name.clone());
                    return out;
                }
                Err(()) => {
                    let failure = rule.webhook.as_ref().map(|w| w.failure);
                    if failure == Some(Failure::Open) {
                        out.events.push(event(rule, Action::Warn, kind));
                        continue;
                    }
                    out.events.push(event(rule, Action::Reject, kind));
                    out.rejected = Some(rule.name.clone());
                    return out;
                }
            }
        }
        out
    }

    fn state_of(&self, rule: &Rule) -> Arc<HookState> {
        let limit = (rule.webhook.as_ref())
            .and_then(|w| w.max_concurrent)
            .unwrap_or(DEFAULT_CONCURRENCY);
        let mut all = self.state.lock();
        all.entry(rule.name.clone())
            .or_insert_with(|| {
                Arc::new(HookState {
                    slots: Semaphore::new(limit),
                    breaker: Mutex::new(Breaker::default()),
                })
            })
            .clone()
    }

    /// One hook call: `Err(())` with the failure's kind (`webhook_timeout`,
    /// `webhook_unavailable`, `webhook_error`, `webhook_breaker_open`, `webhook_busy`).
    ///
    /// The concurrency slot is taken first, within the timeout: waiting for one says nothing
    /// of the hook's health, so a burst of callers is refused as busy without counting against
    /// the breaker. The body is built only once a slot is held. A trial call whose future is
    /// dropped (its caller left) gives the trial back, so the breaker is never stuck half-open.
    async fn ask(&self, rule: &Rule, req: &HookRequest<'_>) -> (Result<Verdict, ()>, &'static str) {
        let (Some(client), Some(spec)) = (&self.client, &rule.webhook) else {
            return (Err(()), "webhook_unavailable");
        };
        let state = self.state_of(rule);
        let timeout = spec.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let deadline = tokio::time::Instant::now() + timeout;
        let slot = tokio::time::timeout_at(deadline, state.slots.acquire()).await;
        let Ok(Ok(_slot)) = slot else {
            tracing::warn!(guardrail = %rule.name, failure = "webhook_busy", "guardrail webhook busy");
            return (Err(()), "webhook_busy");
        };
        let admission = state.breaker.lock().admit(Instant::now(), &self.breaker);
        if admission == Admission::Refuse {
            return (Err(()), "webhook_breaker_open");
        }
        let mut flight = HookFlight {
            state: &state,
            trial: admission == Admission::Trial,
            settled: false,
        };
        let Some(body) = body(&rule.name, req) else {
            flight.settle(false, &self.breaker);
            return (Err(()), "webhook_error");
        };
        let mut headers = vec![("content-type", "application/json".to_owned())];
        let secret = spec.secret_file.as_ref().and_then(|p| self.secrets.get(p));
        if let Some(secret) = secret {
            headers.push((SIGNATURE_HEADER, sign(secret, &body)));
        }
        let call = async {
            let (status, reply) =
                (client.post(&spec.url, headers, body).await).map_err(|_| "webhook_unavailable")?;
            if !(200..300).contains(&status) {
                return Err("webhook_error");
            }
            verdict(&reply).ok_or("webhook_error")
        };
        let outcome = match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(kind)) => Err(kind),
            Err(_) => Err("webhook_timeout"),
        };
        flight.settle(outcome.is_ok(), &self.breaker);
        match outcome {
            Ok(v) => (Ok(v), "webhook"),
            Err(kind) => {
                tracing::warn!(guardrail = %rule.name, failure = kind, "guardrail webhook failed");
                (Err(()), kind)
            }
        }
    }
}

/// One admitted hook call's standing with its breaker: its outcome recorded once, or, dropped
/// unsettled, a trial given back.
struct HookFlight<'a> {
    state: &'a HookState,
    trial: bool,
    settled: bool,
}

impl HookFlight<'_> {
    fn settle(&mut self, success: bool, config: &BreakerConfig) {
        self.settled = true;
        let mut breaker = self.state.breaker.lock();
        breaker.record(success, self.trial, Instant::now(), config);
    }
}

impl Drop for HookFlight<'_> {
    fn drop(&mut self) {
        if !self.settled && self.trial {
            self.state.breaker.lock().trial_abandoned();
        }
    }
}

#[derive(Debug)]
enum Verdict {
    Allow,
    Reject,
    Replace(String),
}

fn event(rule: &Rule, action: Action, kind: &'static str) -> Event {
    Event {
        guardrail: rule.name.clone(),
        action,
        kind,
        count: 1,
    }
}

/// The documented request body, serialized from the message's raw text as it is (no value
/// tree: a number past f64 or a lone surrogate is carried, never re-parsed or panicked on).
fn body(guardrail: &str, req: &HookRequest<'_>) -> Option<Vec<u8>> {
    #[derive(serde::Serialize)]
    struct Who<'a> {
        iss: &'a str,
        sub: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Body<'a> {
        guardrail: &'a str,
        principal: Who<'a>,
        backend: &'a str,
        method: &'a str,
        era: &'a str,
        direction: &'a str,
        message: &'a serde_json::value::RawValue,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<&'a str>,
    }
    let message: &serde_json::value::RawValue = serde_json::from_str(req.message).ok()?;
    serde_json::to_vec(&Body {
        guardrail,
        principal: Who {
            iss: &req.principal.issuer,
            sub: &req.principal.subject,
        },
        backend: req.backend,
        method: req.method,
        era: req.era,
        direction: req.direction,
        message,
        tool: req.tool,
    })
    .ok()
}

/// `sha256=` and the hex HMAC-SHA256 of `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// A reply body as a verdict; `None` when it is not one (bad JSON, `replace` without a
/// JSON object or array as `replacement`).
fn verdict(reply: &[u8]) -> Option<Verdict> {
    let reply: HookReply = serde_json::from_slice(reply).ok()?;
    match reply.action {
        HookAction::Allow => Some(Verdict::Allow),
        HookAction::Reject => Some(Verdict::Reject),
        HookAction::Replace => {
            let r = reply.replacement?;
            let text = r.get();
            (text.starts_with('{') || text.starts_with('['))
                .then(|| Verdict::Replace(text.to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_with_hmac_sha256() {
        // RFC 4231 test case 2.
        let sig = sign(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            sig,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    fn request<'a>(who: &'a Principal, message: &'a str) -> HookRequest<'a> {
        HookRequest {
            principal: who,
            backend: "b",
            tool: Some("t"),
            method: "tools/call",
            era: "legacy",
            direction: "response",
            message,
        }
    }

    /// A message no value tree holds (a number past f64, a lone surrogate) is carried as it
    /// came, never re-parsed: building the body once panicked on these.
    #[test]
    fn the_body_carries_the_message_as_it_came() {
        let who = Principal::anonymous();
        for message in [
            format!(r#"{{"n":{}}}"#, "1".repeat(400)),
            r#"{"x":1e400}"#.to_owned(),
            r#"{"t":"\ud800"}"#.to_owned(),
        ] {
            let body = body("g", &request(&who, &message)).expect("a body");
            let text = String::from_utf8(body).expect("utf-8");
            assert!(text.contains(&message), "{text}");
            assert!(text.contains(r#""tool":"t""#), "{text}");
        }
    }

    /// A trial call whose caller leaves gives the trial back: the next call is the trial,
    /// not refused for ever by a half-open breaker waiting on an outcome that never comes.
    #[test]
    fn a_dropped_trial_is_given_back() {
        let config = BreakerConfig {
            consecutive_failures: 1,
            cool_down: std::time::Duration::ZERO,
            ..BreakerConfig::default()
        };
        let state = HookState {
            slots: Semaphore::new(1),
            breaker: Mutex::new(Breaker::default()),
        };
        let now = Instant::now();
        state.breaker.lock().record(false, false, now, &config);
        assert_eq!(state.breaker.lock().admit(now, &config), Admission::Trial);
        drop(HookFlight {
            state: &state,
            trial: true,
            settled: false,
        });
        assert_eq!(state.breaker.lock().admit(now, &config), Admission::Trial);
        assert_eq!(state.breaker.lock().admit(now, &config), Admission::Refuse);
    }

    #[test]
    fn replies_parse_strictly() {
        assert!(matches!(
            verdict(br#"{"action":"allow"}"#),
            Some(Verdict::Allow)
        ));
        assert!(matches!(
            verdict(br#"{"action":"reject","message":"no"}"#),
            Some(Verdict::Reject)
        ));
        assert!(matches!(
            verdict(br#"{"action":"replace","replacement":{"a":1}}"#),
            Some(Verdict::Replace(_))
        ));
        assert!(verdict(br#"{"action":"replace"}"#).is_none());
        assert!(verdict(br#"{"action":"maybe"}"#).is_none());
        assert!(verdict(b"not json").is_none());
    }
}
