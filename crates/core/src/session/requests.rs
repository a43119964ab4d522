//! A session's in-flight requests, by the client's own id: recorded while a request waits,
//! so the client's `notifications/cancelled` can name it.

use super::{InFlight, Sessions};
use crate::route::RouteKey;

impl Sessions {
    /// Records request `client_id` of session `raw` as in flight. An entry the client's id
    /// already named is replaced (and dropped outside the table lock); a session that ended
    /// records nothing.
    pub(crate) fn track_request(&self, raw: &str, client_id: Box<str>, entry: InFlight) {
        let replaced = self.with(raw, |s| s.in_flight.insert(client_id, entry));
        drop(replaced);
    }

    /// Forgets request `client_id` if it is still the one under `key`: a client reusing an
    /// id concurrently owns the newer entry.
    pub(crate) fn untrack_request(&self, raw: &str, client_id: &str, key: &RouteKey) {
        let _ = self.with(raw, |s| {
            if s.in_flight.get(client_id).is_some_and(|f| f.key == *key) {
                s.in_flight.remove(client_id);
            }
        });
    }

    /// Takes request `client_id` out of the session (the client cancelled it). `None`: no
    /// such request, or no such session.
    pub(crate) fn take_request(&self, raw: &str, client_id: &str) -> Option<InFlight> {
        self.with(raw, |s| s.in_flight.remove(client_id))
            .ok()
            .flatten()
    }
}
