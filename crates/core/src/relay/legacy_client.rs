//! A Legacy client's `tools/call`, `prompts/get` or `resources/read` on a Modern backend that
//! answers `input_required`: each input request goes to the client as a real request on its
//! session, and the backend is retried with the answers (see the parent module).

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use switchboard_wire::classify::META_CLIENT_CAPABILITIES;
use switchboard_wire::{codes, ErrorObject, RequestId};
use switchboard_wire::{
    encode_error, restore_response, retain_members, with_members, with_meta_member,
};

use tokio_util::sync::CancellationToken;

use super::{is_input_required, AmbiguousType, MAX_ROUNDS};
use crate::client_ask::ClientAsks;
use crate::in_flight::InFlightGuard;
use crate::progress::Vetted;
use crate::resolve::Route;
use crate::send::{Outgoing, Sender};
use crate::session::SessionId;
use crate::{CoreError, Exchange, MAX_ASKS};

/// What the backend asked for in one round.
struct Round {
    requests: Vec<(String, String, Option<Box<RawValue>>)>,
    state: Option<Box<RawValue>>,
}

impl Round {
    /// The round one backend answer asks for: `Ok(None)` when it is final (an error, or a
    /// result that asks for nothing), `Err` the client's answer when the backend broke the
    /// rules (a `resultType` read two ways is never passed on as complete: a loose parser
    /// may read it as a question).
    fn in_answer(
        id: &RequestId,
        answer: &switchboard_upstream::BackendResponse,
    ) -> Result<Option<Round>, Vec<u8>> {
        if answer.is_error() {
            return Ok(None);
        }
        let Ok(result) = RawValue::from_string(answer.payload().to_owned()) else {
            return Ok(None);
        };
        match is_input_required(result.get()) {
            Ok(true) => Round::of(&result)
                .map(Some)
                .map_err(|w| backend_fault(id, w)),
            Ok(false) => Ok(None),
            Err(_) => Err(encode_error(Some(id), &AmbiguousType::error())),
        }
    }

    /// The `inputRequests` and `requestState` of an `input_required` result.
    fn of(result: &RawValue) -> Result<Round, &'static str> {
        let state = switchboard_wire::object_member(result, "requestState").map(|s| s.to_owned());
        let requests = match switchboard_wire::object_member(result, "inputRequests") {
            None => Map::new(),
            Some(r) => serde_json::from_str::<Map<String, Value>>(r.get())
                .map_err(|_| "inputRequests is not an object")?,
        };
        if requests.len() > MAX_ASKS {
            return Err("too many inputRequests in one round");
        }
        let mut out = Vec::with_capacity(requests.len());
        for (key, request) in requests {
            let method = request["method"]
                .as_str()
                .ok_or("an inputRequest has no method")?
                .to_owned();
            let params = match request.get("params") {
                None | Some(Value::Null) => None,
                Some(p) => RawValue::from_string(p.to_string()).ok(),
            };
            out.push((key, method, params));
        }
        Ok(Round {
            requests: out,
            state,
        })
    }
}

/// The backend broke the MRTR rules: the client gets a plain internal error, once.
fn backend_fault(id: &RequestId, what: &str) -> Vec<u8> {
    let err = ErrorObject::new(
        codes::INTERNAL_ERROR,
        format!("the backend's request for input could not be relayed: {what}"),
    );
    encode_error(Some(id), &err)
}

/// A Legacy client's call on a Modern backend: what relaying its rounds takes, given
/// explicitly.
pub(crate) struct ToLegacy<'a> {
    /// Where each round goes (its session's in-flight table included).
    pub(crate) sender: &'a Sender,
    /// How the client is asked, and what it declared it can answer.
    pub(crate) asks: &'a ClientAsks,
}

