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

/// Whether a Modern result (JSON the gateway already parsed) asks for input. Asked of every
/// Modern answer to an MRTR method, so it walks the text rather than re-validating it.
pub(crate) fn is_input_required(result: &str) -> bool {
    switchboard_wire::ResultMarks::of(result).input_required()
}
