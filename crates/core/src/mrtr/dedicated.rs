//! A call's own backend process: the MRTR bridge's fallback when its caller's partition is
//! busy with another input call (or the call asks for logs), and the handshake both use.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use switchboard_wire::classify::{META_CLIENT_CAPABILITIES, META_LOG_LEVEL};

use super::sink::CallSink;
use super::Calls;
use super::{Dedicated, Incoming, SharePermit, ASKED_QUEUE};
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
