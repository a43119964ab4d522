//! A Modern backend's `input_required` on its way to a Modern client: each of its
//! `inputRequests` is a question the backend asks the client, checked as a backend's request
//! to a client is on every other path ([`crate::progress::ProgressRoutes::vet`]), whatever
//! guardrails cover the call's tool.

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use switchboard_wire::{encode_result, has_key_variant, object_member, with_member};
use switchboard_wire::{Message, RequestId};

use crate::progress::{ProgressRoutes, Vetted};
use crate::Answer;

/// `answer` (an `input_required` result) with its `inputRequests` checked whole (the
/// requests' keys and every member of each): redacted in place, or, refused, the
/// guardrail's error in place of the answer. What the client gets is exactly what was
/// checked: the member is written back as it was read (a repeated key once), and one this
/// side cannot read, or a key another parser would take for it, is refused.
pub(crate) fn input_requests(progress: &ProgressRoutes, id: &RequestId, answer: Answer) -> Answer {
    if !progress.guarded() {
        return answer;
    }
    let Ok(msg) = Message::parse(&answer.body) else {
        return answer;
    };
    let Some(result) = msg.result else {
        return answer;
    };
    let unread = || Answer::error(id, &super::refusal("input requests"));
    if has_key_variant(result.get(), "inputRequests") {
        return unread();
    }
    let Some(raw) = object_member(result, "inputRequests") else {
        return answer;
    };
    let Ok(asked) = serde_json::from_str::<Map<String, Value>>(raw.get()) else {
        return unread();
    };
    let Ok(whole) = RawValue::from_string(Value::Object(asked).to_string()) else {
        return unread();
    };
    let checked = match progress.vet("input_required", Some(&whole)) {
        Vetted::Pass => whole,
        Vetted::Replaced(new) => new,
        Vetted::Refused(guardrail) => return Answer::error(id, &super::refusal(&guardrail)),
    };
    match with_member(result, "inputRequests", checked.get()) {
        Some(result) => Answer::ok(encode_result(id, result.get())),
        // Never delivered unchecked.
        None => unread(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refuses everything it is shown that holds `SECRET`.
    #[derive(Debug)]
    struct RefuseSecret;
    impl crate::progress::NoteCheck for RefuseSecret {
        fn check(&self, _method: &str, params: &RawValue) -> Vetted {
            match params.get().contains("SECRET") {
                true => Vetted::Refused("secrets".into()),
                false => Vetted::Pass,
            }
        }

        fn answer(&self, _backend: &str, answer: &RawValue) -> Vetted {
            self.check("", answer)
        }
    }

    fn asked(requests: &str) -> Answer {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"1","result":{{"resultType":"input_required","inputRequests":{requests}}}}}"#
        );
        Answer::ok(body.into_bytes())
    }

    /// A backend's question cannot reach the client unchecked: not in `params`, not in
    /// another member or a request's key, not behind a number this side cannot read, not
    /// in a repeated key's other copy, not under a key spelled in another case.
    #[test]
    fn every_member_of_an_input_request_is_checked_and_what_cannot_be_read_is_refused() {
        let progress = ProgressRoutes::default();
        progress.guard(Some(Box::new(RefuseSecret)));
        let id = RequestId::from_string("1");
        let clean = r#"{"k":{"method":"elicitation/create","params":{"message":"name?"}}}"#;
        let out = input_requests(&progress, &id, asked(clean));
        assert!(out.error_code.is_none(), "a clean question passes");
        for hidden in [
            r#"{"k":{"method":"elicitation/create","params":{"message":"SECRET"}}}"#,
            r#"{"k":{"method":"elicitation/create","params":{"message":"SECRET","x":1e400}}}"#,
            r#"{"k":{"method":"elicitation/create","params":{},"note":"SECRET"}}"#,
            r#"{"k":{"method":"elicitation/create","note":"SECRET"}}"#,
            r#"{"SECRET":{"method":"elicitation/create","params":{"message":"ok"}}}"#,
        ] {
            let out = input_requests(&progress, &id, asked(hidden));
            assert!(out.error_code.is_some(), "{hidden}");
            assert!(
                !String::from_utf8_lossy(&out.body).contains("SECRET"),
                "{hidden}"
            );
        }
    }
}