impl ToLegacy<'_> {
    /// `params` (in the gateway's Modern envelope) declaring, as `clientCapabilities`, the
    /// input capabilities the Legacy client declared in its `initialize`: the backend asks
    /// only for what the client can give, and answers -32021 for what it cannot.
    pub(crate) fn with_client_caps(
        &self,
        call: &Exchange<'_>,
        params: Box<RawValue>,
    ) -> Result<Box<RawValue>, CoreError> {
        let Some(sid) = call.session() else {
            return Ok(params);
        };
        let caps = self.asks.caps(sid)?;
        let mut declared = Map::new();
        for (name, has) in [
            ("elicitation", caps.elicitation),
            ("sampling", caps.sampling),
            ("roots", caps.roots),
        ] {
            if has {
                declared.insert(name.to_owned(), Value::Object(Map::new()));
            }
        }
        let declared = Value::Object(declared).to_string();
        with_meta_member(&params, META_CLIENT_CAPABILITIES, &declared)
            .ok_or(CoreError::InvalidParams("params._meta must be an object"))
    }

    /// Sends `params` (already in the gateway's Modern envelope) and answers every
    /// `input_required` round by asking the client, at most [`MAX_ROUNDS`] times. Returns
    /// the backend's final answer, or the answer the client gets instead. The whole call,
    /// every round and question included, has one deadline: `max_request_time` from here.
    pub(crate) async fn relay_to_legacy(
        &self,
        call: &Exchange<'_>,
        (id, name): (&RequestId, &str),
        route: &Route,
        params: Box<RawValue>,
    ) -> Result<Result<switchboard_upstream::BackendResponse, Vec<u8>>, CoreError> {
        let limit = self.sender.max_request_time;
        let rounds = self.relay_rounds(call, (id, name), route, params);
        match tokio::time::timeout(limit, rounds).await {
            Ok(answer) => answer,
            Err(_) => Err(self
                .sender
                .attributed(&route.backend, CoreError::Timeout(limit))),
        }
    }

    async fn relay_rounds(
        &self,
        call: &Exchange<'_>,
        (id, name): (&RequestId, &str),
        route: &Route,
        params: Box<RawValue>,
    ) -> Result<Result<switchboard_upstream::BackendResponse, Vec<u8>>, CoreError> {
        // The backend's state comes only from its own answer, never from the client: a Legacy
        // client has no state to resume, and one it sends (e.g. read out of a Modern token)
        // would skip the single use, expiry and caller binding the relay enforces.
        let params = first_round(&params).ok_or(CoreError::InvalidParams("params"))?;
        let mut retry = params.clone();
        for sent in 0..=MAX_ROUNDS {
            let answer = self
                .sender
                .send(Outgoing {
                    session: call.session(),
                    id,
                    name,
                    params: Some(&retry),
                    stream: call.stream.clone(),
                    listen: None,
                    route,
                    credential: call.caller.credential.as_ref(),
                })
                .await?;
            let round = match Round::in_answer(id, &answer) {
                Ok(Some(round)) => round,
                Ok(None) => return Ok(Ok(answer)),
                Err(fault) => return Ok(Err(fault)),
            };
            let Some(sid) = call.session() else {
                // No session, no client to ask: a Legacy client cannot read the result.
                return Err(CoreError::NoClientStream);
            };
            // Checked before the client is asked anything: no question whose answer would be
            // thrown away (one round too many, or a method the gateway will not relay).
            if sent == MAX_ROUNDS {
                break;
            }
            if let Some((_, method, _)) = round.requests.iter().find(|(_, m, _)| !relayable(m)) {
                tracing::warn!(method = %crate::error::clip(method), "backend asked for input by a method that is not relayed");
                return Ok(Err(backend_fault(id, "input request of an unknown method")));
            }
            let responses = match self.ask_round(call, (sid, id), route, &round).await? {
                Ok(responses) => responses,
                Err(refusal) => return Ok(Err(refusal)),
            };
            retry = next_params(&params, &responses, round.state.as_deref())
                .ok_or(CoreError::InvalidParams("params must be an object"))?;
        }
        Ok(Err(backend_fault(id, "too many rounds")))
    }

    /// Asks the client every question of `round`, in turn; `Ok(Err)`: the client refused
    /// one, and that is the call's answer. Meanwhile the call is the client's to cancel by
    /// its own id (`notifications/cancelled`): the wait ends with the cancelled answer.
    async fn ask_round(
        &self,
        call: &Exchange<'_>,
        (sid, id): (&SessionId, &RequestId),
        route: &Route,
        round: &Round,
    ) -> Result<Result<Vec<(String, Box<RawValue>)>, Vec<u8>>, CoreError> {
        let cancel = CancellationToken::new();
        let stream = call.stream.clone();
        let _waiting = InFlightGuard::waiting_on_client(
            &self.sender.registry.sessions,
            sid,
            (id, &route.backend),
            &cancel,
            stream,
        );
        let mut responses = Vec::with_capacity(round.requests.len());
        for (key, method, input) in &round.requests {
            // The backend's question is checked by the guardrails before the client sees it;
            // refused, that is the call's answer (the backend, stateless, waits for nothing).
            let checked;
            let input = match self.sender.registry.progress.vet(method, input.as_deref()) {
                Vetted::Pass => input.as_deref(),
                Vetted::Replaced(p) => {
                    checked = p;
                    Some(&*checked)
                }
                Vetted::Refused(guardrail) => {
                    let err = crate::guardrails::refusal(&guardrail);
                    return Ok(Err(encode_error(Some(id), &err)));
                }
            };
            let asked = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(CoreError::Cancelled),
                asked = self.asks.ask(sid, call.stream.as_ref(), method, input) => asked?,
            };
            let answer = match asked {
                Ok(answer) => answer,
                Err(error) => return Ok(Err(restore_response(id, "error", error.get()))),
            };
            // What the client answers reaches the backend (in the retry) only as its request
            // rules allow; refused, that is the call's answer.
            let progress = &self.sender.registry.progress;
            match progress.vet_answer(route.backend.as_str(), &answer) {
                Vetted::Pass => responses.push((key.clone(), answer)),
                Vetted::Replaced(new) => responses.push((key.clone(), new)),
                Vetted::Refused(guardrail) => {
                    let err = crate::guardrails::refusal(&guardrail);
                    return Ok(Err(encode_error(Some(id), &err)));
                }
            }
        }
        Ok(Ok(responses))
    }
}

