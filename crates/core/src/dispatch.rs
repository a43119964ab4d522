//! What happens to messages a shared backend sends on its own (not responses; those are routed
//! by route key in `upstream`).
//!
//! | backend sends                         | shared mode                                  |
//! |---------------------------------------|----------------------------------------------|
//! | `ping` request                        | answered `{}` by the gateway                 |
//! | any other request (sampling, …)       | `-32601` back to the backend                 |
//! | any notification                      | dropped: it cannot be attributed to a client |
//!
//! Dropping is the safe default of invariant 1: a message the gateway cannot prove belongs to
//! one client reaches none. Routing progress, subscriptions and list changes comes with the
//! registries that can attribute them.

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::debug;

use switchboard_upstream::{Inbound, StdioHandle};
use switchboard_wire::{
    codes, encode_error, encode_result, method, ErrorObject, Message, MessageKind,
};

use crate::drop_log::DropLog;

/// Consumes the backend's unsolicited messages until the backend's stdout ends.
pub(crate) async fn run(
    mut inbound: mpsc::Receiver<Inbound>,
    backend: StdioHandle,
    drops: Arc<DropLog>,
) {
    while let Some(Inbound { line }) = inbound.recv().await {
        let Ok(msg) = Message::parse(&line) else {
            continue;
        };
        let name = msg.method.unwrap_or_default();
        match (msg.kind, msg.id.as_ref()) {
            (MessageKind::Request, Some(id)) if name == method::PING => {
                send(&backend, encode_result(id, "{}")).await;
            }
            (MessageKind::Request, Some(id)) => {
                drops.record(
                    "backend request refused: no client can answer it in shared mode",
                    name,
                );
                let err = ErrorObject::new(
                    codes::METHOD_NOT_FOUND,
                    "Method not found: the gateway shares this backend between clients and cannot forward server-initiated requests",
                );
                send(&backend, encode_error(Some(id), &err)).await;
            }
            _ => drops.record("notification cannot be attributed to one client", name),
        }
    }
    debug!("backend dispatcher stopped");
}

async fn send(backend: &StdioHandle, line: Vec<u8>) {
    if let Err(e) = backend.send_line(line).await {
        debug!(error = %e, "could not answer backend request");
    }
}
