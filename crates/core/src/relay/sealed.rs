//! Modern client, Modern backend: the backend's `requestState` reaches the client only inside
//! a gateway token, and comes back to the backend only from a verified, unused one.
//!
//! Token: `r2.<base64url(replica)>.<base64url(sealed payload)>`. The payload (JSON) names the
//! backend, carries the backend's own state (raw JSON, `null` when it gave none), the expiry
//! (unix seconds) and a 128-bit nonce; it is sealed with an AEAD (`envelope`: ChaCha20-Poly1305
//! under a key derived from the MRTR bridge's per-gateway key, `mrtr::Sealer`, for this domain
//! only), so a client can neither read nor alter it. The associated data binds it to the
//! replica named in the clear (empty outside replicas; it routes the retry home) and, not in the
//! token at all, the caller's issuer and subject, the method and a digest of the params
//! without `_meta`, `inputResponses` and `requestState`. So a token opens only for the same principal retrying
//! the same call on the same backend before it expires; its nonce is then remembered until
//! that expiry (bounded), so it opens once. Refusals use the bridge's answer (-32602,
//! `data.reason`), whatever the cause: a token, a foreign one and a reused one look alike
//! apart from that reason.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use switchboard_wire::{
    codes, object_member, retain_members, with_member, with_members, ErrorObject, RequestId,
};

use super::envelope::{associated, Envelope};
use super::{is_input_required, AmbiguousType};
use crate::mrtr::{params_digest, refused, unix_now, Refused, Sealer};
use crate::BackendId;
use crate::{Answer, CoreError, Principal};
use used::{Refusal, Used};

/// Largest backend `requestState` the gateway carries (JSON text bytes).
pub(crate) const STATE_MAX_BYTES: usize = 64 * 1024;
/// Domain of the relay's AEAD key (the bridge's held-call tokens MAC under another).
const DOMAIN: &str = "switchboard-relay-v2";
const PREFIX: &str = "r2.";

/// The sealed part of a token.
#[derive(Serialize, Deserialize)]
struct Payload {
    /// The backend whose state this is.
    b: String,
    /// Expiry, unix seconds.
    e: u64,
    /// Nonce (hex).
    n: String,
    /// The backend's own `requestState`, as it sent it (`None`: it sent none).
    s: Option<Box<RawValue>>,
}

/// The replica a relay token names in the clear (replicas only: its nonce is remembered
/// there), unverified.
pub(crate) fn replica_of_token(token: &str) -> Option<String> {
    let encoded = token.strip_prefix(PREFIX)?.split('.').next()?;
    let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
    String::from_utf8(bytes).ok().filter(|h| !h.is_empty())
}

/// The relay's memory: the used nonces and the token lifetime.
#[derive(Debug)]
pub(crate) struct SealedRelay {
    used: parking_lot::Mutex<Used>,
    ttl: Duration,
}

/// What a call's tokens are bound to besides their payload.
pub(crate) struct Bound<'a> {
    pub(crate) caller: &'a Principal,
    pub(crate) method: &'a str,
    pub(crate) backend: &'a BackendId,
    /// The call's params (the client's, as received).
    pub(crate) params: Option<&'a RawValue>,
}

impl Bound<'_> {
    /// The associated data of a token sealed at `replica` (empty: none) for this binding.
    fn associated(&self, replica: &str) -> Vec<u8> {
        associated(&[
            replica.as_bytes(),
            self.caller.issuer.as_bytes(),
            self.caller.subject.as_bytes(),
            self.method.as_bytes(),
            &self.digest(),
        ])
    }

    fn digest(&self) -> [u8; 32] {
        params_digest(self.params.map_or("null", |p| p.get()))
    }
}

impl SealedRelay {
    /// An empty relay whose tokens live `ttl` (at least a second: expiry is in seconds).
    pub(crate) fn new(ttl: Duration) -> Self {
        SealedRelay {
            used: parking_lot::Mutex::new(Used::default()),
            ttl: ttl.max(Duration::from_secs(1)),
        }
    }

    /// The client's params with the backend's own state in place of the gateway token, or
    /// `None` when the call carries no `requestState` (a first round). `Err(Ok)`: the answer;
    /// `Err(Err)`: the caller is over its share of the used-nonce table, or among its largest
    /// holders when it is full (answered as the bridge's own per-principal share is, 429
    /// with a retry time; `used`).
    pub(crate) fn open(
        &self,
        sealer: &Sealer,
        b: &Bound<'_>,
        id: &RequestId,
    ) -> Result<Option<Box<RawValue>>, Result<Answer, CoreError>> {
        // Another spelling would pass this check unopened and reach a backend whose parser
        // matches keys loosely as its own state: refused like a malformed token.
        if b.params
            .is_some_and(|p| switchboard_wire::has_key_variant(p.get(), "requestState"))
        {
            return Err(Ok(refused(id, Refused::Malformed)));
        }
        let Some(token) = b.params.and_then(|p| object_member(p, "requestState")) else {
            return Ok(None);
        };
        let payload = self.verify(sealer, b, token).map_err(|why| match why {
            Refusal::Refused(why) => Ok(refused(id, why)),
            Refusal::Over { limit, retry_after } => {
                Err(CoreError::RelayShareExhausted { limit, retry_after })
            }
        })?;
        let params = b
            .params
            .ok_or_else(|| Ok(refused(id, Refused::Malformed)))?;
        let unwrapped = match &payload.s {
            Some(state) => with_member(params, "requestState", state.get()),
            None => switchboard_wire::retain_members(params, |k| k != "requestState"),
        };
        unwrapped
            .map(Some)
            .ok_or_else(|| Ok(refused(id, Refused::Malformed)))
    }

