//! Guardrails where the pipeline runs them (`switchboard_guard` is the pure engine): which
//! rules apply to a request (by backend and tool, a lookup that returns nothing on the fast
//! path, so nothing is parsed or copied), the request's arguments and the answer's result
//! checked and rewritten, every other backend message checked on its way to the client
//! (`notes`), and each
//! action recorded as one audit line and one count of
//! `switchboard_guardrail_actions_total{guardrail,action}`. Never the matched text.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};
use switchboard_guard::{Event, Rule, RuleSet, Stage};
use switchboard_wire::{codes, encode_request, object_member, with_member, ErrorObject, Message};

use crate::audit::AuditLog;
use crate::{Answer, Principal};

mod answers;
pub(crate) mod hook;
pub(crate) mod inputs;
mod notes;
mod target;

pub use hook::{sign, GuardHook, HookReply, HookRequest, MAX_REPLY_BYTES, SIGNATURE_HEADER};
pub(crate) use target::{checks, scope_of, Checked, Item, Lookup};

/// Every configured guardrail, resolved per backend and per tool; the gateway's state for
/// them (`GatewayConfig::guardrails`).
#[derive(Debug, Default)]
pub struct Guardrails {
    gateway: Vec<Arc<Rule>>,
    /// Backend name → its effective rules (the gateway's with its own over them).
    backends: HashMap<String, Vec<Arc<Rule>>>,
    /// Backend name → original tool name → that tool's effective rules.
    tools: HashMap<String, HashMap<String, Vec<Arc<Rule>>>>,
    /// Backend name → original prompt name → that prompt's (its `prompts/get`'s).
    prompts: HashMap<String, HashMap<String, Vec<Arc<Rule>>>>,
    audit: Option<Arc<AuditLog>>,
    hooks: hook::Hooks,
    /// [`Guardrails::note_rules`], computed at the first backend message checked.
    notes: std::sync::OnceLock<RuleSet>,
}

/// What a request is, for the rules and the audit line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) backend: &'a str,
    /// The backend's own name of the tool (or prompt, or resource URI).
    pub(crate) original: Option<&'a str>,
    /// The name the client used.
    pub(crate) exposed: Option<&'a str>,
    pub(crate) method: &'a str,
}

/// The rules that apply to one request, and who and what it is.
#[derive(Debug)]
pub(crate) struct Scope<'g> {
    guards: &'g Guardrails,
    rules: RuleSet,
    backend: String,
    tool: Option<String>,
    method: String,
    /// The tool's `outputSchema`, when known (aggregating).
    pub(crate) output_schema: Option<Value>,
}

/// What becomes of a client's answer to a backend's question.
#[derive(Debug)]
pub(crate) enum ClientAnswer {
    Pass,
    /// Send this result instead (redacted).
    Replaced(String),
    /// Answer the backend the refusal of this guardrail instead (`-32603` naming it).
    Refused(Arc<str>),
}

/// What becomes of a request.
#[derive(Debug)]
pub(crate) enum Request {
    Pass,
    /// Send this request body instead (its arguments rewritten).
    Replaced(Vec<u8>),
    /// Answer this instead (a `-32602` naming the guardrail).
    Refused(Answer),
}

impl Guardrails {
    /// A client's answer (its `result`, or its `error`) to `backend`'s question
    /// (elicitation, sampling, roots), checked by that backend's request rules that name no
    /// tools (the question comes from no tool call the gateway can name), as a request's
    /// arguments are: the webhooks are not asked (they judge `tools/call` requests).
    pub(crate) fn client_answer(&self, backend: &str, result: &str) -> ClientAnswer {
        let target = Target {
            backend,
            original: None,
            exposed: None,
            method: "-",
        };
        let Some(scope) = self
            .scope(target)
            .filter(|s| s.rules.runs_at(Stage::Request))
        else {
            return ClientAnswer::Pass;
        };
        let checked = scope.rules.request(result);
        let place = Some((backend, None));
        self.record(None, "client answer", "request", place, &checked.events);
        if let Some(name) = checked.rejected {
            return ClientAnswer::Refused(name);
        }
        match checked.replaced {
            Some(new) => ClientAnswer::Replaced(new),
            None => ClientAnswer::Pass,
        }
    }

