//! A call's own backend process: the MRTR bridge's fallback when its caller's partition is
//! busy with another input call (or the call asks for logs), and the handshake both use; and
//! what a call (`Dedicated`, on its own process or a leased partition) does with the
//! backend's requests and when it ends.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use switchboard_wire::classify::{META_CLIENT_CAPABILITIES, META_LOG_LEVEL};
use switchboard_wire::{codes, ErrorObject, RequestId};

use super::sink::{Asked, CallSink};
use super::Calls;
use super::{Dedicated, Incoming, SharePermit, ASKED_QUEUE, GRACE, KEY_HINT};
use crate::CoreError;

impl Calls<'_> {
    /// A process of the call's own, handshaken with exactly the request's capabilities.
    pub(super) async fn dedicated(
        &self,
        req: &Incoming<'_>,
        share: SharePermit,
    ) -> Result<Dedicated, CoreError> {
        let spawner = self
            .spawner
            .for_backend(&req.route.backend)
            .ok_or_else(|| CoreError::Unsupported(req.name.to_owned()))?;
        let slot = (self.bridge.slots.clone())
            .try_acquire_owned()
            .map_err(|_| CoreError::BridgeFull(self.bridge.pool))?;
        let meta = &req.params["_meta"];
        let declared = &meta[META_CLIENT_CAPABILITIES];
        let mut caps = Map::new();
        for cap in ["sampling", "elicitation", "roots"] {
            if let Some(v) = declared.get(cap).filter(|v| !v.is_null()) {
                caps.insert(cap.into(), v.clone());
            }
        }
        let (tx, rx) = mpsc::channel(ASKED_QUEUE);
        let log = Arc::new(parking_lot::Mutex::new(None));
        let sink = Arc::new(CallSink {
            asked: Arc::new(parking_lot::Mutex::new(Some(tx))),
            registry: Arc::downgrade(self.registry),
            log: log.clone(),
            listeners: None,
            plain: None,
        });
        let (handle, process) = crate::per_session::spawn_off_runtime(spawner, sink).await?;
        let call = Dedicated {
            handle,
            process: Some(process),
            asked: rx,
            pending: None,
            progress_token: None,
            log,
            outstanding: Vec::new(),
            next_key: 0,
            _slot: Some(slot),
            share,
            lease: None,
            key: None,
        };
        let level = meta.get(META_LOG_LEVEL);
        let credential = req.caller.credential.as_ref();
        let deadline = self.bridge.limits.handshake_timeout;
        crate::backend::handshake(
            &call.handle,
            Value::Object(caps),
            level,
            credential,
            deadline,
        )
        .await?;
        Ok(call)
    }
}

impl Dedicated {
    /// Shuts the process down now (gateway shutdown), instead of in the background.
    pub(super) async fn retire(mut self) {
        self.pending = None;
        if let Some(process) = self.process.take() {
            process.shutdown(GRACE).await;
        }
    }

    /// The client-facing key for a server request: the backend's hint when usable, else a
    /// gateway-chosen one; unique among this call's outstanding requests.
    pub(super) fn key_for(&mut self, asked: &Asked, params: &Value, taken: &[String]) -> String {
        let in_use =
            |k: &str| self.outstanding.iter().any(|o| o.key == k) || taken.iter().any(|t| t == k);
        if let Some(hint) = params["_meta"][KEY_HINT].as_str() {
            if !hint.is_empty() && !in_use(hint) {
                return hint.to_owned();
            }
        }
        let stem = asked.method.split('/').next().unwrap_or("input").to_owned();
        loop {
            self.next_key += 1;
            let key = format!("{stem}_{}", self.next_key);
            if !in_use(&key) {
                return key;
            }
        }
    }

    /// Refuses one of the backend's requests (the call is ending without asking the client).
    pub(super) fn refuse(&self, backend_id: &RequestId) {
        let err = ErrorObject::new(
            codes::INTERNAL_ERROR,
            "the client did not declare this capability",
        );
        let _ = self
            .handle
            .try_send_line(switchboard_wire::encode_error(Some(backend_id), &err));
    }

    /// Answers one of the backend's requests.
    pub(super) async fn answer(
        &self,
        backend_id: &RequestId,
        result: &Value,
    ) -> Result<(), CoreError> {
        let line = switchboard_wire::restore_response(backend_id, "result", &result.to_string());
        Ok(self.handle.send_line(line).await?)
    }
}

impl Drop for Dedicated {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            // The partition's process lives on: nothing it asked stays unanswered, and work
            // nobody will read is cancelled. Closed first, so nothing new arrives meanwhile.
            lease.close();
            let handle = &self.handle;
            let refuse = |id: &RequestId| {
                let err = ErrorObject::new(codes::INTERNAL_ERROR, "the client's call ended");
                let _ = handle.try_send_line(switchboard_wire::encode_error(Some(id), &err));
            };
            while let Ok(asked) = self.asked.try_recv() {
                refuse(&asked.id);
            }
            for o in self.outstanding.drain(..) {
                refuse(&o.backend_id);
            }
            if let (Some(_), Some(key)) = (self.pending.take(), self.key.as_ref()) {
                crate::in_flight::send_cancel(handle, key, "the client's call ended");
                // Cancellation is advisory: the handler may run on and ask again, and the next
                // lease holder must not receive that.
                lease.retire();
            }
        }
        self.pending = None;
        if let Some(process) = self.process.take() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(process.shutdown(GRACE));
            }
        }
    }
}
