//! One request as the pipeline carries it ([`Exchange`]) and the one answer it gets
//! ([`Answer`]), the same types for both eras.
//!
//! `http` builds an `Exchange` per request (the caller it authenticated, the era it decided, the
//! parsed envelope, and the request's own stream when the answer is delivered as SSE) and hands
//! it to `Gateway::handle` (`pipeline`); features that answer a request take the parts they need
//! from it.

use bytes::Bytes;
use tokio::sync::mpsc;

use switchboard_wire::{encode_error, ErrorObject, Message, RequestId};

use crate::session::SessionId;
use crate::Principal;

/// One client request on its way through the pipeline.
#[derive(Debug)]
pub struct Exchange<'a> {
    /// Who is calling (authenticated by `http`).
    pub caller: &'a Principal,
    /// Which protocol era the request speaks, and (Legacy) its session.
    pub era: Era<'a>,
    /// The parsed request.
    pub msg: &'a Message<'a>,
    /// The request's own stream for related notifications (progress; for a Modern
    /// `subscriptions/listen` the whole stream), when the answer is delivered as SSE.
    pub stream: Option<mpsc::Sender<Bytes>>,
}

/// The era a request speaks, decided per request by `http` (`wire::classify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era<'a> {
    /// 2025-11-25 and older: the caller's session, already resolved and owned by the caller
    /// (`None` for a sessionless request).
    Legacy {
        /// The caller's session.
        session: Option<&'a SessionId>,
    },
    /// 2026-07-28: stateless, no session by construction.
    Modern,
}

impl<'a> Exchange<'a> {
    /// A Legacy request, on `session` when it has one.
    pub fn legacy(
        caller: &'a Principal,
        session: Option<&'a SessionId>,
        msg: &'a Message<'a>,
        stream: Option<mpsc::Sender<Bytes>>,
    ) -> Self {
        Exchange {
            caller,
            era: Era::Legacy { session },
            msg,
            stream,
        }
    }

    /// A Modern (stateless) request.
    pub fn modern(
        caller: &'a Principal,
        msg: &'a Message<'a>,
        stream: Option<mpsc::Sender<Bytes>>,
    ) -> Self {
        Exchange {
            caller,
            era: Era::Modern,
            msg,
            stream,
        }
    }

    /// The request's Legacy session; `None` for a sessionless or Modern request.
    pub fn session(&self) -> Option<&'a SessionId> {
        match self.era {
            Era::Legacy { session } => session,
            Era::Modern => None,
        }
    }

    /// Whether the request speaks 2026-07-28.
    pub fn is_modern(&self) -> bool {
        self.era == Era::Modern
    }
}

/// One answer to one request, either era: the JSON-RPC response with the client's id, and the
/// error code it carries (a Modern answer's HTTP status follows it; a Legacy answer is 200
/// whatever it says).
#[derive(Debug)]
pub struct Answer {
    /// The JSON-RPC response.
    pub body: Vec<u8>,
    /// `Some(code)` when the answer is an error the gateway or backend gave.
    pub error_code: Option<i64>,
}

impl Answer {
    /// A successful answer (or a Legacy one, whose status does not depend on its content).
    pub fn ok(body: Vec<u8>) -> Self {
        Answer {
            body,
            error_code: None,
        }
    }

    /// An error answer to request `id`.
    pub fn error(id: &RequestId, err: &ErrorObject) -> Self {
        Answer {
            body: encode_error(Some(id), err),
            error_code: Some(i64::from(err.code)),
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
