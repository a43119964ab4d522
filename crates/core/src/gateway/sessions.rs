//! The clients' sessions as `http` sees them ([`crate::Gateway::sessions`]): resolve a
//! client-supplied id (asking the session store when this process does not hold it), open
//! and close its listen stream, take a client's answer to a server request, end it (DELETE).
//! What a session holds is `session::Sessions`'; what its end releases is `session_ops`'.

use switchboard_wire::Message;

use crate::listen_stream::ListenStream;
use crate::session::{EndReason, SessionId, Transport};
use crate::{CoreError, Gateway, Principal};

/// The Streamable HTTP sessions' operations for `http`, over one gateway.
#[derive(Debug, Clone, Copy)]
pub struct ClientSessions<'a> {
    pub(super) gateway: &'a Gateway,
}

impl ClientSessions<'_> {
    /// Resolves a client-supplied session id, refreshing its TTL. Another principal's session
    /// is not found, exactly like an unknown one.
    ///
    /// With a session store, a session this process does not hold is looked up there (and
    /// made live here), and one it holds is confirmed there (ended elsewhere: not found here
    /// either); a store that does not answer leaves held sessions working.
    pub async fn resolve(&self, raw: &str, caller: &Principal) -> Result<SessionId, CoreError> {
        let gateway = self.gateway;
        let sessions = &gateway.registry.sessions;
        let held = sessions
            .touch(raw, Transport::Streamable, caller)
            .map(|(id, _)| id);
        if gateway.config.session_store.is_none() {
            // No session store: the sessions this process holds are all there are.
            return held;
        }
        let store = &gateway.store;
        match held {
            Ok(id) => store.confirm(gateway, &gateway.backends, id, caller).await,
            Err(CoreError::SessionNotFound)
                if store.adopt(gateway, &gateway.backends, raw, caller).await? =>
            {
                sessions
                    .touch(raw, Transport::Streamable, caller)
                    .map(|(id, _)| id)
            }
            Err(e) => Err(e),
        }
    }

    /// Opens (or replaces) a session's listen stream, replaying missed events after
    /// `last_event_id` when it names one of this session's buffered events.
    pub async fn open_listen(
        &self,
        raw: &str,
        caller: &Principal,
        last_event_id: Option<&str>,
    ) -> Result<ListenStream, CoreError> {
        self.resolve(raw, caller).await?;
        // Replicas: a stream numbered elsewhere resumes there (its events are in that
        // replica's memory), or afresh here once that replica is gone.
        let last_event_id = self.gateway.store.resume_at(last_event_id).await?;
        (self.gateway.registry.sessions).attach_listener(raw, caller, last_event_id)
    }

    /// Detaches a listen stream when its connection ends.
    pub fn close_listen(&self, raw: &str, generation: u64) {
        (self.gateway.registry.sessions).detach_listener(raw, generation);
    }

    /// A client's JSON-RPC response (answer to a server request): to the gateway's own
    /// question, or to the session's own backend. `ServedElsewhere` when the gateway question
    /// it answers was asked by another replica.
    pub async fn client_response(
        &self,
        session: &SessionId,
        msg: &Message<'_>,
    ) -> Result<(), CoreError> {
        let registry = &self.gateway.registry;
        match crate::per_session::client_response(registry, session.as_str(), msg).await {
            Err(CoreError::UnexpectedResponse) => {
                self.gateway.store.answer_home(msg).await?;
                Err(CoreError::UnexpectedResponse)
            }
            done => done,
        }
    }

    /// Ends a Streamable HTTP session (DELETE) and releases everything it held.
    /// Another principal's session is not found, exactly like an unknown one.
    pub async fn end(&self, raw: &str, caller: &Principal) -> Result<(), CoreError> {
        // Held elsewhere only: made live here first, so the owner is checked and it ends
        // everywhere.
        self.resolve(raw, caller).await?;
        let gateway = self.gateway;
        gateway.store.unstore(raw).await?;
        // Replicas holding it (a listen stream there) end it now, not at their next request.
        if let Some(peers) = gateway.registry.peers.get() {
            peers.ended(raw);
        }
        let ended = (gateway.registry.sessions).remove(raw, Transport::Streamable, Some(caller))?;
        gateway.upkeep.cleanup(ended, EndReason::Deleted).await;
        Ok(())
    }
}
