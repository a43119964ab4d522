//! Replicas on one session store, between themselves: messages for a session whose listen
//! stream another replica holds, a session ended elsewhere, a list changed elsewhere.

use std::sync::Arc;

use super::{Presence, SessionStore};
use crate::registry::PeerDelivery;

impl SessionStore {
    /// Turns on delivery across replicas (once; later calls change nothing).
    pub fn enable_peer_delivery(&self, peers: Arc<dyn PeerDelivery>) {
        let _ = self.registry.peers.set(peers);
    }

    /// A message another replica forwarded for `session`: onto its listen stream if one is
    /// attached here, else dropped (some replica holds it; this one does not).
    pub fn deliver_from_peer(&self, session: &str, data: bytes::Bytes) -> bool {
        self.registry.sessions.push_if_attached(session, data)
    }

    /// Another replica's backend changed a list: every session stream attached here, and
    /// every Modern listener that asked, hears `name` (one of the three `list_changed`
    /// methods; anything else is ignored), rebuilt without a payload.
    pub fn list_changed_from_peer(&self, name: &str) {
        use switchboard_wire::method;
        let name = match name {
            method::TOOLS_LIST_CHANGED => method::TOOLS_LIST_CHANGED,
            method::PROMPTS_LIST_CHANGED => method::PROMPTS_LIST_CHANGED,
            method::RESOURCES_LIST_CHANGED => method::RESOURCES_LIST_CHANGED,
            _ => return,
        };
        let data = bytes::Bytes::from(switchboard_wire::encode_notification(name, None));
        self.registry.sessions.broadcast_to_attached(&data);
        self.registry.listeners.list_changed(name);
    }

    /// Whether another replica's word that `session` ended concerns this one: there is a
    /// store to confirm it, and this process holds the session.
    pub(crate) fn holds(&self, session: &str) -> bool {
        self.records().is_some() && self.registry.sessions.is_live(session)
    }

    /// Whether the store confirms that `session` was ended (a message on the peers' channel
    /// alone never ends a session).
    pub(crate) async fn ended_elsewhere(&self, session: &str) -> bool {
        let Some(store) = self.records() else {
            return false;
        };
        matches!(store.touch(session).await, Ok(Presence::Ended))
    }
}
