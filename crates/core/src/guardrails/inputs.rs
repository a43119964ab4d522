//! A Modern backend's `input_required` on its way to a Modern client: each of its
//! `inputRequests` is a question the backend asks the client, checked as a backend's request
//! to a client is on every other path ([`crate::progress::ProgressRoutes::vet`]), whatever
//! guardrails cover the call's tool.

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use switchboard_wire::{encode_result, object_member, with_member, Message, RequestId};

use crate::progress::{ProgressRoutes, Vetted};
use crate::Answer;

/// `answer` (an `input_required` result) with each input request's `params` checked:
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
    let asked = object_member(result, "inputRequests")
        .and_then(|r| serde_json::from_str::<Map<String, Value>>(r.get()).ok());
    let Some(mut asked) = asked else {
        return answer;
    };
    let mut changed = false;
    for request in asked.values_mut() {
        let method = request["method"].as_str().unwrap_or_default().to_owned();
        let Some(params) = request.get("params").filter(|p| !p.is_null()) else {
            continue;
        };
        let Ok(raw) = RawValue::from_string(params.to_string()) else {
            continue;
        };
        match progress.vet(&method, Some(&raw)) {
            Vetted::Pass => {}
            Vetted::Replaced(new) => {
                if let Ok(new) = serde_json::from_str::<Value>(new.get()) {
                    request["params"] = new;
                    changed = true;
                }
            }
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
