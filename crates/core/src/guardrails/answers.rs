//! The response stage's answers that are not results: a backend's error, checked like a
//! result, and an answer the rules cannot read, refused.

use switchboard_guard::Event;

use super::{is_error, refusal, Scope, Stage};
use crate::{Answer, Principal};

impl Scope<'_> {
    /// An answer that does not parse (one holding the key serde_json's `Value` would expand,
    /// `Message::parse`) in place of one the response rules would check: refused by the first
    /// of them, audited as `unreadable`. Without an id there is no answer to replace.
    pub(super) fn unreadable(
        &self,
        answer: Answer,
        id: Option<switchboard_wire::RequestId>,
        caller: &Principal,
        era: &str,
    ) -> Answer {
        let rule = (self.rules.rules().iter()).find(|r| r.response);
        let (Some(id), Some(rule)) = (id, rule) else {
            return answer;
        };
        let event = Event {
            guardrail: rule.name.clone(),
            action: switchboard_guard::Action::Reject,
            kind: "unreadable",
            count: 1,
        };
        self.audit(caller, era, "response", std::slice::from_ref(&event));
        if matches!(self.method.as_str(), "tools/call" | "tasks/result") {
            let body = switchboard_guard::rejected_result(&rule.name);
            return Answer::ok(switchboard_wire::encode_result(&id, &body));
        }
        Answer::error(&id, &refusal(&rule.name))
    }

    /// A backend's error answer: its `error` (message and data) checked by the built-in
    /// response rules, so an error is no way around them, and the webhooks asked about it as
    /// about a result (a hook's `replacement` must be an error object, `code` and `message`);
    /// refused, the gateway's own error takes its place.
    pub(super) async fn error(
        &self,
        answer: Answer,
        id: &switchboard_wire::RequestId,
        error: &str,
        caller: &Principal,
        era: &str,
    ) -> Answer {
        let mut checked = self.rules.result(error, None);
        if checked.rejected.is_none() {
            let message = String::from_utf8_lossy(&answer.body).into_owned();
            let hooked = (self.guards.hooks)
                .run(
                    &self.rules,
                    Stage::Response,
                    self.hook_request(caller, era, "response", &message),
                )
                .await;
            hooked.apply(&mut checked, |new| self.rules.result(new, None));
            if checked.replaced.as_deref().is_some_and(|e| !is_error(e)) {
                checked.rejected = checked.events.last().map(|e| e.guardrail.clone());
            }
        }
        self.audit(caller, era, "response", &checked.events);
        if let Some(name) = &checked.rejected {
            return Answer::error(id, &refusal(name));
        }
        match checked.replaced {
            Some(new) => Answer {
                body: switchboard_wire::restore_response(id, "error", &new),
                error_code: answer.error_code,
            },
            None => answer,
        }
    }
}
