//! Guardrails: what flows between clients and tools, inspected and changed by declared
//! rules (`guardrails:` in the config). Pure: no I/O, no async runtime. The gateway (`core`)
//! decides where a rule set applies and calls [`RuleSet::request`], [`RuleSet::result`],
//! [`RuleSet::text`] or [`RuleSet::definition`] with raw JSON; the answer says whether to
//! pass it unchanged, replace it (always valid JSON) or refuse it, and which actions were
//! taken, for the audit line and the metric. Nothing here ever returns or logs matched text.
//!
//! The fast path: the built-in scanners run as one `RegexSet` over the raw bytes; a payload
//! with no hit (and no escape or split that could hide one, [`scan::may_hide`]) is neither
//! parsed nor copied.

use std::sync::Arc;

use serde_json::{json, Value};

pub mod scan;
pub mod spec;
pub mod truncate;
pub mod walk;

pub use scan::{Kind, Kinds, Scanner};
pub use spec::{Action, Direction, Failure, Rule, RuleSpec, WebhookSpec};

/// Errors compiling a config's guardrails (they name the rule, never a value).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuardError {
    #[error("guardrail `{0}`: {1}")]
    Invalid(String, String),
    #[error("guardrail name `{0}` is used twice")]
    Duplicate(String),
}

/// One action taken: one audit line and one count of
/// `switchboard_guardrail_actions_total{guardrail,action}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub guardrail: Arc<str>,
    pub action: Action,
    /// The kind of match (`aws_access_key`, `email`, `size`, `injection`, …).
    pub kind: &'static str,
    /// How many matches (for `size`: bytes cut, or the payload's size when refused).
    pub count: usize,
}

/// What to do with one payload.
#[derive(Debug, Default, PartialEq)]
pub struct Checked {
    /// `Some`: send this instead (valid JSON).
    pub replaced: Option<String>,
    /// `Some(name)`: refuse it, naming that guardrail.
    pub rejected: Option<Arc<str>>,
    pub events: Vec<Event>,
}

impl Checked {
    /// Nothing matched: pass the payload as it is.
    pub fn is_pass(&self) -> bool {
        self.replaced.is_none() && self.rejected.is_none()
    }
}

/// Which payload is checked (selects the rules that run on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Request,
    Response,
    ToolDefinition,
    PromptDefinition,
    ResourceDefinition,
}

impl Stage {
    fn selects(self, rule: &Rule) -> bool {
        match self {
            Stage::Request => rule.request,
            Stage::Response => rule.response,
            Stage::ToolDefinition => rule.tool_definitions,
            Stage::PromptDefinition => rule.prompt_definitions,
            Stage::ResourceDefinition => rule.resource_definitions,
        }
    }
}

/// The effective rules for one scope (a backend's tool), in config order.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<Arc<Rule>>,
}

