//! How a composite's elicitation step asks a Legacy client: `elicitation/create` on the
//! caller's session (the calling request's stream when it has one), through the gateway's
//! client-request path (`Gateway::ask_client`, from the relay work). Until that lands this
//! answers that the client cannot be asked.

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::session::SessionId;
use crate::Gateway;

impl Gateway {
    /// The client's answer to `method` with `params`, or why there is none.
    pub(crate) async fn ask_legacy_client(
        &self,
        session: Option<&SessionId>,
        stream: Option<&mpsc::Sender<Bytes>>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let _ = (session, stream, method, params);
        Err("this gateway cannot ask a Legacy client for input yet".into())
    }
}