    /// The gateway's rules (each backend without rules of its own gets these).
    pub fn new(gateway: Vec<Arc<Rule>>) -> Self {
        Guardrails {
            gateway,
            ..Guardrails::default()
        }
    }

    /// `backend`'s effective rules.
    pub fn set_backend(&mut self, backend: &str, rules: Vec<Arc<Rule>>) {
        self.backends.insert(backend.to_owned(), rules);
    }

    /// The effective rules of `backend`'s tool `original`.
    pub fn set_tool(&mut self, backend: &str, original: &str, rules: Vec<Arc<Rule>>) {
        (self.tools.entry(backend.to_owned()).or_default()).insert(original.to_owned(), rules);
    }

    /// The effective rules of `backend`'s prompt `original` (apart from a tool's of the
    /// same name).
    pub fn set_prompt(&mut self, backend: &str, original: &str, rules: Vec<Arc<Rule>>) {
        (self.prompts.entry(backend.to_owned()).or_default()).insert(original.to_owned(), rules);
    }

    /// Where actions are audited.
    pub fn with_audit(mut self, audit: Option<Arc<AuditLog>>) -> Self {
        self.audit = audit;
        self
    }

    /// What calls webhooks (the binary's HTTP client), and their secrets by `secretFile`.
    pub fn with_hook(
        mut self,
        hook: Arc<dyn GuardHook>,
        secrets: HashMap<std::path::PathBuf, Vec<u8>>,
    ) -> Self {
        self.hooks = hook::Hooks::new(hook, secrets, crate::BreakerConfig::default());
        self
    }

