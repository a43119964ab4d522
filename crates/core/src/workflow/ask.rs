//! How a composite's elicitation step asks a Legacy client: `elicitation/create` on the
//! caller's session (the calling request's stream first), through the gateway's
//! client-request path (`client_ask::ClientAsks::ask`), which routes the answer back by a
//! gateway-minted key within that session only.

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::client_ask::ClientAsks;
use crate::session::SessionId;
use crate::CoreError;

/// Refuses, before anything runs, a Legacy caller who could not answer a composite's
/// elicitation steps (no session, or no `elicitation` capability declared): the spec's
/// -32021, not a run that fails half-way.
pub(crate) fn can_ask(asks: &ClientAsks, session: Option<&SessionId>) -> Result<(), CoreError> {
    let Some(sid) = session else {
        return Err(CoreError::SessionRequired("elicitation/create"));
    };
    if asks.caps(sid)?.elicitation {
        Ok(())
    } else {
        Err(CoreError::MissingClientCapability("elicitation"))
    }
}

/// The client's answer to `method` with `params`, or why there is none.
pub(crate) async fn ask_legacy_client(
    asks: &ClientAsks,
    session: Option<&SessionId>,
    stream: Option<&mpsc::Sender<Bytes>>,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let Some(sid) = session else {
        return Err("a sessionless caller cannot be asked for input".into());
    };
    let params = RawValue::from_string(params.to_string()).map_err(|e| e.to_string())?;
    match asks.ask(sid, stream, method, Some(&params)).await {
        Ok(Ok(result)) => serde_json::from_str(result.get()).map_err(|e| e.to_string()),
        Ok(Err(error)) => Err(format!("the client answered an error: {}", error.get())),
        Err(e) => Err(e.to_string()),
    }
}