/// The methods a backend may ask a client through the relay.
fn relayable(method: &str) -> bool {
    matches!(
        method,
        "elicitation/create" | "sampling/createMessage" | "roots/list"
    )
}

/// The client's params as the first round sends them: without `requestState` and
/// `inputResponses`, in any spelling ([`relay_owned`]).
fn first_round(params: &RawValue) -> Option<Box<RawValue>> {
    retain_members(params, |k| !relay_owned(k))
}

/// Whether a params member is one the relay alone sets: `requestState` or `inputResponses`
/// as a backend that matches keys loosely reads them (`RequestState`, `reque\u{17f}tState`,
/// `request_state`), so a client cannot hand a Modern backend a state of its own making.
fn relay_owned(key: &str) -> bool {
    // `request_state`, `input-responses`: what a model with camel-case aliases also reads.
    let bare: String = key.chars().filter(|c| !matches!(c, '_' | '-')).collect();
    switchboard_wire::keys_fold_equal(&bare, "requestState")
        || switchboard_wire::keys_fold_equal(&bare, "inputResponses")
}

/// The original params with this round's `inputResponses` (replacing the last round's) and
/// the backend's `requestState` echoed byte for byte (omitted when it gave none).
fn next_params(
    original: &RawValue,
    responses: &[(String, Box<RawValue>)],
    state: Option<&RawValue>,
) -> Option<Box<RawValue>> {
    let mut text = String::from("{");
    for (i, (key, answer)) in responses.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&Value::String(key.clone()).to_string());
        text.push(':');
        text.push_str(answer.get());
    }
    text.push('}');
    let mut set = vec![("inputResponses", text.as_str())];
    if let Some(state) = state {
        set.push(("requestState", state.get()));
    }
    with_members(original, &set, |k| !relay_owned(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_own_request_state_and_responses_never_reach_the_backend() {
        let p = RawValue::from_string(
            r#"{"name":"t","requestState":"raw-backend-state","inputResponses":{"a":{}},"arguments":{"n":1}}"#
                .to_owned(),
        )
        .unwrap();
        let sent = first_round(&p).unwrap();
        assert!(!sent.get().contains("requestState"), "{}", sent.get());
        assert!(!sent.get().contains("inputResponses"), "{}", sent.get());
        assert!(
            sent.get().contains(r#""arguments":{"n":1}"#),
            "{}",
            sent.get()
        );
    }

    /// Another spelling of either member (a loose parser's `requestState`) is dropped too,
    /// in the first round and in the next. Before, only the exact spellings were: a backend
    /// matching keys loosely read a client's `RequestState` as its own state (review LOW).
    #[test]
    fn a_loosely_spelled_request_state_never_reaches_the_backend() {
        let p = RawValue::from_string(
            r#"{"name":"t","RequestState":"forged","inputresponses":{"a":{}},"requeſtState":"x","request_state":"y","input-responses":{},"arguments":{"n":1}}"#
                .to_owned(),
        )
        .unwrap();
        let sent = first_round(&p).unwrap();
        assert_eq!(sent.get(), r#"{"name":"t","arguments":{"n":1}}"#);
        let answer = RawValue::from_string("{}".to_owned()).unwrap();
        let next = next_params(&p, &[("a".to_owned(), answer)], None).unwrap();
        assert_eq!(
            next.get(),
            r#"{"name":"t","arguments":{"n":1},"inputResponses":{"a":{}}}"#
        );
    }

    #[test]
    fn only_input_methods_are_relayed() {
        assert!(relayable("elicitation/create") && relayable("roots/list"));
        assert!(!relayable("tools/call") && !relayable("sampling/other"));
    }
}