    /// The rules for `target`: the tool's, else its backend's, else the gateway's, those
    /// that cover the tool. `None` (the fast path) when none does.
    pub(crate) fn scope(&self, target: Target<'_>) -> Option<Scope<'_>> {
        if target.backend.is_empty() {
            return self.unresolved_scope(target);
        }
        let overrides = match target.method {
            "tools/call" | "tasks/result" | "tasks/update" => Some(&self.tools),
            "prompts/get" => Some(&self.prompts),
            _ => None,
        };
        let rules = (overrides.zip(target.original))
            .and_then(|(o, t)| o.get(target.backend)?.get(t))
            .or_else(|| self.backends.get(target.backend))
            .unwrap_or(&self.gateway);
        let (exposed, original) = match target.method {
            "tools/call" | "tasks/result" | "tasks/update" => (target.exposed, target.original),
            _ => (None, None),
        };
        // By the name the client uses or the backend's own: an exposed name changes when
        // another backend's tool collides with it (conditional prefixing), and a rule must
        // not stop covering a tool then.
        let covers = |r: &&Arc<Rule>| {
            r.covers(target.backend, exposed)
                || original.is_some_and(|o| r.covers(target.backend, Some(o)))
        };
        if !rules.iter().any(|r| covers(&r)) {
            return None;
        }
        let applying = rules.iter().filter(covers).cloned().collect();
        Some(Scope {
            guards: self,
            rules: RuleSet::new(applying),
            backend: target.backend.to_owned(),
            tool: target.exposed.map(str::to_owned),
            method: target.method.to_owned(),
            output_schema: None,
        })
    }

    /// A request whose backend is not known here (a task's result, a name the merged lists
    /// do not hold yet): every configured rule applies, whatever its level or `tools`, since
    /// the one that would have covered it cannot be told apart. Failing wide, not open.
    fn unresolved_scope(&self, target: Target<'_>) -> Option<Scope<'_>> {
        let mut all: Vec<Arc<Rule>> = Vec::new();
        let levels = std::iter::once(&self.gateway)
            .chain(self.backends.values())
            .chain(self.tools.values().flat_map(|t| t.values()))
            .chain(self.prompts.values().flat_map(|t| t.values()));
        for rule in levels.flatten() {
            if !all.iter().any(|r| Arc::ptr_eq(r, rule)) {
                all.push(rule.clone());
            }
        }
        if all.is_empty() {
            return None;
        }
        Some(Scope {
            guards: self,
            rules: RuleSet::new(all),
            backend: String::new(),
            tool: target.exposed.map(str::to_owned),
            method: target.method.to_owned(),
            output_schema: None,
        })
    }

    /// One backend's fetched definitions (tools, prompts, resources) as the merged list
    /// will hold them: a definition a guardrail refuses (`reject`, `quarantine`) is left
    /// out, a redacted one replaced; each action audited.
    pub(crate) fn definitions(
        &self,
        backend: &str,
        kind: crate::catalog::Kind,
        items: Vec<Value>,
    ) -> Vec<Value> {
        use crate::catalog::Kind;
        // `used`: the request the item is used by, whose rules judge its definition.
        let (stage, key, method, used) = match kind {
            Kind::Tools => (Stage::ToolDefinition, "name", "tools/list", "tools/call"),
            Kind::Prompts => (
                Stage::PromptDefinition,
                "name",
                "prompts/list",
                "prompts/get",
            ),
            Kind::Resources => (Stage::ResourceDefinition, "uri", "resources/list", "-"),
            Kind::ResourceTemplates => (
                Stage::ResourceDefinition,
                "uriTemplate",
                "resources/templates/list",
                "-",
            ),
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let name = item.get(key).and_then(Value::as_str).map(str::to_owned);
            let target = Target {
                backend,
                original: name.as_deref(),
                exposed: name.as_deref(),
                method: used,
            };
            let Some(scope) = self.scope(target).filter(|s| s.rules.runs_at(stage)) else {
                out.push(item);
                continue;
            };
            let Ok(raw) = serde_json::to_string(&item) else {
                continue;
            };
            let checked = scope.rules.definition(stage, &raw);
            let place = Some((backend, name.as_deref()));
            self.record(None, method, "definition", place, &checked.events);
            if checked.rejected.is_some() {
                continue;
            }
            // The rewrite, read as written; one that does not read back is withheld, never
            // replaced by the original it rewrote.
            match checked
                .replaced
                .map(|r| switchboard_wire::plain::parse(r.as_bytes()))
            {
                Some(Ok(new)) => out.push(new),
                Some(Err(_)) => {}
                None => out.push(item),
            }
        }
        out
    }

    /// One audit line and one count per action.
    fn record(
        &self,
        caller: Option<(&Principal, &str)>,
        method: &str,
        direction: &str,
        place: Option<(&str, Option<&str>)>,
        events: &[Event],
    ) {
        for e in events {
            crate::metrics::guardrail_action(&e.guardrail, e.action.name());
            let Some(audit) = &self.audit else { continue };
            let mut line = json!({
                "time": crate::audit::now_rfc3339(),
                "event": "guardrail",
                "guardrail": &*e.guardrail,
                "action": e.action.name(),
                "kind": e.kind,
                "count": e.count,
                "method": method,
                "direction": direction,
            });
            if let Some((p, era)) = caller {
                line["principal"] = json!({"iss": p.issuer, "sub": p.subject});
                line["era"] = json!(era);
            }
            if let Some((backend, tool)) = place {
                line["backend"] = json!(backend);
                if let Some(tool) = tool {
                    line["tool"] = json!(audit_name(tool));
                }
            }
            audit.record(&line);
        }
    }
}

impl Scope<'_> {
    /// A `tools/call`'s arguments checked (and the webhooks asked, with the whole request),
    /// and the answers any request carries to a backend's questions (`inputResponses` of a
    /// retried `tools/call`, `prompts/get` or `resources/read`, or of a `tasks/update`: what
    /// a user typed into an elicitation, a sampled completion): passed, rewritten or refused
    /// with `-32602` naming the guardrail.
    pub(crate) async fn request(
        &self,
        msg: &Message<'_>,
        caller: &Principal,
        era: &str,
    ) -> Request {
        let (Some(id), Some(method)) = (msg.id.as_ref(), msg.method) else {
            return Request::Pass;
        };
        let Some(params) = msg.params else {
            return Request::Pass;
        };
        let call = method == "tools/call";
        let answers = object_member(params, "inputResponses");
        if !(call || answers.is_some()) || !self.rules.runs_at(Stage::Request) {
            return Request::Pass;
        }
        let args = match call {
            true => object_member(params, "arguments").map_or("{}", |a| a.get()),
            false => "{}",
        };
        let mut checked = self.rules.request(args);
        let new_answers = match answers.map(|a| self.answers(a, caller, era)) {
            Some(Err(name)) => {
                checked.rejected.get_or_insert(name);
                None
            }
            Some(Ok(new)) => new,
            None => None,
        };
        // The webhooks judge `tools/call` requests (their documented body).
        if call && checked.rejected.is_none() {
            let message = wire_text(msg);
            let hooked = self
                .guards
                .hooks
                .run(
                    &self.rules,
                    Stage::Request,
                    self.hook_request(caller, era, "request", &message),
                )
                .await;
            hooked.apply(&mut checked, |new| self.rules.request(new));
        }
        self.audit(caller, era, "request", &checked.events);
        if let Some(name) = &checked.rejected {
            let err = ErrorObject::new(
                codes::INVALID_PARAMS,
                switchboard_guard::rejected_message(name),
            )
            .with_data(json!({"guardrail": &**name}));
            return Request::Refused(Answer::error(id, &err));
        }
        if checked.replaced.is_none() && new_answers.is_none() {
            return Request::Pass;
        }
        let mut spliced: Option<Box<serde_json::value::RawValue>> = None;
        for (key, new) in [
            ("arguments", checked.replaced),
            ("inputResponses", new_answers),
        ] {
            let Some(new) = new else {
                continue;
            };
            let base = spliced.as_deref().unwrap_or(params);
            match with_member(base, key, &new) {
                Some(p) => spliced = Some(p),
                // What cannot be spliced back is not sent unchecked.
                None => {
                    let err =
                        ErrorObject::new(codes::INVALID_PARAMS, "arguments could not be checked");
                    return Request::Refused(Answer::error(id, &err));
                }
            }
        }
        Request::Replaced(encode_request(id, method, spliced.as_deref()))
    }

    /// Each answer of an `inputResponses` object checked on its own, its key kept (a key
    /// rewritten would answer no question): the object again when an answer was rewritten;
    /// `Err`: the guardrail that refused one (or an answer that could not be rewritten).
    fn answers(
        &self,
        answers: &serde_json::value::RawValue,
        caller: &Principal,
        era: &str,
    ) -> Result<Option<String>, Arc<str>> {
        // Checked whole first (its keys, its size), audited once; rewritten answer by answer.
        let whole = self.rules.request(answers.get());
        self.audit(caller, era, "request", &whole.events);
        if let Some(name) = whole.rejected {
            return Err(name);
        }
        if whole.replaced.is_none() {
            return Ok(None);
        }
        let Ok(all) = serde_json::from_str::<serde_json::Map<String, Value>>(answers.get()) else {
            return Ok(whole.replaced);
        };
        let mut out = serde_json::Map::new();
        for (key, value) in all {
            let value = match self.rules.request(&value.to_string()).replaced {
                None => value,
                Some(new) => serde_json::from_str(&new).map_err(|_| Arc::from("inputResponses"))?,
            };
            out.insert(key, value);
        }
        // What is left to rewrite is in a key: a renamed key answers no question, and the
        // key must not reach the backend either.
        let rewritten = Value::Object(out).to_string();
        let again = self.rules.request(&rewritten);
        if again.rejected.is_some() || again.replaced.is_some() {
            let name = whole.events.first().map(|e| e.guardrail.clone());
            return Err(name.unwrap_or_else(|| Arc::from("inputResponses")));
        }
        Ok(Some(rewritten))
    }

    /// The answer's result checked (and the webhooks asked): passed, rewritten, or, refused,
    /// an `isError` tool result (a JSON-RPC error for `resources/read` and `prompts/get`)
    /// naming the guardrail.
    pub(crate) async fn response(&self, answer: Answer, caller: &Principal, era: &str) -> Answer {
        // A `tasks/update` is checked on its way in (its answers); what it returns says only
        // that they were taken.
        if !self.rules.runs_at(Stage::Response) || self.method == "tasks/update" {
            return answer;
        }
        let msg = match Message::parse(&answer.body) {
            Ok(msg) => msg,
            // Not readable, so not checkable: refused, never passed unchecked.
            Err(e) => return self.unreadable(answer, e.id, caller, era),
        };
        let Some(id) = msg.id.clone() else {
            return answer;
        };
        if let Some(error) = msg.error.map(|e| e.get().to_owned()) {
            return self.error(answer, &id, &error, caller, era).await;
        }
        let Some(result) = msg.result else {
            return answer;
        };
        let mut checked = self.rules.result(result.get(), self.output_schema.as_ref());
        if checked.rejected.is_none() {
            let message = String::from_utf8_lossy(&answer.body).into_owned();
            let hooked = self
                .guards
                .hooks
                .run(
                    &self.rules,
                    Stage::Response,
                    self.hook_request(caller, era, "response", &message),
                )
                .await;
            let schema = self.output_schema.as_ref();
            hooked.apply(&mut checked, |new| self.rules.result(new, schema));
        }
        self.audit(caller, era, "response", &checked.events);
        if let Some(name) = &checked.rejected {
            if matches!(self.method.as_str(), "tools/call" | "tasks/result") {
                let body = switchboard_guard::rejected_result(name);
                return Answer::ok(switchboard_wire::encode_result(&id, &body));
            }
            return Answer::error(&id, &refusal(name));
        }
        match checked.replaced {
            Some(new) => Answer::ok(switchboard_wire::encode_result(&id, &new)),
            None => answer,
        }
    }

    fn hook_request<'a>(
        &'a self,
        caller: &'a Principal,
        era: &'a str,
        direction: &'a str,
        message: &'a str,
    ) -> HookRequest<'a> {
        HookRequest {
            principal: caller,
            backend: &self.backend,
            tool: self.tool.as_deref(),
            method: &self.method,
            era,
            direction,
            message,
        }
    }

    fn audit(&self, caller: &Principal, era: &str, direction: &str, events: &[Event]) {
        let place = Some((self.backend.as_str(), self.tool.as_deref()));
        self.guards
            .record(Some((caller, era)), &self.method, direction, place, events);
    }
}

