//! Legacy sessions that outlive this process (`--session-store redis://…`): what a Streamable
//! HTTP session needs to be served by any replica, or by this one after a restart, kept in a
//! [`SessionRecords`] (the binary's `switchboard-store`; this module does no I/O). The session
//! table stays the cache every request reads; the store is asked only when a client names a
//! session this process does not hold, written when a session starts, changes what it keeps
//! (subscriptions, log level) or ends, and its expiry is slid along at most a few times per
//! TTL.
//!
//! What the record holds is the session's *durable* state: owner, negotiated version, the
//! client's `initialize` (its capabilities), log level and subscriptions. What lives only in
//! one process — listen streams and their replay buffers, requests in flight, a session's own
//! upstream processes, parked MRTR calls — stays there (see the README's scale-out section).
//! The owner check is the one the table does: a session of another principal is not found,
//! exactly like an unknown id.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::access::Principal;
use crate::backends::BackendId;
use crate::session::{SessionId, SubKey};
use crate::{CoreError, Gateway};

/// Where session records live. Every call is bounded by the implementation (a store that
/// does not answer is an error, never a hang).
pub trait SessionRecords: Send + Sync + fmt::Debug {
    /// Writes `id`'s record, with the store's TTL.
    fn put<'a>(&'a self, id: &'a str, record: Vec<u8>) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Reads `id`'s record (and slides its TTL), `None` when there is none.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;
    /// Slides `id`'s TTL, and tells whether its record is there.
    fn touch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Presence, StoreError>>;
    /// Ends `id` everywhere (and remembers, for a TTL, that it was ended).
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// Replicas on one session store: the way to the replica holding a session's listen stream.
/// Only messages already attributed to one session are forwarded, with that session's id;
/// the receiving replica delivers them to that session's attached stream or nowhere
/// ([`Gateway::deliver_from_peer`]), and never forwards them again.
pub trait PeerDelivery: Send + Sync + fmt::Debug {
    /// Hands `data` for `session`'s listen stream on (never blocks; bounded, best effort
    /// like every server-to-client notification).
    fn forward(&self, session: &str, data: bytes::Bytes);
}

/// What the store knows of a session this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// Its record is there.
    Live,
    /// It was ended (DELETE on some replica).
    Ended,
    /// Neither: the store lost it (restarted empty, evicted) or it expired there while this
    /// process kept serving it.
    Lost,
}

/// Why the store could not answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Unreachable, refused, or no answer within its bound.
    #[error("session store unavailable: {0}")]
    Unavailable(String),
}

/// A session's durable state, as stored (JSON).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Record {
    /// (issuer, subject) of the principal that opened it.
    owner: (String, String),
    protocol_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_init: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    log_level: Option<u8>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    subscriptions: Vec<(String, String)>,
}

/// The longest client-supplied session id looked up in the store (ours are 32 hex digits):
/// anything else is unknown without a round-trip.
const ID_LEN: usize = 32;

