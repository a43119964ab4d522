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
use serde_json::json;
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
    /// Folds the hooks' decision into the built-in checks' (a rejection wins).
    pub(crate) fn apply(self, checked: &mut Checked) {
        checked.events.extend(self.events);
        if self.rejected.is_some() {
            checked.rejected = self.rejected;
        } else if self.replaced.is_some() {
            checked.replaced = self.replaced;
        }
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
    /// `webhook_unavailable`, `webhook_error`, `webhook_breaker_open`).
    async fn ask(&self, rule: &Rule, req: &HookRequest<'_>) -> (Result<Verdict, ()>, &'static str) {
        let (Some(client), Some(spec)) = (&self.client, &rule.webhook) else {
            return (Err(()), "webhook_unavailable");
        };
        let state = self.state_of(rule);
        let admission = state.breaker.lock().admit(Instant::now(), &self.breaker);
        if admission == Admission::Refuse {
            return (Err(()), "webhook_breaker_open");
        }
        let trial = admission == Admission::Trial;
        let Some(body) = body(&rule.name, req) else {
            return (Err(()), "webhook_error");
        };
        let mut headers = vec![("content-type", "application/json".to_owned())];
        let secret = spec.secret_file.as_ref().and_then(|p| self.secrets.get(p));
        if let Some(secret) = secret {
            headers.push((SIGNATURE_HEADER, sign(secret, &body)));
        }
        let timeout = spec.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let call = async {
            let _slot = state
                .slots
                .acquire()
                .await
                .map_err(|_| "webhook_unavailable")?;
            let (status, reply) =
                (client.post(&spec.url, headers, body).await).map_err(|_| "webhook_unavailable")?;
            if !(200..300).contains(&status) {
                return Err("webhook_error");
            }
            verdict(&reply).ok_or("webhook_error")
        };
        let outcome = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(kind)) => Err(kind),
            Err(_) => Err("webhook_timeout"),
        };
        let mut breaker = state.breaker.lock();
        breaker.record(outcome.is_ok(), trial, Instant::now(), &self.breaker);
        match outcome {
            Ok(v) => (Ok(v), "webhook"),
            Err(kind) => {
                tracing::warn!(guardrail = %rule.name, failure = kind, "guardrail webhook failed");
                (Err(()), kind)
            }
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

/// The documented request body.
fn body(guardrail: &str, req: &HookRequest<'_>) -> Option<Vec<u8>> {
    let message = serde_json::value::RawValue::from_string(req.message.to_owned()).ok()?;
    let mut v = json!({
        "guardrail": guardrail,
        "principal": {"iss": req.principal.issuer, "sub": req.principal.subject},
        "backend": req.backend,
        "method": req.method,
        "era": req.era,
        "direction": req.direction,
        "message": message,
    });
    if let Some(tool) = req.tool {
        v["tool"] = json!(tool);
    }
    serde_json::to_vec(&v).ok()
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