/// What checks backend messages other than answers with `guards` (`ProgressRoutes::guard`).
pub(crate) fn note_check(
    guards: &Option<Arc<Guardrails>>,
) -> Option<Box<dyn crate::progress::NoteCheck>> {
    let guards = guards.clone()?;
    Some(Box::new(guards))
}

/// The JSON-RPC error (`-32603`) that takes the place of a refused answer or backend
/// message: names the guardrail, never the match.
pub(crate) fn refusal(guardrail: &str) -> ErrorObject {
    crate::progress::refusal(guardrail)
}

/// Whether `raw` is a JSON-RPC error object (an integer `code`, a string `message`).
pub(crate) fn is_error(raw: &str) -> bool {
    let Ok(Value::Object(e)) = serde_json::from_str::<Value>(raw) else {
        return false;
    };
    e.get("code").is_some_and(|c| c.is_i64()) && e.get("message").is_some_and(Value::is_string)
}

/// A tool name or resource URI as an audit line shows it: whatever a built-in scanner finds
/// in it (a key in a presigned URI, an injection in a backend's tool name) redacted, so the
/// audit never holds what the guardrail kept from the client.
fn audit_name(name: &str) -> String {
    use switchboard_guard::{Kind, Kinds};
    let mut shown = name.to_owned();
    let Some(scanner) = switchboard_guard::Scanner::builtin() else {
        return "[unchecked]".to_owned();
    };
    let every = [
        Kind::Email,
        Kind::Phone,
        Kind::Iban,
        Kind::CreditCard,
        Kind::Injection,
    ]
    .into_iter()
    .fold(Kinds::secrets(), Kinds::with);
    let mut counts = switchboard_guard::walk::Counts::new();
    switchboard_guard::walk::text(scanner, every, &mut shown, true, &mut counts);
    shown
}

/// The request as the webhook sees it: the client's JSON-RPC message.
fn wire_text(msg: &Message<'_>) -> String {
    let params = msg.params;
    match (msg.id.as_ref(), msg.method) {
        (Some(id), Some(m)) => String::from_utf8_lossy(&encode_request(id, m, params)).into_owned(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;
