//! Legacy sessions that outlive this process (`--session-store redis://…`): what a Streamable
//! HTTP session needs to be served by any replica, or by this one after a restart, kept in a
//! [`SessionRecords`] (the binary's `switchboard-store`; this module does no I/O). The session
//! table stays the cache every request reads; the store is read when a client names a
//! session this process does not hold, confirmed (and its expiry slid) in one round-trip by
//! every request on a held one, and written when a session starts, changes what it keeps
//! (subscriptions, log level) or ends.
//!
//! What the record holds is the session's *durable* state: owner, negotiated version, the
//! client's `initialize` (its capabilities), log level and subscriptions. What lives only in
//! one process — listen streams and their replay buffers, requests in flight, a session's own
//! upstream processes, parked MRTR calls — stays there (see the README's scale-out section).
//! The owner check is the one the table does: a session of another principal is not found,
//! exactly like an unknown id.
//!
//! [`SessionStore`] is this process's side of it: the records, whether they failed just now,
//! the session table they mirror, and the settings that shape what is written. What it needs
//! of the gateway that holds it (ending a session here, a request of the gateway's own to a
//! backend, a policy check) it asks through [`Host`].

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::registry::Registry;
use crate::session::{SessionId, SubKey};
use crate::BackendId;
use crate::CoreError;
use crate::Principal;

mod home;
mod peers;
mod sync;

pub use home::new_replica_id;

/// Where session records live. Every call is bounded by the implementation (a store that
/// does not answer is an error, never a hang).
pub trait SessionRecords: Send + Sync + fmt::Debug {
    /// Writes `id`'s record at revision `rev`, with the store's TTL; `false` (nothing
    /// written) when the session was ended meanwhile.
    fn put<'a>(
        &'a self,
        id: &'a str,
        record: Vec<u8>,
        rev: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// Reads `id`'s record and its revision, `None` when there is none (changes nothing: the
    /// caller may not be its owner).
    #[allow(clippy::type_complexity)]
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<(Vec<u8>, u64)>, StoreError>>;
    /// Slides `id`'s TTL, and tells whether its record is there.
    fn touch<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Presence, StoreError>>;
    /// Ends `id` everywhere (and remembers, for a TTL, that it was ended).
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Where replica `replica` takes forwarded requests, while it is registered (alive);
    /// `None` once it is gone.
    fn replica_address<'a>(
        &'a self,
        replica: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>>;
    /// Takes one of `owner`'s places for session `id`, counted across every replica on the
    /// store (`--max-sessions-per-principal`): `Ok(false)` when it holds `max` live sessions
    /// already. A place lapses with the session TTL unless taken again; `owner` is an opaque
    /// digest ([`owner_key`]). A store without the count takes every session.
    fn claim_owner<'a>(
        &'a self,
        _owner: &'a str,
        _id: &'a str,
        _max: usize,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }
    /// Gives back the place session `id` took ([`Self::claim_owner`]).
    fn release_owner<'a>(
        &'a self,
        _owner: &'a str,
        _id: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The store's name for a principal's places: a digest of (issuer, subject), so no subject
/// text is written into the store's key space.
pub(crate) fn owner_key(owner: &(String, String)) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(owner.0.as_bytes());
    h.update([0]);
    h.update(owner.1.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// What the store knows of a session this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// Its record is there, at this revision (every write makes a new one).
    Live(u64),
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
    pub(super) protocol_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_init: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) log_level: Option<u8>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) subscriptions: Vec<(String, String)>,
    /// The replica whose process holds what the session cannot leave (its own upstreams):
    /// only it serves the session (see `home`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) home: Option<String>,
}

/// A new revision for a record about to be written (random: two replicas writing at once
/// never produce the same one).
fn new_rev() -> u64 {
    let hex = crate::route::random_hex();
    u64::from_str_radix(&hex[..16], 16).unwrap_or_default()
}

/// The longest client-supplied session id looked up in the store (ours are 32 hex digits):
/// anything else is unknown without a round-trip.
const ID_LEN: usize = 32;

fn parse(bytes: &[u8]) -> Option<Record> {
    serde_json::from_slice(bytes).ok()
}

