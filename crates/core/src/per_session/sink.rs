//! A session's own backend's messages: routed to that session only (`SessionSink`), and the
//! client's answers to what it asked routed back to exactly it (`client_response`).

use std::sync::{Arc, Weak};

use bytes::Bytes;
use futures::future::BoxFuture;
use serde_json::value::RawValue;

use switchboard_upstream::{InboundSink, Upstream};
use switchboard_wire::{
    codes, encode_error, encode_notification, encode_request, method, restore_response,
    ErrorObject, Message, MessageKind, RequestId,
};

use crate::progress::Vetted;
use crate::registry::Registry;
use crate::route::random_hex;
use crate::session::{EndReason, Ended};
use crate::BackendId;
use crate::CoreError;

/// How a session that ended is audited and released (`session_ops`): what a session's own
/// upstreams need when their process or upstream session goes, or an `initialize` fails.
pub(crate) trait Ends: Send + Sync + std::fmt::Debug {
    /// Audits `ended`'s end at once and releases its state in the background; callable from
    /// synchronous code, drop included.
    fn spawn_cleanup(self: Arc<Self>, ended: Ended, reason: EndReason);

    /// Audits `ended`'s end and releases its state.
    fn cleanup(&self, ended: Ended, reason: EndReason) -> BoxFuture<'_, ()>;
}

/// Routes one session backend's unsolicited messages to that session only.
#[derive(Debug)]
pub(crate) struct SessionSink {
    pub(crate) registry: Weak<Registry>,
    pub(crate) session: String,
    /// The backend whose process (or upstream session) this is, of the session's own ones.
    pub(crate) backend: BackendId,
    /// What the process going away means for the session.
    pub(crate) on_close: OnClose,
}

/// What a session's own process (or upstream session) going away means.
#[derive(Debug)]
pub(crate) enum OnClose {
    /// `run --isolation per-session`: the session was that process's, so it ends too.
    EndSession {
        /// To end the session. Weak, like `registry`: the process's reader owns this sink
        /// and runs until the session (held by the gateway) stops the process, so a strong
        /// handle would keep both alive for ever.
        ends: Weak<dyn Ends>,
        /// Set once the client has its session (`initialize` answered). Until then a dying
        /// process is `PendingInit`'s to clean up: the client never saw the session, and its
        /// `initialize` must fail as a backend failure (502), not as an unknown session.
        opened: Arc<std::sync::atomic::AtomicBool>,
    },
    /// A set: the gateway answered `initialize` and the session uses other backends too, so
    /// only this own upstream goes (and the next request there opens a fresh one).
    DropOwn,
}

impl InboundSink for SessionSink {
    /// The session's process is gone, so is the session: now, not at its next request, so its
    /// listen stream ends and the client learns at once (a session that ended first, e.g. by
    /// DELETE, is simply not found).
    fn closed(&self, reason: &str) {
        let OnClose::EndSession { ends, opened } = &self.on_close else {
            self.drop_own(reason);
            return;
        };
        if !opened.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let (Some(ends), Some(registry)) = (ends.upgrade(), self.registry.upgrade()) else {
            return;
        };
        if let Ok(ended) = registry.sessions.remove_any(&self.session) {
            let session = crate::access::session_label(&self.session);
            tracing::warn!(%session, "session's {reason}; session ended");
            ends.spawn_cleanup(ended, EndReason::BackendExited);
        }
    }

    fn deliver(&self, _line: &Bytes, msg: &Message<'_>, backend: &Upstream) {
        let Some(registry) = self.registry.upgrade() else {
            return;
        };
        let name = msg.method.unwrap_or_default();
        match (msg.kind, msg.id.as_ref()) {
            (MessageKind::Request, Some(id)) => {
                self.server_request(&registry, id, name, msg.params, backend)
            }
            _ if name == method::PROGRESS => {
                if !registry.progress.route(msg.params) {
                    registry
                        .drops
                        .record("progress for no live request stream", name);
                }
            }
            _ => {
                // Rebuilt list changes stay payload-free, as in shared mode; everything else is
                // this session's own and travels as the backend wrote it.
                let checked;
                let params = if name.ends_with("/list_changed") {
                    None
                } else {
                    // Checked by the guardrails on its way (a refused one is dropped).
                    match registry.progress.vet(name, msg.params) {
                        Vetted::Pass => msg.params,
                        Vetted::Replaced(p) => {
                            checked = p;
                            Some(&*checked)
                        }
                        Vetted::Refused(_) => {
                            registry.drops.record("refused by a guardrail", name);
                            return;
                        }
                    }
                };
                let updated_uri = (name == method::RESOURCE_UPDATED).then(|| {
                    params
                        .and_then(|p| switchboard_wire::object_member(p, "uri"))
                        .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
                        .map(|u| crate::catalog::canonical_scheme(&u).into_owned())
                        .unwrap_or_default()
                });
                let data = Bytes::from(encode_notification(name, params));
                // Under a policy, an update only for a URI the session still watches.
                registry
                    .sessions
                    .deliver_own_message(&self.session, data, updated_uri.as_deref());
            }
        }
    }
}

