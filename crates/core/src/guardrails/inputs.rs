//! A Modern backend's `input_required` on its way to a Modern client: each of its
//! `inputRequests` is a question the backend asks the client, checked as a backend's request
//! to a client is on every other path ([`crate::progress::ProgressRoutes::vet`]), whatever
//! guardrails cover the call's tool.

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use switchboard_wire::{encode_result, object_member, with_member, Message, RequestId};

use crate::progress::{ProgressRoutes, Vetted};
use crate::Answer;

/// `answer` (an `input_required` result) with each input request checked, whole:
/// redacted in place, or, one refused, the guardrail's error in place of the answer.
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
    let Some(raw) = object_member(result, "inputRequests") else {
        return answer;
    };
    // What cannot be read here is not delivered unchecked (a number out of `f64`'s range,
    // say, which clients may still read).
    let Ok(mut asked) = serde_json::from_str::<Map<String, Value>>(raw.get()) else {
        return Answer::error(id, &super::refusal("input requests"));
    };
    let mut changed = false;
    for request in asked.values_mut() {
        // The whole request is checked, not only its `params`: every member reaches the client.
        let method = request["method"].as_str().unwrap_or_default().to_owned();
        let Ok(whole) = RawValue::from_string(request.to_string()) else {
            return Answer::error(id, &super::refusal("input requests"));
        };
        match progress.vet(&method, Some(&whole)) {
            Vetted::Pass => {}
            Vetted::Replaced(new) => match serde_json::from_str::<Value>(new.get()) {
                Ok(new) => {
                    *request = new;
                    changed = true;
                }
                Err(_) => return Answer::error(id, &super::refusal("input requests")),
            },
            Vetted::Refused(guardrail) => {
                return Answer::error(id, &super::refusal(&guardrail));
            }
        }
    }
    if !changed {
        return answer;
    }
    let asked = Value::Object(asked).to_string();
    match with_member(result, "inputRequests", &asked) {
        Some(result) => Answer::ok(encode_result(id, result.get())),
        // Never delivered unchecked.
        None => Answer::error(id, &super::refusal("input requests")),
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
    }

    fn asked(requests: &str) -> Answer {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"1","result":{{"resultType":"input_required","inputRequests":{requests}}}}}"#
        );
        Answer::ok(body.into_bytes())
    }

    /// A backend's question cannot reach the client unchecked: not in `params`, not in
    /// another member, not behind a number this side cannot read.
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