fn plausible(raw: &str) -> bool {
    raw.len() == ID_LEN && raw.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Gateway {
    /// Turns on delivery across replicas (once; later calls change nothing).
    pub fn enable_peer_delivery(&self, peers: std::sync::Arc<dyn PeerDelivery>) {
        let _ = self.registry.peers.set(peers);
    }

    /// A message another replica forwarded for `session`: onto its listen stream if one is
    /// attached here, else dropped (some replica holds it; this one does not).
    pub fn deliver_from_peer(&self, session: &str, data: bytes::Bytes) -> bool {
        self.registry.sessions.push_if_attached(session, data)
    }

    /// The store, when sessions are kept beyond this process.
    pub(crate) fn store(&self) -> Option<&dyn SessionRecords> {
        self.config.session_store.as_deref()
    }

    /// Writes the session's record (after `initialize`, a subscription change, a log level).
    pub(crate) async fn store_session(&self, session: &SessionId) -> Result<(), CoreError> {
        let Some(store) = self.store() else {
            return Ok(());
        };
        let record = self.registry.sessions.with(session.as_str(), |s| Record {
            owner: s.owner().clone(),
            protocol_version: s.protocol_version.to_owned(),
            client_init: s.init_params.clone(),
            log_level: s.log_level,
            subscriptions: s
                .subscriptions
                .iter()
                .map(|(b, u)| (b.to_string(), u.clone()))
                .collect(),
        })?;
        let bytes = serde_json::to_vec(&record).map_err(|e| CoreError::Store(e.to_string()))?;
        store
            .put(session.as_str(), bytes)
            .await
            .map_err(|e| CoreError::Store(e.to_string()))
    }

    /// A session this process does not hold, from the store: made live here (owner checked
    /// first: another principal's record is not found, like an unknown id), its
    /// subscriptions made again at this process's backends. `Ok(false)`: not in the store.
    pub(crate) async fn adopt_session(
        &self,
        raw: &str,
        caller: &Principal,
    ) -> Result<bool, CoreError> {
        let Some(store) = self.store().filter(|_| plausible(raw)) else {
            return Ok(false);
        };
        let bytes = store
            .get(raw)
            .await
            .map_err(|e| CoreError::Store(e.to_string()))?;
        let Some(record) = bytes.and_then(|b| serde_json::from_slice::<Record>(&b).ok()) else {
            return Ok(false);
        };
        if record.owner != (caller.issuer.clone(), caller.subject.clone()) {
            return Ok(false);
        }
        let version = switchboard_wire::version::negotiate_legacy(Some(&record.protocol_version));
        let id = self.registry.sessions.adopt(raw, version, caller)?;
        self.remember_client_init(&id, version, record.client_init.as_deref());
        let _ = self.registry.sessions.with(raw, |s| {
            s.log_level = record.log_level;
        });
        for (backend, uri) in record.subscriptions {
            let Ok(backend) = backend.parse::<BackendId>() else {
                continue;
            };
            self.resubscribe(&id, (backend, uri)).await;
        }
        tracing::debug!(session = ?id, "session adopted from the store");
        Ok(true)
    }

    /// Records an adopted session's subscription and makes it at this process's backend
    /// when it is the first subscriber here (a failure is logged: the client still holds
    /// its session; its updates from here are then missing, as after a failed re-subscribe
    /// on restart).
    async fn resubscribe(&self, id: &SessionId, key: SubKey) {
        if self.backends.get(&key.0).is_none() {
            return;
        }
        let tables = self.registry.tables(&key.0);
        let lock = tables.subs.lock(&key.1).await;
        if !tables.subs.has_subscribers(&key.1) {
            let params = serde_json::json!({ "uri": key.1 });
            let subscribe = self
                .internal_call(&key.0, switchboard_wire::method::SUBSCRIBE, params)
                .await;
            if !subscribe.is_ok_and(|a| !a.is_error()) {
                tracing::warn!(backend = %key.0, "re-subscribe of an adopted session failed");
                return;
            }
        }
        let added = self.registry.sessions.with(id.as_str(), |s| {
            s.subscriptions.insert(key.clone());
        });
        if added.is_ok() {
            tables.subs.add(&lock, id.as_str());
        }
    }

    /// A session this process holds, confirmed in the store and its expiry slid (one
    /// round-trip): one that was ended elsewhere (DELETE on another replica) ends here too
    /// and is not found; one the store lost is written again. A store that does not answer leaves it working: its
    /// owner was checked when it was opened or adopted here.
    pub(crate) async fn confirm_stored(
        &self,
        id: SessionId,
        caller: &Principal,
    ) -> Result<SessionId, CoreError> {
        let Some(store) = self.store() else {
            return Ok(id);
        };
        match store.touch(id.as_str()).await {
            Ok(Presence::Live) => Ok(id),
            Ok(Presence::Lost) => {
                // Written again from what this process holds: a store that restarted empty
                // costs no session that a replica still serves.
                if let Err(e) = self.store_session(&id).await {
                    tracing::debug!(error = %e, "a lost session record was not written again");
                }
                Ok(id)
            }
            Ok(Presence::Ended) => {
                let ended = self.registry.sessions.remove(
                    id.as_str(),
                    crate::Transport::Streamable,
                    Some(caller),
                );
                if let Ok(ended) = ended {
                    self.cleanup(ended, crate::session::EndReason::Deleted)
                        .await;
                }
                Err(CoreError::SessionNotFound)
            }
            Err(e) => {
                tracing::debug!(error = %e, "session served from this process: the store did not answer");
                Ok(id)
            }
        }
    }

    /// Ends the session in the store too (DELETE): no replica serves it afterwards.
    pub(crate) async fn unstore_session(&self, raw: &str) {
        if let Some(store) = self.store() {
            if let Err(e) = store.delete(raw).await {
                tracing::warn!(error = %e, "session not removed from the store; it expires with its TTL");
            }
        }
    }
}

/// How long a store round-trip may take before it is an error (the store's own bound).
pub const STORE_TIMEOUT: Duration = Duration::from_millis(500);