impl RuleSet {
    pub fn new(rules: Vec<Arc<Rule>>) -> Self {
        RuleSet { rules }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    /// Whether any rule runs at `stage`.
    pub fn runs_at(&self, stage: Stage) -> bool {
        self.rules.iter().any(|r| stage.selects(r))
    }

    /// The webhooks to consult at `stage`, in order.
    pub fn webhooks(&self, stage: Stage) -> impl Iterator<Item = &Arc<Rule>> {
        self.rules
            .iter()
            .filter(move |r| stage.selects(r) && r.webhook.is_some())
    }

    /// A `tools/call`'s `arguments` (raw JSON). `truncate` does not apply to a request: an
    /// oversized one is refused.
    pub fn request(&self, arguments: &str) -> Checked {
        self.check(Stage::Request, arguments, None)
    }

    /// A result (raw JSON of `result`); `output_schema`: the tool's, which a redacted
    /// `structuredContent` must still satisfy (else it is removed, with a note).
    pub fn result(&self, result: &str, output_schema: Option<&Value>) -> Checked {
        self.check(Stage::Response, result, output_schema)
    }

    /// One definition (raw JSON of a tool, prompt or resource) at its stage.
    pub fn definition(&self, stage: Stage, def: &str) -> Checked {
        self.check(stage, def, None)
    }

    /// A plain text sent while a call runs (a progress notification's `message`): the
    /// response's rules; `truncate` cuts it to `maxBytes`.
    pub fn text(&self, message: &str) -> Checked {
        let Ok(quoted) = serde_json::to_string(message) else {
            return Checked::default();
        };
        let mut checked = self.check(Stage::Response, &quoted, None);
        if let Some(r) = checked.replaced.take() {
            checked.replaced = serde_json::from_str::<String>(&r).ok();
        }
        checked
    }

    fn check(&self, stage: Stage, raw: &str, schema: Option<&Value>) -> Checked {
        let mut out = Checked::default();
        let mut doc: Option<Value> = None;
        for rule in self.rules.iter().filter(|r| stage.selects(r)) {
            if let Some(max) = rule.max_bytes {
                if size(rule, stage, raw, max, &mut doc, &mut out) {
                    return out;
                }
            }
        }
        let scanning: Vec<&Arc<Rule>> = (self.rules.iter())
            .filter(|r| stage.selects(r) && !r.kinds.is_empty())
            .collect();
        let wanted = scanning.iter().fold(Kinds::NONE, |k, r| k.union(r.kinds));
        if !wanted.is_empty() {
            let Some(scanner) = Scanner::builtin() else {
                out.rejected = scanning.first().map(|r| r.name.clone());
                return out;
            };
            let hits = scanner.raw_hits(wanted, raw.as_bytes());
            if !hits.is_empty() || doc.is_some() || scan::may_hide(raw.as_bytes()) {
                let Some(v) = parsed(&mut doc, raw) else {
                    // What cannot be read as a JSON value (a number past f64, a lone
                    // surrogate, nesting past the parser's limit) cannot be checked: refused,
                    // never passed unchecked.
                    let rule = scanning.first().map(|r| r.name.clone());
                    return unreadable(rule, out);
                };
                if scan_rules(scanner, &scanning, stage, v, &mut out) {
                    return out;
                }
            }
        }
        if out.replaced.is_some() || doc.is_some() && changed(&out) {
            if let Some(mut v) = doc {
                if stage == Stage::Response {
                    recheck_structured(&mut v, schema);
                }
                out.replaced = serde_json::to_string(&v).ok();
            }
        }
        out
    }
}

/// A payload refused because it could not be read for checking, by guardrail `rule`.
fn unreadable(rule: Option<Arc<str>>, mut out: Checked) -> Checked {
    if let Some(rule) = rule {
        out.events.push(Event {
            guardrail: rule.clone(),
            action: Action::Reject,
            kind: "unreadable",
            count: 1,
        });
        out.rejected = Some(rule);
    }
    out
}

fn changed(out: &Checked) -> bool {
    out.events
        .iter()
        .any(|e| matches!(e.action, Action::Redact | Action::Truncate))
}

/// `raw` read once, as written and whole (`plain::parse_unique`): serde_json's own `Value`
/// would parse a string again behind its RawValue key, or keep one of two values of a key,
/// and a match a reader of `raw` sees would go unchecked; such a payload is unreadable.
fn parsed<'a>(doc: &'a mut Option<Value>, raw: &str) -> Option<&'a mut Value> {
    if doc.is_none() {
        *doc = switchboard_wire::plain::parse_unique(raw.as_bytes()).ok();
    }
    doc.as_mut()
}

/// A size rule; true when the payload is refused.
fn size(
    rule: &Rule,
    stage: Stage,
    raw: &str,
    max: usize,
    doc: &mut Option<Value>,
    out: &mut Checked,
) -> bool {
    if raw.len() <= max {
        return false;
    }
    let event = |action, count| Event {
        guardrail: rule.name.clone(),
        action,
        kind: "size",
        count,
    };
    match rule.action {
        Action::Truncate if stage == Stage::Response => {
            let Some(v) = parsed(doc, raw) else {
                // Too large and unreadable: it cannot be cut, so it is refused.
                out.events.push(event(Action::Reject, raw.len()));
                out.rejected = Some(rule.name.clone());
                return true;
            };
            let cut = truncate::truncate(v, max, &rule.name, raw.len());
            if !truncate::fits(v, max) {
                // Cut as far as it goes and still over: refused, never sent oversized.
                out.events.push(event(Action::Reject, raw.len()));
                out.rejected = Some(rule.name.clone());
                return true;
            }
            out.events.push(event(Action::Truncate, cut));
            false
        }
        Action::Warn => {
            out.events.push(event(Action::Warn, raw.len()));
            false
        }
        _ => {
            out.events.push(event(Action::Reject, raw.len()));
            out.rejected = Some(rule.name.clone());
            true
        }
    }
}