    fn verify(&self, sealer: &Sealer, b: &Bound<'_>, token: &RawValue) -> Result<Payload, Refusal> {
        let malformed = Refusal::Refused(Refused::Malformed);
        let token: String = serde_json::from_str(token.get()).map_err(|_| malformed)?;
        let rest = token.strip_prefix(PREFIX).ok_or(malformed)?;
        let (replica, sealed) = rest.split_once('.').ok_or(malformed)?;
        let replica = URL_SAFE_NO_PAD.decode(replica).map_err(|_| malformed)?;
        let replica = String::from_utf8(replica).map_err(|_| malformed)?;
        let sealed = URL_SAFE_NO_PAD.decode(sealed).map_err(|_| malformed)?;
        let envelope = Envelope::new(&sealer.derive_key(DOMAIN)).ok_or(malformed)?;
        let bytes = envelope
            .open(&b.associated(&replica), &sealed)
            .ok_or(Refusal::Refused(Refused::Invalid))?;
        let payload: Payload = serde_json::from_slice(&bytes).map_err(|_| malformed)?;
        if payload.b != b.backend.as_str() {
            return Err(Refusal::Refused(Refused::Invalid));
        }
        // Expired (refused as such) or not, checked against the same clock as the table.
        (self.used.lock()).remember(&b.caller.key(), &payload.n, payload.e, unix_now())?;
        Ok(payload)
    }

    /// A Modern backend's answer as the client gets it: an `input_required` result's
    /// `requestState` replaced by a fresh token sealing it (minted even when the backend gave
    /// none, so every retry of a relayed round is bound to its caller). An error passes
    /// untouched, another result is `strip`ped, and one that cannot be rewritten becomes an
    /// internal error (fails closed).
    pub(crate) fn seal(
        &self,
        sealer: &Sealer,
        b: &Bound<'_>,
        id: &RequestId,
        answer: Answer,
    ) -> Answer {
        if answer.error_code.is_some() {
            return answer;
        }
        let Some(result) = result_of(&answer.body) else {
            return unrelayable(id);
        };
        match is_input_required(result.get()) {
            Ok(true) => {}
            Ok(false) => return Self::strip(id, answer),
            Err(_) => return Answer::error(id, &AmbiguousType::error()),
        }
        let state = object_member(&result, "requestState");
        if state.is_some_and(|s| s.get().len() > STATE_MAX_BYTES) {
            return too_large(id);
        }
        let payload = Payload {
            b: b.backend.as_str().to_owned(),
            e: unix_now() + self.ttl.as_secs(),
            n: crate::route::random_hex(),
            s: state.map(|s| s.to_owned()),
        };
        let replica = sealer.replica.clone().unwrap_or_default();
        let sealed = serde_json::to_vec(&payload).ok().and_then(|bytes| {
            let envelope = Envelope::new(&sealer.derive_key(DOMAIN))?;
            envelope.seal(&b.associated(&replica), bytes)
        });
        let Some(sealed) = sealed else {
            return too_large(id);
        };
        let token = format!(
            "{PREFIX}{}.{}",
            URL_SAFE_NO_PAD.encode(replica.as_bytes()),
            URL_SAFE_NO_PAD.encode(&sealed)
        );
        let token = Value::String(token).to_string();
        // Every other spelling of the key goes: a loose client parser would read it as state.
        let set = [("requestState", token.as_str())];
        match with_members(&result, &set, |k| !is_state_key(k)) {
            Some(sealed) => Answer::ok(switchboard_wire::encode_result(id, sealed.get())),
            None => unrelayable(id),
        }
    }

    /// A relayed result that does not ask for input but carries a `requestState` (in some
    /// spelling): the member is dropped, so the backend's state never reaches the client bare
    /// whatever the client's parser makes of the rest (`ResultMarks::request_state`). An
    /// answer that cannot be rewritten (not a result object) fails closed: an internal error.
    pub(crate) fn strip(id: &RequestId, answer: Answer) -> Answer {
        if answer.error_code.is_some() {
            return answer;
        }
        let stripped = result_of(&answer.body)
            .and_then(|result| retain_members(&result, |k| !is_state_key(k)));
        match stripped {
            Some(result) => Answer::ok(switchboard_wire::encode_result(id, result.get())),
            None => unrelayable(id),
        }
    }
}

/// `requestState` in any case, folded as strict JSON folds duplicate keys (keys arrive
/// decoded): what a loose parser reads as the state.
fn is_state_key(key: &str) -> bool {
    switchboard_wire::keys_fold_equal(key, "requestState")
}

/// The `result` member of an encoded response.
fn result_of(body: &[u8]) -> Option<Box<RawValue>> {
    let text = std::str::from_utf8(body).ok()?;
    let raw = RawValue::from_string(text.to_owned()).ok()?;
    object_member(&raw, "result").map(|r| r.to_owned())
}

/// A relayed answer the gateway cannot rewrite: never passed on as it came, since it might
/// carry the backend's state bare.
fn unrelayable(id: &RequestId) -> Answer {
    let err = ErrorObject::new(
        codes::INTERNAL_ERROR,
        "the backend's answer could not be relayed: its result is not an object the gateway can rewrite",
    );
    Answer::error(id, &err)
}

fn too_large(id: &RequestId) -> Answer {
    let err = ErrorObject::new(
        codes::INTERNAL_ERROR,
        format!("the backend's requestState is larger than the gateway carries ({STATE_MAX_BYTES} bytes)"),
    );
    Answer::error(id, &err)
}

mod used;

#[cfg(test)]
mod tests;
