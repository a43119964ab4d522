//! The HTTP+SSE sessions' gateway side ([`crate::Gateway::sse`]): what `legacy_sse`'s
//! [`SseStreams`] cannot do alone because it negotiates, audits, starts a session's own
//! process or cleans up: `initialize` (one entry, shared or per-session) and the session's end
//! when its stream closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tracing::debug;

use switchboard_wire::{method, Message, RequestId};

use crate::legacy_sse::{SseInitClaim, SseSession, SseStreams};
use crate::session::{EndReason, SessionId, Transport};
use crate::{CoreError, Gateway, Principal};

/// The HTTP+SSE endpoint's view of one gateway.
#[derive(Debug, Clone, Copy)]
pub struct SseEndpoint<'a> {
    pub(super) gateway: &'a Arc<Gateway>,
}

/// What an HTTP+SSE `initialize` became ([`SseEndpoint::initialize`]).
#[derive(Debug)]
pub enum SseInit {
    /// Answered by the gateway: the answer is already queued on the session's stream.
    Queued,
    /// Per-session mode: the session's one `initialize` is claimed; its own process is
    /// started by [`SseEndpoint::start_own`], run as a task of the session.
    Claimed(SseInitClaim),
}

impl SseEndpoint<'_> {
    /// The HTTP+SSE sessions' handle (resolve, run a request as a task, queue, keep alive).
    pub fn streams(&self) -> &SseStreams {
        &self.gateway.sse_streams
    }

    /// Opens an HTTP+SSE session (`GET /sse`) owned by `caller`, with its stream attached.
    pub fn open(&self, caller: &Principal) -> Result<SseSession, CoreError> {
        self.streams().open(caller)
    }

    /// Whether sessions may have backends of their own, whose requests a client answers: a
    /// response for a session this process does not hold is then the session's 404, not just
    /// another unexpected response.
    pub fn has_own_backends(&self) -> bool {
        self.gateway.is_per_session()
    }

    /// A client's `initialize` on an HTTP+SSE session. Shared: negotiates this client's
    /// version, records it, and queues the answer on the session's stream, audited like one
    /// on `/mcp`. Per-session mode (`run --isolation per-session`): claims the session's one
    /// `initialize` for [`Self::start_own`].
    pub fn initialize(
        &self,
        caller: &Principal,
        session: &SessionId,
        id: &RequestId,
        msg: &Message<'_>,
    ) -> Result<SseInit, CoreError> {
        if self.gateway.per_session.transparent().is_some() {
            return self
                .streams()
                .claim_initialize(session)
                .map(SseInit::Claimed);
        }
        let gateway = self.gateway;
        let params = msg.params;
        let init = crate::gateway::initialize_message(id, params);
        let audit = gateway.config.access.audit_only(caller, &init);
        let (negotiated, response) = gateway.handshake().negotiate(caller, id, params);
        let response = Bytes::from(response);
        let queued = (gateway.registry.sessions).queue_initialize_answer(
            session.as_str(),
            negotiated,
            &response,
        );
        if queued.is_ok() {
            gateway
                .handshake()
                .remember_client_init(session, negotiated, params);
        }
        match &queued {
            Ok(()) => audit.finish_initialize(Ok((session, negotiated, &response[..]))),
            Err(e) => audit.finish_initialize(Err(e)),
        }
        queued.map(|()| SseInit::Queued)
    }

    /// Per-session mode: the claimed session's `initialize`. Its own process is started and
    /// handed the client's own `initialize` (capabilities and all), exactly as on `/mcp`;
    /// the backend's answer, with the client's id, is returned for the session's stream.
    /// On failure the process is stopped and the session stays, without one. Audited like
    /// every `initialize`.
    pub async fn start_own(
        &self,
        caller: &Principal,
        claim: SseInitClaim,
        id: &RequestId,
        msg: &Message<'_>,
    ) -> Result<Vec<u8>, CoreError> {
        let audit = self.gateway.config.access.audit_only(caller, msg);
        let session = &claim.session;
        let result = self.start_process(caller, session, id, msg).await;
        match &result {
            Ok(response) => {
                let version = crate::per_session::answered_version(response);
                let version = version.as_deref().unwrap_or_default();
                audit.finish_initialize(Ok((session, version, &response[..])));
            }
            Err(e) => audit.finish_initialize(Err(e)),
        }
        // The session is usable from here on, before the client can see the answer.
        drop(claim);
        result
    }

    async fn start_process(
        &self,
        caller: &Principal,
        session: &SessionId,
        id: &RequestId,
        msg: &Message<'_>,
    ) -> Result<Vec<u8>, CoreError> {
        let gateway = self.gateway;
        let spawner = (gateway.per_session)
            .transparent()
            .ok_or_else(|| CoreError::Unsupported("per-session HTTP+SSE".into()))?;
        if !gateway.handshake().isolates_legacy(spawner).await {
            // The remote speaks no Legacy: this session shares its Modern handle through the
            // relay, as every later one will (the mode is off from now on).
            let (negotiated, response) = gateway.handshake().negotiate(caller, id, msg.params);
            (gateway.registry.sessions).set_protocol_version(session.as_str(), negotiated)?;
            gateway
                .handshake()
                .remember_client_init(session, negotiated, msg.params);
            return Ok(response);
        }
        let (negotiated, _) = gateway.handshake().negotiate(caller, id, msg.params);
        let own = gateway.own_upstreams();
        let backend = own.own_backend_for(msg)?;
        let opened = Arc::new(AtomicBool::new(false));
        let started = own
            .start_own(
                (session, &backend),
                spawner,
                id,
                (msg, caller.credential.as_ref()),
                opened.clone(),
            )
            .await;
        let sessions = &gateway.registry.sessions;
        match started {
            Ok(answer) if !answer.is_error() => {
                sessions.set_protocol_version(session.as_str(), negotiated)?;
                // From now on the process's exit ends the session (and closes its stream).
                opened.store(true, Ordering::Release);
                Ok(switchboard_wire::restore_response(
                    id,
                    answer.member(),
                    answer.payload(),
                ))
            }
            failed => {
                // Killed on drop: it never served the client, so no grace is owed.
                let _ = sessions.remove_own(session.as_str(), &backend);
                match failed {
                    Ok(answer) => Err(CoreError::BackendInit(crate::backend::refused(
                        method::INITIALIZE,
                        answer.payload(),
                    ))),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// The session's stream closed: end the session now (so nothing more is queued for it and
    /// its id stops working at once) and release its state in the background, as DELETE would.
    /// Called from synchronous drop code, hence the gateway-owned cleanup task.
    pub fn close(&self, session: &SessionId) {
        let sessions = &self.gateway.registry.sessions;
        let Ok(ended) = sessions.remove(session.as_str(), Transport::Sse, None) else {
            return; // Already ended (TTL, shutdown).
        };
        debug!(?session, "HTTP+SSE stream closed; session ended");
        self.gateway
            .upkeep
            .spawn_cleanup(ended, EndReason::StreamClosed);
    }
}
