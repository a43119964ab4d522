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
}

impl OwnBackend {
    pub(crate) fn new(handle: Upstream, process: UpstreamOwner) -> Self {
        OwnBackend {
            handle,
            process: Some(process),
            server_requests: HashMap::new(),
        }
    }
}