/// The scanning rules over the decoded payload; true when it is refused.
fn scan_rules(
    scanner: &Scanner,
    rules: &[&Arc<Rule>],
    stage: Stage,
    v: &mut Value,
    out: &mut Checked,
) -> bool {
    for rule in rules {
        let redact = rule.action == Action::Redact;
        let mut counts = walk::Counts::new();
        walk::walk(scanner, rule.kinds, v, redact, &mut counts);
        if stage == Stage::Response {
            walk::across_items(scanner, rule.kinds, v, redact, &mut counts);
        }
        if counts.is_empty() {
            continue;
        }
        let action = match rule.action {
            Action::Truncate => Action::Reject,
            a => a,
        };
        for (kind, count) in counts {
            out.events.push(Event {
                guardrail: rule.name.clone(),
                action,
                kind: kind.name(),
                count,
            });
        }
        if matches!(action, Action::Reject | Action::Quarantine) {
            out.rejected = Some(rule.name.clone());
            return true;
        }
    }
    false
}

/// After a change, `structuredContent` must still satisfy the tool's `outputSchema`;
/// otherwise it is removed and a note says so.
fn recheck_structured(v: &mut Value, schema: Option<&Value>) {
    let (Some(schema), Some(structured)) = (schema, v.get("structuredContent")) else {
        return;
    };
    let fits = jsonschema::validator_for(schema)
        .map(|val| val.is_valid(structured))
        .unwrap_or(false);
    if fits {
        return;
    }
    if let Some(obj) = v.as_object_mut() {
        obj.remove("structuredContent");
    }
    let note = json!({
        "type": "text",
        "text": "[structuredContent removed by a guardrail: after redaction it no longer matched the tool's outputSchema]"
    });
    match v.get_mut("content") {
        Some(Value::Array(items)) => items.push(note),
        _ => {
            if let Some(obj) = v.as_object_mut() {
                obj.insert("content".into(), json!([note]));
            }
        }
    }
}

/// The `isError` result a refused response becomes: names the guardrail, never the match.
pub fn rejected_result(guardrail: &str) -> String {
    json!({
        "content": [{"type": "text", "text": format!("Refused by guardrail \"{guardrail}\"")}],
        "isError": true
    })
    .to_string()
}

/// The message of the JSON-RPC error (-32602) a refused request gets.
pub fn rejected_message(guardrail: &str) -> String {
    format!("Refused by guardrail \"{guardrail}\"")
}

/// Compiles a config's rules (names unique).
pub fn compile(specs: &[RuleSpec]) -> Result<Vec<Arc<Rule>>, GuardError> {
    let mut out: Vec<Arc<Rule>> = Vec::with_capacity(specs.len());
    for spec in specs {
        if out.iter().any(|r| *r.name == *spec.name) {
            return Err(GuardError::Duplicate(spec.name.clone()));
        }
        if !spec.off {
            out.push(Arc::new(Rule::compile(spec)?));
        }
    }
    Ok(out)
}

/// `base` with `over` applied by name: a rule of the same name replaces the inherited one
/// (`off: true` removes it), a new name is added.
pub fn layered(base: &[Arc<Rule>], over: &[RuleSpec]) -> Result<Vec<Arc<Rule>>, GuardError> {
    let mut out: Vec<Arc<Rule>> = base.to_vec();
    for spec in over {
        let at = out.iter().position(|r| *r.name == *spec.name);
        match (at, spec.off) {
            (Some(i), true) => {
                out.remove(i);
            }
            (Some(i), false) => out[i] = Arc::new(Rule::compile(spec)?),
            (None, true) => {}
            (None, false) => out.push(Arc::new(Rule::compile(spec)?)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
