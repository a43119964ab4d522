//! The gateway: one shared backend, many Legacy sessions, exact per-request routing.
//!
//! Request flow: `http` parses the envelope and calls [`Gateway::request`]; the gateway mints a
//! [`RouteKey`], re-encodes the request with that key as its id, and awaits the one answer the
//! upstream pending table routes back by that key; it then splices the client's original id
//! back in, byte for byte. No table maps client ids to anything, so no client value can steer a
//! response.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use switchboard_upstream::{Inbound, StdioHandle};
use switchboard_wire::{
    encode_notification, encode_request, encode_result, method, restore_response, version, Message,
    RequestId,
};

use crate::drop_log::DropLog;
use crate::route::RouteKey;
use crate::session::{Session, SessionId, SessionStore};
use crate::{dispatch, Backend, CoreError};

/// Limits and deadlines.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// How long a request may wait for its backend answer before it is failed (and cancelled
    /// upstream).
    pub request_timeout: Duration,
    /// Idle time after which a Legacy session expires.
    pub session_ttl: Duration,
    /// Most concurrent Legacy sessions; more are refused rather than exhausting memory.
    pub max_sessions: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            request_timeout: Duration::from_secs(60),
            session_ttl: Duration::from_secs(30 * 60),
            max_sessions: 100_000,
        }
    }
}

/// A new Legacy session and the client's `initialize` answer.
#[derive(Debug)]
pub struct Initialized {
    /// Goes out as `Mcp-Session-Id`.
    pub session: SessionId,
    /// The JSON-RPC response carrying the client's own id and negotiated version.
    pub response: Vec<u8>,
}

/// The routing core for one shared backend.
#[derive(Debug)]
pub struct Gateway {
    backend: Backend,
    sessions: SessionStore,
    config: GatewayConfig,
}

impl Gateway {
    /// Wraps an initialized backend and starts the dispatcher for its unsolicited messages
    /// (the dispatcher ends when the backend's stdout does).
    pub fn new(
        backend: Backend,
        inbound: mpsc::Receiver<Inbound>,
        config: GatewayConfig,
    ) -> Arc<Self> {
        let drops = Arc::new(DropLog::default());
        tokio::spawn(dispatch::run(inbound, backend.handle.clone(), drops));
        Arc::new(Gateway {
            sessions: SessionStore::new(config.max_sessions, config.session_ttl),
            backend,
            config,
        })
    }

    /// Answers a client's `initialize` from the backend's own handshake, with the version
    /// negotiated for *this* client, and opens its session.
    pub fn initialize(
        &self,
        id: &RequestId,
        params: Option<&RawValue>,
    ) -> Result<Initialized, CoreError> {
        let requested = params
            .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
            .and_then(|p| {
                p.get("protocolVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        let negotiated = version::negotiate_legacy(requested.as_deref());
        let info = &self.backend.info;
        let mut result = json!({
            "protocolVersion": negotiated,
            "capabilities": info.capabilities,
            "serverInfo": info.server_info,
        });
        if let Some(instructions) = &info.instructions {
            result["instructions"] = instructions.clone();
        }
        let session = self.sessions.create(negotiated)?;
        debug!(?session, %negotiated, "session opened");
        Ok(Initialized {
            session,
            response: encode_result(id, &result.to_string()),
        })
    }

    /// Resolves a client-supplied session id, refreshing its TTL.
    pub fn session(&self, raw: &str) -> Result<(SessionId, Session), CoreError> {
        self.sessions.touch(raw)
    }

    /// Ends a session (DELETE).
    pub fn end_session(&self, raw: &str) -> Result<(), CoreError> {
        self.sessions.remove(raw)
    }

    /// Forwards one request under a fresh route key and returns the backend's answer with the
    /// client's id restored. Dropping the future (client gone) withdraws the call and tells
    /// the backend to cancel it.
    pub async fn request(&self, msg: &Message<'_>) -> Result<Vec<u8>, CoreError> {
        let (Some(id), Some(name)) = (msg.id.as_ref(), msg.method) else {
            return Err(CoreError::UnexpectedResponse);
        };
        let key = RouteKey::mint();
        let line = encode_request(&key.to_request_id(), name, msg.params);
        let mut guard = CancelOnDrop {
            backend: &self.backend.handle,
            key: &key,
            reason: "client went away",
            armed: true,
        };
        let deadline = self.config.request_timeout;
        let answer = tokio::time::timeout(deadline, async {
            let call = self.backend.handle.call(key.as_str(), line).await?;
            Ok::<_, CoreError>(call.await?)
        })
        .await;
        match answer {
            Ok(Ok(answer)) => {
                guard.armed = false;
                Ok(restore_response(id, answer.member(), answer.payload()))
            }
            Ok(Err(e)) => {
                guard.armed = false;
                Err(e)
            }
            Err(_) => {
                guard.reason = "request timed out at the gateway";
                Err(CoreError::Timeout(deadline))
            }
        }
    }

    /// Handles a client notification. `initialized` is the gateway's to consume (the backend
    /// was initialized once, by the gateway); `cancelled` names a client id the backend never
    /// saw, so it is not forwarded as-is; anything else passes through.
    pub async fn notify(&self, msg: &Message<'_>) -> Result<(), CoreError> {
        match msg.method {
            Some(method::INITIALIZED) => Ok(()),
            Some(method::CANCELLED) => {
                debug!("client cancellation not forwarded: its requestId is not a route key");
                Ok(())
            }
            Some(name) => {
                let line = encode_notification(name, msg.params);
                Ok(self.backend.handle.send_line(line).await?)
            }
            None => Err(CoreError::UnexpectedResponse),
        }
    }

    /// Expires idle sessions every quarter TTL until `stop` fires.
    pub async fn run_reaper(self: Arc<Self>, stop: CancellationToken) {
        let tick = (self.sessions.ttl() / 4).max(Duration::from_millis(100));
        let mut interval = tokio::time::interval(tick);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = interval.tick() => {
                    let n = self.sessions.reap();
                    if n > 0 {
                        debug!(expired = n, "sessions expired");
                    }
                }
            }
        }
    }

    /// Whether the backend is still running (for `/healthz`).
    pub fn backend_alive(&self) -> bool {
        !self.backend.handle.is_closed()
    }

    /// Live sessions (for metrics and leak tests).
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Calls awaiting a backend answer (for metrics and leak tests).
    pub fn pending_count(&self) -> usize {
        self.backend.handle.pending_len()
    }

    /// The backend's process id, when it is a local process.
    pub fn backend_pid(&self) -> Option<u32> {
        self.backend.handle.pid()
    }
}

/// Sends `notifications/cancelled` for a call that will never be awaited again, so the backend
/// can stop work nobody will read.
struct CancelOnDrop<'a> {
    backend: &'a StdioHandle,
    key: &'a RouteKey,
    reason: &'static str,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let params = json!({"requestId": self.key.as_str(), "reason": self.reason}).to_string();
        let Ok(params) = RawValue::from_string(params) else {
            return;
        };
        // Never block in drop: if the queue is full the backend is already overloaded, and the
        // late answer will be dropped as unattributable anyway.
        let _ = self
            .backend
            .try_send_line(encode_notification(method::CANCELLED, Some(&params)));
    }
}
