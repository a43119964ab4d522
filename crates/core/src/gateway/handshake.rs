//! A client's `initialize` answered by the gateway: the version negotiated for that client,
//! the capabilities it may see, its session opened (and written to the session store) and
//! audited. `Gateway::initialize` (on `/mcp`) and the HTTP+SSE endpoint (`gateway::sse`) use it.

use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::debug;

use switchboard_wire::{encode_result, method, version, Message, RequestId};

use crate::session::{SessionId, Transport};
use crate::{CoreError, Gateway, Initialized, Principal};

/// The handshake's view of the gateway (`Gateway::handshake`).
pub(crate) struct Handshake<'a> {
    pub(super) gateway: &'a Gateway,
}

impl Handshake<'_> {
    /// Whether Legacy sessions get upstream sessions of their own from `spawner`: a remote
    /// connected Modern first is asked once whether it speaks Legacy (`per_session::legacy`).
    pub(crate) async fn isolates_legacy(&self, spawner: &Arc<dyn crate::SpawnBackend>) -> bool {
        let gateway = self.gateway;
        let unprobed = gateway.backends.primary().backend.legacy_unprobed;
        let deadline = gateway.config.handshake_timeout;
        (gateway.per_session)
            .speaks_legacy(unprobed, spawner, deadline)
            .await
    }

    /// Answers a client's `initialize` from the backend's own handshake, with the version
    /// negotiated for *this* client, and opens its session. Audited, opened or refused (see
    /// `access`).
    ///
    /// With a session store the session is written there before it is answered (any replica
    /// may get its next request); a store that cannot take it refuses the session.
    pub(crate) async fn initialize_shared(
        &self,
        caller: &Principal,
        id: &RequestId,
        params: Option<&RawValue>,
    ) -> Result<Initialized, CoreError> {
        let gateway = self.gateway;
        let msg = initialize_message(id, params);
        let audit = gateway.config.access.audit_only(caller, &msg);
        let (negotiated, response) = self.negotiate(caller, id, params);
        let opened = self.open_session(caller, negotiated, params).await;
        match opened {
            Ok(session) => {
                audit.finish_initialize(Ok((&session, negotiated, &response[..])));
                Ok(Initialized { session, response })
            }
            Err(e) => {
                audit.finish_initialize(Err(&e));
                Err(e)
            }
        }
    }

    async fn open_session(
        &self,
        caller: &Principal,
        negotiated: &'static str,
        params: Option<&RawValue>,
    ) -> Result<SessionId, CoreError> {
        let gateway = self.gateway;
        let session = gateway.registry.sessions.create(negotiated, caller)?;
        debug!(?session, %negotiated, "session opened");
        self.remember_client_init(&session, negotiated, params);
        if let Err(e) = gateway.store.keep_opened(gateway, &session, params).await {
            let _ = gateway.registry.sessions.remove(
                session.as_str(),
                Transport::Streamable,
                Some(caller),
            );
            return Err(e);
        }
        Ok(session)
    }

    /// The gateway's answer to a client's `initialize`: the backend's own handshake, with the
    /// version negotiated for this client. Returns the version and the encoded response.
    pub(crate) fn negotiate(
        &self,
        caller: &Principal,
        id: &RequestId,
        params: Option<&RawValue>,
    ) -> (&'static str, Vec<u8>) {
        let gateway = self.gateway;
        let requested = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| {
                p.get("protocolVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        let negotiated = version::negotiate_legacy(requested.as_deref());
        let info = gateway.presented();
        let mut capabilities = gateway
            .config
            .access
            .visible_capabilities(caller, &info.capabilities);
        if let Some(caps) = capabilities.as_object_mut() {
            if !gateway.per_session.delivers_logs(&gateway.backends) {
                caps.remove("logging");
            }
            // A Modern notion (`server/discover`): 2025-11-25 capabilities have no extensions.
            caps.remove("extensions");
        }
        let mut result = json!({
            "protocolVersion": negotiated,
            "capabilities": capabilities,
            "serverInfo": info.server_info,
        });
        if let Some(instructions) = &info.instructions {
            result["instructions"] = instructions.clone();
        }
        (negotiated, encode_result(id, &result.to_string()))
    }

    /// Keeps the client's `initialize` on its new session
    /// (`per_session::remember_client_init`).
    pub(crate) fn remember_client_init(
        &self,
        session: &SessionId,
        negotiated: &str,
        params: Option<&RawValue>,
    ) {
        let gateway = self.gateway;
        let within = (&*gateway.registry, &*gateway.per_session);
        crate::per_session::remember_client_init(within, session, negotiated, params);
    }
}

/// An `initialize` request as the audit sees it, for callers that hold only its parts.
pub(crate) fn initialize_message<'a>(id: &RequestId, params: Option<&'a RawValue>) -> Message<'a> {
    Message {
        kind: switchboard_wire::MessageKind::Request,
        id: Some(id.clone()),
        method: Some(method::INITIALIZE),
        params,
        meta: params.and_then(|p| switchboard_wire::object_member(p, "_meta")),
        result: None,
        error: None,
    }
}
