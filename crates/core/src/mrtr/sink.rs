//! The inbound side of an MRTR call's backend process (dedicated, or a warm partition).

use std::sync::{Arc, Weak};

use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::mpsc;

use switchboard_upstream::{InboundSink, Upstream};
use switchboard_wire::{
    codes, encode_error, encode_notification, encode_result, method, ErrorObject, Message,
    MessageKind, RequestId,
};

use crate::modern_listen::ModernListeners;
use crate::progress::Vetted;
use crate::registry::Registry;
use crate::session::capability_of;

/// One server→client request from a dedicated backend.
#[derive(Debug)]
pub(crate) struct Asked {
    pub(crate) id: RequestId,
    pub(crate) method: String,
    pub(crate) params: Option<Box<RawValue>>,
}

/// Routes one dedicated backend's unsolicited messages: input requests to its call, `ping`
/// answered here, progress through the minted token, log messages to the current round's
/// stream (only when the request asked for them), everything else dropped.
#[derive(Debug)]
pub(crate) struct CallSink {
    /// The call's channel for input requests; `None` on a partition with no input call open.
    pub(crate) asked: super::AskedSlot,
    pub(crate) registry: Weak<Registry>,
    pub(crate) log: Arc<parking_lot::Mutex<Option<mpsc::Sender<Bytes>>>>,
    /// A partition's own listen streams (its principal's only); `None` for a dedicated
    /// process, whose list changes (its one call's business) reach no listen.
    pub(crate) listeners: Option<Arc<ModernListeners>>,
    /// A partition's calls that declared no input capability, running now.
    pub(crate) plain: Option<super::Plain>,
}

impl InboundSink for CallSink {
    fn deliver(&self, _line: &Bytes, msg: &Message<'_>, backend: &Upstream) {
        let name = msg.method.unwrap_or_default();
        let refuse = |id: &RequestId, code: i32, message: &str| {
            let err = ErrorObject::new(code, message.to_owned());
            let _ = backend.try_send_line(encode_error(Some(id), &err));
        };
        match (msg.kind, msg.id.as_ref()) {
            (MessageKind::Request, Some(id)) if name == method::PING => {
                let _ = backend.try_send_line(encode_result(id, "{}"));
            }
            (MessageKind::Request, Some(id)) if capability_of(name).is_some() => {
                // Checked by the guardrails before the client sees it; refused, the backend
                // gets the guardrail's error as its one answer.
                let vetted =
                    (self.registry.upgrade()).map(|r| (r.progress.vet(name, msg.params), r));
                let params = match vetted {
                    Some((Vetted::Replaced(p), _)) => Some(p),
                    Some((Vetted::Refused(guardrail), registry)) => {
                        registry.drops.record("refused by a guardrail", name);
                        let err = crate::guardrails::refusal(&guardrail);
                        let _ = backend.try_send_line(encode_error(Some(id), &err));
                        return;
                    }
                    Some((Vetted::Pass, _)) | None => msg.params.map(ToOwned::to_owned),
                };
                let asked = Asked {
                    id: id.clone(),
                    method: name.to_owned(),
                    params,
                };
                let slot = self.asked.lock();
                match slot.as_ref().map(|tx| tx.try_send(asked)) {
                    Some(Ok(())) => {}
                    Some(Err(_)) => {
                        refuse(id, codes::INTERNAL_ERROR, "too many outstanding requests")
                    }
                    // No call of this partition can be asked for input right now; if exactly
                    // one call runs, it is the one that needed the capability (-32021).
                    None => {
                        if let (Some(plain), Some(cap)) = (&self.plain, capability_of(name)) {
                            plain.blame(cap);
                        }
                        refuse(id, codes::METHOD_NOT_FOUND, "Method not found")
                    }
                }
            }
            (MessageKind::Request, Some(id)) => {
                refuse(id, codes::METHOD_NOT_FOUND, "Method not found");
            }
            _ => {
                let Some(registry) = self.registry.upgrade() else {
                    return;
                };
                let delivered = match name {
                    // A partition's list changes go, payload-free, to its principal's listens.
                    // A process started for one call is that call's: what it announces is no
                    // list anyone else is served (and would tell every listen when another
                    // caller's call ran).
                    method::TOOLS_LIST_CHANGED
                    | method::RESOURCES_LIST_CHANGED
                    | method::PROMPTS_LIST_CHANGED => match &self.listeners {
                        Some(own) => {
                            own.list_changed(name);
                            true
                        }
                        None => false,
                    },
                    // A partition's resources are its principal's: only its listens hear.
                    method::RESOURCE_UPDATED => match (&self.listeners, msg.param("uri")) {
                        (Some(own), Some(uri)) => serde_json::from_str::<String>(uri.get())
                            .map(|uri| own.resource_updated(&uri))
                            .is_ok(),
                        _ => false,
                    },
                    method::PROGRESS => registry.progress.route(msg.params),
                    method::MESSAGE => match registry.progress.vet(name, msg.params) {
                        Vetted::Refused(_) => false,
                        vetted => {
                            let params = match &vetted {
                                Vetted::Replaced(p) => Some(&**p),
                                _ => msg.params,
                            };
                            self.log.lock().as_ref().is_some_and(|tx| {
                                tx.try_send(Bytes::from(encode_notification(name, params)))
                                    .is_ok()
                            })
                        }
                    },
                    _ => false,
                };
                if !delivered {
                    registry
                        .drops
                        .record("notification from an MRTR call backend", name);
                }
            }
        }
    }
}
