//! MRTR across eras at the gateway, for Modern backends (the Legacy-backend direction is
//! `mrtr`):
//!
//! - **Legacy client, Modern backend** (`legacy_client`): the backend's `input_required` is
//!   answered by asking the client on its session (`client_ask`), and the backend is retried
//!   with the `inputResponses` and its own `requestState`, in bounded rounds; the client sees
//!   one ordinary result.
//! - **Modern client, Modern backend** (`sealed`): the backend's `requestState` never reaches
//!   the client bare. The client gets a gateway token that seals it together with the backend,
//!   the caller, the method, the call's params, an expiry and a nonce; the retry is verified,
//!   used once, and unwrapped before the backend sees it.

mod envelope;
mod legacy_client;
mod sealed;

pub(crate) use legacy_client::ToLegacy;
pub(crate) use sealed::{replica_of_token, Bound, SealedRelay};

/// Most rounds of `input_required` one Legacy client's call may go through.
pub(crate) const MAX_ROUNDS: usize = 8;

/// Whether a Modern result (JSON the gateway already parsed) asks for input; `Err` when its
/// `resultType` is ambiguous (`ResultMarks::ambiguous_type`): a loose client parser may read
/// `input_required` where the gateway reads complete, so such a result is never passed on.
/// Asked of every Modern answer to an MRTR method, so it walks the text rather than
/// re-validating it.
pub(crate) fn is_input_required(result: &str) -> Result<bool, AmbiguousType> {
    let marks = switchboard_wire::ResultMarks::of(result);
    match marks.ambiguous_type {
        true => Err(AmbiguousType),
        false => Ok(marks.input_required()),
    }
}

/// A Modern backend's result whose `resultType` cannot be read one way (spelled in another
/// case, or more than once): the gateway cannot tell whether it asks for input, so it never
/// passes it on, checked or not.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AmbiguousType;

impl AmbiguousType {
    /// The client's answer in its place: an internal error naming the backend's fault.
    pub(crate) fn error() -> switchboard_wire::ErrorObject {
        switchboard_wire::ErrorObject::new(
            switchboard_wire::codes::INTERNAL_ERROR,
            "the backend's answer is invalid: its result names resultType more than once or in another case",
        )
    }
}
