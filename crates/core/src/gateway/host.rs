//! What the session store asks of the gateway (`session_store::Host`).

use serde_json::value::RawValue;
use serde_json::Value;

use crate::session::SessionId;
use crate::{Gateway, Principal};

impl crate::session_store::Host for Gateway {
    async fn end_here(&self, raw: &str) {
        if let Ok(ended) = self.registry.sessions.remove_any(raw) {
            (self.upkeep)
                .cleanup(ended, crate::session::EndReason::Deleted)
                .await;
        }
    }

    async fn ask_backend(
        &self,
        backend: &crate::BackendId,
        method: &'static str,
        params: Value,
    ) -> bool {
        let answer = self
            .sender
            .internal_call(&self.backends, backend, method, params)
            .await;
        answer.is_ok_and(|a| !a.is_error())
    }

    fn keep_client_init(&self, session: &SessionId, negotiated: &str, params: Option<&RawValue>) {
        self.handshake()
            .remember_client_init(session, negotiated, params);
    }

    fn may_watch(&self, who: &Principal, uri: &str) -> bool {
        self.config.access.may_watch(self.origins(), who, uri)
    }

    fn has_own_upstreams(&self) -> bool {
        self.is_per_session()
    }
}
