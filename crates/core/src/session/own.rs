//! A session's own backends (`--isolation per-session`): the process or upstream session the
//! session was given, and the server requests it has sent the client.

use std::collections::HashMap;

use switchboard_upstream::{Upstream, UpstreamOwner};
use switchboard_wire::RequestId;

/// A session's own backend.
#[derive(Debug)]
pub(crate) struct OwnBackend {
    pub(crate) handle: Upstream,
    /// Taken on session end and shut down outside the table lock.
    pub(crate) process: Option<UpstreamOwner>,
    /// Gateway key sent to the client → the backend's own request id.
    pub(crate) server_requests: HashMap<String, RequestId>,
    /// Handshaken: requests may use it. An own upstream opened on first use (a set) is in
    /// the session while it handshakes (so the session's end stops it, and what it asks the
    /// client meanwhile is the session's) but is not routed to until then.
    pub(crate) ready: bool,
}

impl OwnBackend {
    /// `run --isolation per-session`'s: the session-wide `initializing` flag says when it
    /// may be used.
    pub(crate) fn new(handle: Upstream, process: UpstreamOwner) -> Self {
        OwnBackend {
            handle,
            process: Some(process),
            server_requests: HashMap::new(),
            ready: true,
        }
    }

    /// One opened on first use, not handshaken yet.
    pub(crate) fn opening(handle: Upstream, process: UpstreamOwner) -> Self {
        OwnBackend {
            ready: false,
            ..OwnBackend::new(handle, process)
        }
    }
}