fn plausible(raw: &str) -> bool {
    raw.len() == ID_LEN && raw.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What the store asks of the gateway that holds it: the parts of a session's life that are
/// not the store's (the gateway, the composition root, answers them).
pub(crate) trait Host: Sync {
    /// Ends a session this process holds because the store says it was ended elsewhere,
    /// releasing what it held here.
    fn end_here(&self, raw: &str) -> impl Future<Output = ()> + Send;
    /// A request of the gateway's own to `backend` (a subscription made again or dropped):
    /// whether it was answered, without an error.
    fn ask_backend(
        &self,
        backend: &BackendId,
        method: &'static str,
        params: Value,
    ) -> impl Future<Output = bool> + Send;
    /// Keeps an adopted session's client `initialize` (`per_session::lazy`).
    fn keep_client_init(&self, session: &SessionId, negotiated: &str, params: Option<&RawValue>);
    /// Whether `who` may watch `uri` under the current policy (`session_ops`).
    fn may_watch(&self, who: &Principal, uri: &str) -> bool;
    /// Whether sessions here may have upstreams of their own (`per_session`): then they are
    /// served only here (see `home`).
    fn has_own_upstreams(&self) -> bool;
}

/// The session store as this process uses it (see the module docs); without a store
/// (`records` is `None`) every operation is a no-op that keeps sessions in memory only.
#[derive(Debug)]
pub struct SessionStore {
    records: Option<Arc<dyn SessionRecords>>,
    /// Whether the store failed just now.
    outage: Outage,
    /// The session table the records mirror, the per-backend subscription tables, peers.
    registry: Arc<Registry>,
    /// This replica's name among the replicas, when requests can be forwarded between them.
    replica_id: Option<String>,
    /// A session the store cannot take is served from this process only (else refused).
    fallback_memory: bool,
    /// Most sessions one principal may hold, counted across replicas.
    max_per_principal: Option<usize>,
    /// Whether an authorization policy is configured: an adopted session's subscriptions are
    /// then judged again here.
    policy: bool,
}

impl SessionStore {
    /// The store side of a gateway with `registry`, from its settings (`GatewayConfig`'s
    /// `session_store`, `replica_id`, `store_fallback_memory`, `max_sessions_per_principal`,
    /// and whether `access` has a policy).
    pub(crate) fn new(
        records: Option<Arc<dyn SessionRecords>>,
        registry: Arc<Registry>,
        replica_id: Option<String>,
        fallback_memory: bool,
        max_per_principal: Option<usize>,
        policy: bool,
    ) -> Self {
        SessionStore {
            records,
            outage: Outage::default(),
            registry,
            replica_id,
            fallback_memory,
            max_per_principal,
            policy,
        }
    }

    /// The store, when sessions are kept beyond this process.
    pub(crate) fn records(&self) -> Option<&dyn SessionRecords> {
        self.records.as_deref()
    }

    /// With a session store, writes a session just opened (with the client's `initialize`
    /// params). `Err`: the store did not take it and the session must not be served (the
    /// caller ends it); with `store_fallback_memory` it is served from this process only.
    pub(crate) async fn keep_opened(
        &self,
        host: &impl Host,
        session: &SessionId,
        params: Option<&RawValue>,
    ) -> Result<(), CoreError> {
        if self.records().is_none() {
            return Ok(());
        }
        self.registry
            .sessions
            .set_init_params(session.as_str(), params.map(ToOwned::to_owned));
        self.claim_owner_place(session).await?;
        let Err(e) = self.write(host, session).await else {
            return Ok(());
        };
        if self.fallback_memory {
            tracing::warn!(error = %e, "session served by this process only: the session store did not take it");
            if self.registry.sessions.is_unstorable(session.as_str()) {
                // Kept for the record alone, which cannot hold them.
                self.registry
                    .sessions
                    .set_init_params(session.as_str(), None);
            }
            return Ok(());
        }
        tracing::warn!(error = %e, "session refused: the session store did not take it");
        let owner = self.registry.sessions.owner_of(session.as_str());
        if let Ok(owner) = owner {
            self.release_owner_place(&owner, session.as_str()).await;
        }
        Err(e)
    }

    /// Writes the session's record (after `initialize`, a subscription change, a log level).
    pub(crate) async fn write(
        &self,
        host: &impl Host,
        session: &SessionId,
    ) -> Result<(), CoreError> {
        let Some(store) = self.records() else {
            return Ok(());
        };
        // An HTTP+SSE session lives with its stream: a record would let its id (which travels
        // in a URL) be served as a Streamable HTTP session, here or elsewhere, after the
        // stream is gone.
        if self.registry.sessions.is_sse(session.as_str()) {
            return Ok(());
        }
        let state = self.registry.sessions.stored_state(session.as_str())?;
        let record = Record {
            owner: state.owner,
            protocol_version: state.protocol_version,
            client_init: state.init_params,
            log_level: state.log_level,
            subscriptions: state.subscriptions,
            home: self.home_of_new_sessions(host),
        };
        let bytes = serde_json::to_vec(&record).map_err(|e| CoreError::Store(e.to_string()))?;
        if bytes.len() > MAX_RECORD {
            // Not tried again at every request (`confirm`); a later change that fits is.
            self.registry.sessions.set_unstorable(session.as_str());
            return Err(CoreError::InvalidParams(
                "the session's state is larger than the session store takes (64 KiB)",
            ));
        }
        let rev = new_rev();
        let written = store.put(session.as_str(), bytes, rev).await;
        match written.map_err(|e| CoreError::Store(e.to_string()))? {
            true => {
                self.registry.sessions.set_stored_rev(session.as_str(), rev);
                Ok(())
            }
            // Ended on another replica meanwhile: ended here too.
            false => {
                host.end_here(session.as_str()).await;
                Err(CoreError::SessionNotFound)
            }
        }
    }

    /// A session this process does not hold, from the store: made live here (owner checked
    /// first: another principal's record is not found, like an unknown id), its
    /// subscriptions made again at this process's `backends`. `Ok(false)`: not in the store.
    pub(crate) async fn adopt(
        &self,
        host: &impl Host,
        backends: &crate::Backends,
        raw: &str,
        caller: &Principal,
    ) -> Result<bool, CoreError> {
        let Some(store) = self.records().filter(|_| plausible(raw)) else {
            return Ok(false);
        };
        let got = store
            .get(raw)
            .await
            .map_err(|e| CoreError::Store(e.to_string()))?;
        let Some((record, rev)) = got.and_then(|(b, rev)| Some((parse(&b)?, rev))) else {
            return Ok(false);
        };
        if record.owner != (caller.issuer.clone(), caller.subject.clone()) {
            return Ok(false);
        }
        // Its owner's use: now its expiry slides (a foreign lookup changed nothing).
        match store
            .touch(raw)
            .await
            .map_err(|e| CoreError::Store(e.to_string()))?
        {
            Presence::Ended => return Ok(false),
            Presence::Live(_) | Presence::Lost => {}
        }
        if let Some(home) = &record.home {
            // Served only where its own upstreams are: forwarded there, or gone with them.
            return self.at_home(raw, home).await.map(|()| false);
        }
        self.make_live(host, backends, raw, caller, (record, rev))
            .await?;
        Ok(true)
    }

    /// An adopted session's record made live in the table, with its subscriptions.
    async fn make_live(
        &self,
        host: &impl Host,
        backends: &crate::Backends,
        raw: &str,
        caller: &Principal,
        (record, rev): (Record, u64),
    ) -> Result<(), CoreError> {
        let version = switchboard_wire::version::negotiate_legacy(Some(&record.protocol_version));
        let id = self.registry.sessions.adopt(raw, version, caller)?;
        host.keep_client_init(&id, version, record.client_init.as_deref());
        // Under a policy, a later policy change judges its subscriptions as this caller.
        let subscriber = self.policy.then(|| {
            Arc::new(Principal {
                credential: None,
                ..caller.clone()
            })
        });
        self.registry.sessions.restore_stored(
            raw,
            (record.log_level, record.client_init),
            rev,
            subscriber,
        );
        for (backend, uri) in record.subscriptions {
            let Ok(backend) = backend.parse::<BackendId>() else {
                continue;
            };
            // Made under a policy this replica may no longer hold: judged again here.
            if self.policy && !host.may_watch(caller, &uri) {
                continue;
            }
            self.resubscribe(host, backends, &id, (backend, uri)).await;
        }
        tracing::debug!(session = ?id, "session adopted from the store");
        Ok(())
    }

    /// Records an adopted session's subscription and makes it at this process's backend
    /// when it is the first subscriber here (a failure is logged: the client still holds
    /// its session; its updates from here are then missing, as after a failed re-subscribe
    /// on restart).
    async fn resubscribe(
        &self,
        host: &impl Host,
        backends: &crate::Backends,
        id: &SessionId,
        key: SubKey,
    ) {
        if backends.get(&key.0).is_none() {
            return;
        }
        // Within the session's and its principal's bounds, or not made at all (a backend
        // subscription no session holds would never be undone).
        if self
            .registry
            .sessions
            .may_subscribe(id.as_str(), &key)
            .is_err()
        {
            return;
        }
        let tables = self.registry.tables(&key.0);
        let lock = tables.subs.lock(&key.1).await;
        let first = !tables.subs.has_subscribers(&key.1);
        if first {
            let params = serde_json::json!({ "uri": key.1 });
            let subscribe = host
                .ask_backend(&key.0, switchboard_wire::method::SUBSCRIBE, params)
                .await;
            if !subscribe {
                tracing::warn!(backend = %key.0, "re-subscribe of an adopted session failed");
                return;
            }
        }
        let added = self.registry.sessions.add_subscription(id.as_str(), &key);
        match added {
            Ok(_) => tables.subs.add(&lock, id.as_str()),
            // Ended, or its bound taken meanwhile: the subscription made for it is undone.
            Err(_) if first => {
                let params = serde_json::json!({ "uri": key.1 });
                let _ = host
                    .ask_backend(&key.0, switchboard_wire::method::UNSUBSCRIBE, params)
                    .await;
            }
            Err(_) => {}
        }
    }

    /// A session this process holds, confirmed in the store and its expiry slid (one
    /// round-trip): one that was ended elsewhere (DELETE on another replica) ends here too
    /// and is not found; one the store lost is written again. A store that does not answer
    /// leaves it working: its owner was checked when it was opened or adopted here.
    /// `caller`: its owner, making this request (what changed elsewhere is judged as it).
    pub(crate) async fn confirm(
        &self,
        host: &impl Host,
        backends: &crate::Backends,
        id: SessionId,
        caller: &Principal,
    ) -> Result<SessionId, CoreError> {
        let Some(store) = self.records() else {
            return Ok(id);
        };
        if self.outage.ongoing() {
            // The store just failed: held sessions are served from memory without waiting
            // for it at every request (it is tried again after a short pause).
            return Ok(id);
        }
        let touched = store.touch(id.as_str()).await;
        self.outage.record(touched.is_ok());
        match touched {
            Ok(Presence::Live(rev)) => {
                let known = self.registry.sessions.stored_rev(id.as_str());
                if known.ok().flatten() != Some(rev) {
                    // Changed through another replica since this one last read or wrote it.
                    self.reconcile(host, backends, &id, caller).await;
                }
                Ok(id)
            }
            // One too large for the store is served from here only.
            Ok(Presence::Lost) if self.registry.sessions.is_unstorable(id.as_str()) => Ok(id),
            Ok(Presence::Lost) => {
                // Written again from what this process holds: a store that restarted empty
                // costs no session that a replica still serves.
                if let Err(e) = self.write(host, &id).await {
                    tracing::debug!(error = %e, "a lost session record was not written again");
                }
                Ok(id)
            }
            Ok(Presence::Ended) => {
                host.end_here(id.as_str()).await;
                Err(CoreError::SessionNotFound)
            }
            Err(e) => {
                tracing::debug!(error = %e, "session served from this process: the store did not answer");
                Ok(id)
            }
        }
    }

    /// Counts a session just opened against its principal's limit across replicas (the
    /// table's own count is this replica's only). `Err`: over the limit (the caller ends it),
    /// or the store did not answer (served here only with `store_fallback_memory`).
    pub(crate) async fn claim_owner_place(&self, session: &SessionId) -> Result<(), CoreError> {
        let (Some(store), Some(max)) = (self.records(), self.max_per_principal) else {
            return Ok(());
        };
        let owner = self.registry.sessions.owner_of(session.as_str())?;
        match store
            .claim_owner(&owner_key(&owner), session.as_str(), max)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(CoreError::TooManyPrincipalSessions(max)),
            Err(e) if self.fallback_memory => {
                tracing::warn!(error = %e, "the session store did not count this session: counted by this replica only");
                Ok(())
            }
            Err(e) => Err(CoreError::Store(e.to_string())),
        }
    }

    /// Gives back an ended session's place in its principal's count across replicas.
    pub(crate) async fn release_owner_place(&self, owner: &(String, String), id: &str) {
        let (Some(store), Some(_)) = (self.records(), self.max_per_principal) else {
            return;
        };
        if let Err(e) = store.release_owner(&owner_key(owner), id).await {
            tracing::debug!(error = %e, "releasing a session's place in the store failed (it lapses with the TTL)");
        }
    }

    /// Ends the session in the store too (DELETE): no replica serves it afterwards. A store
    /// that does not answer fails the DELETE (503: the client retries), since other replicas
    /// would go on serving the session.
    pub(crate) async fn unstore(&self, raw: &str) -> Result<(), CoreError> {
        let Some(store) = self.records() else {
            return Ok(());
        };
        store
            .delete(raw)
            .await
            .map_err(|e| CoreError::Store(e.to_string()))
    }
}

/// How long a store round-trip may take before it is an error (the store's own bound).
pub const STORE_TIMEOUT: Duration = Duration::from_millis(500);

/// The largest record written (the client's `initialize` may be large): a bigger one is not
/// kept beyond this process.
const MAX_RECORD: usize = 64 * 1024;

/// How long held sessions skip the store after it failed.
const OUTAGE_PAUSE: Duration = Duration::from_secs(2);

/// Whether the store failed just now (a breaker for the confirmation of held sessions: with
/// a store that does not answer, every request would otherwise wait out its bound).
#[derive(Debug, Default)]
pub(crate) struct Outage(parking_lot::Mutex<Option<std::time::Instant>>);

impl Outage {
    fn ongoing(&self) -> bool {
        self.0.lock().is_some_and(|at| at.elapsed() < OUTAGE_PAUSE)
    }

    fn record(&self, ok: bool) {
        let mut at = self.0.lock();
        *at = (!ok).then(std::time::Instant::now);
    }
}
