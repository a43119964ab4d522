//! Backend messages other than answers, checked on their way to a client: progress notes,
//! log messages, `resources/updated`, task status, any other notification, and a backend's
//! own requests to the client (elicitation, sampling). They name no tool, so every
//! guardrail with built-in patterns that runs on `response` checks them — the gateway's,
//! every backend's and every tool's, whatever its `tools` — over the whole `params`
//! (`_meta` and values of any type included). Webhooks are not asked (one per note would
//! put a hook's latency on every log line).

use std::sync::Arc;

use serde_json::value::RawValue;
use switchboard_guard::{Rule, RuleSet};

use super::Guardrails;
use crate::progress::Vetted;

impl Guardrails {
    /// Every response rule that scans, once each by name: the rules for messages that carry
    /// no tool name.
    pub(crate) fn note_rules(&self) -> &RuleSet {
        self.notes.get_or_init(|| {
            let mut seen: Vec<Arc<Rule>> = Vec::new();
            let all = (self.gateway.iter())
                .chain(self.backends.values().flatten())
                .chain(self.tools.values().flat_map(|t| t.values().flatten()));
            for r in all {
                if r.response && !r.kinds.is_empty() && !seen.iter().any(|s| s.name == r.name) {
                    seen.push(r.clone());
                }
            }
            RuleSet::new(seen)
        })
    }

    /// A backend message's `params` (`method`: the notification or request it is): passed,
    /// rewritten (redacted) or refused; each action audited as a `response`.
    pub(crate) fn note(&self, method: &str, params: &RawValue) -> Vetted {
        let rules = self.note_rules();
        if rules.is_empty() {
            return Vetted::Pass;
        }
        let checked = rules.result(params.get(), None);
        self.record(None, method, "response", None, &checked.events);
        if let Some(name) = checked.rejected {
            return Vetted::Refused(name);
        }
        let Some(new) = checked.replaced else {
            return Vetted::Pass;
        };
        match RawValue::from_string(new) {
            Ok(params) => Vetted::Replaced(params),
            // Never delivered unchecked: refused by the rule that changed it.
            Err(_) => match checked.events.first() {
                Some(e) => Vetted::Refused(e.guardrail.clone()),
                None => Vetted::Pass,
            },
        }
    }
}

impl crate::progress::NoteCheck for Arc<Guardrails> {
    fn check(&self, method: &str, params: &RawValue) -> Vetted {
        self.note(method, params)
    }

    fn answer(&self, backend: &str, answer: &RawValue) -> Vetted {
        match self.client_answer(backend, answer.get()) {
            super::ClientAnswer::Pass => Vetted::Pass,
            super::ClientAnswer::Refused(guardrail) => Vetted::Refused(guardrail),
            // Not JSON after redaction: not sent unchecked.
            super::ClientAnswer::Replaced(new) => match RawValue::from_string(new) {
                Ok(raw) => Vetted::Replaced(raw),
                Err(_) => Vetted::Refused(Arc::from("answer")),
            },
        }
    }
}