impl SessionSink {
    /// Forgets the session's own upstream on this backend if it is the closed one (a fresh
    /// one opened meanwhile stays). Dropping its owner kills a process that lingers.
    fn drop_own(&self, reason: &str) {
        let Some(registry) = self.registry.upgrade() else {
            return;
        };
        let gone = registry
            .sessions
            .remove_closed_own(&self.session, &self.backend);
        if gone.is_some() {
            let session = crate::access::session_label(&self.session);
            let backend = &self.backend;
            tracing::warn!(%session, %backend, "session's own {reason}; reopened on next use");
        }
    }

    fn server_request(
        &self,
        registry: &Registry,
        id: &RequestId,
        name: &str,
        params: Option<&RawValue>,
        backend: &Upstream,
    ) {
        // Checked by the guardrails on its way; refused, the backend gets the guardrail's error.
        let checked;
        let params = match registry.progress.vet(name, params) {
            Vetted::Pass => params,
            Vetted::Replaced(p) => {
                checked = p;
                Some(&*checked)
            }
            Vetted::Refused(guardrail) => {
                registry.drops.record("refused by a guardrail", name);
                let err = crate::guardrails::refusal(&guardrail);
                let _ = backend.try_send_line(encode_error(Some(id), &err));
                return;
            }
        };
        let key = format!("sbs-{}", random_hex());
        let line = Bytes::from(encode_request(&RequestId::from_string(&key), name, params));
        let delivered = registry.sessions.deliver_server_request(
            &self.session,
            &self.backend,
            (&key, id),
            line,
        );
        if !delivered {
            registry
                .drops
                .record("server request with no client stream to carry it", name);
            let err = ErrorObject::new(
                codes::INTERNAL_ERROR,
                "the client has no open stream to receive this request",
            );
            let _ = backend.try_send_line(encode_error(Some(id), &err));
        }
    }
}

/// A client's answer to a server request: routed back to the backend that asked, with that
/// backend's own id restored. Answers for ids this session's backend never sent are refused.
pub(crate) async fn client_response(
    registry: &Registry,
    session: &str,
    msg: &Message<'_>,
) -> Result<(), CoreError> {
    let key = msg
        .id
        .as_ref()
        .and_then(RequestId::as_str)
        .ok_or(CoreError::UnexpectedResponse)?;
    // The gateway's own requests first, in this session only (`client_ask`).
    if crate::client_ask::client_response(registry, session, &key, msg)? {
        return Ok(());
    }
    // Only the process that asked knows the key (keys are minted per request).
    let (handle, asked_id, backend) = registry
        .sessions
        .take_server_request(session, &key)?
        .ok_or(CoreError::UnexpectedResponse)?;
    let (member, payload) = match (msg.result, msg.error) {
        (Some(r), _) => ("result", r),
        (None, Some(e)) => ("error", e),
        (None, None) => return Err(CoreError::UnexpectedResponse),
    };
    // What the client answers (a user's typed text, a sampled completion, or whatever an
    // error's `data` carries) is checked on its way to the backend as a request is.
    let line = match registry.progress.vet_answer(backend.as_str(), payload) {
        Vetted::Pass => restore_response(&asked_id, member, payload.get()),
        // A rewritten error must still be one (a redacted `code` is not).
        Vetted::Replaced(new) if member == "error" && !crate::guardrails::is_error(new.get()) => {
            let err = crate::guardrails::refusal("error");
            switchboard_wire::encode_error(Some(&asked_id), &err)
        }
        Vetted::Replaced(new) => restore_response(&asked_id, member, new.get()),
        Vetted::Refused(guardrail) => {
            let err = crate::guardrails::refusal(&guardrail);
            switchboard_wire::encode_error(Some(&asked_id), &err)
        }
    };
    handle.send_line(line).await?;
    Ok(())
}
