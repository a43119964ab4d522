//! Sessions with a home: a session whose own upstreams (`--isolation per-session`, a
//! Legacy-only remote's per-session upstream session) live in one replica's process can be
//! served only by that replica. Its record names that replica; any other replica that gets
//! one of its requests hands it over (the HTTP layer's hop to the address the home
//! registered), and once the home is gone — unregistered, or the session ended there — so
//! is the session: its record is ended, and the client's next request is a clean 404 (the
//! SDKs then open a new session).
//!
//! The same holds for a listen stream resumed elsewhere: its replay buffer is in the
//! memory of the replica that held it, named in the stream's event ids
//! ([`SessionStore::resume_at`]).

use super::{Host, SessionStore, StoreError};
use crate::{CoreError, Gone, ReplicaAt};

/// What separates a listen event's own id from the replica that numbered it.
const REPLICA_MARK: char = '@';

impl SessionStore {
    /// The home written into new sessions' records: this replica when sessions here have
    /// upstreams of their own and requests can be forwarded here.
    pub(super) fn home_of_new_sessions(&self, host: &impl Host) -> Option<String> {
        self.replica_id.clone().filter(|_| host.has_own_upstreams())
    }

    /// A session this replica does not hold whose record names `home`: served there
    /// (`ServedElsewhere`) while that replica is registered; otherwise ended in the store
    /// (not found). Its home being this replica means it ended here (ids are never reused
    /// by a restarted process): its upstreams are gone, so the session is too.
    pub(super) async fn at_home(&self, raw: &str, home: &str) -> Result<(), CoreError> {
        let Some(store) = self.records() else {
            return Err(CoreError::SessionNotFound);
        };
        if self.replica_id.as_deref() != Some(home) {
            let address = store.replica_address(home).await.map_err(unavailable)?;
            if let Some(registration) = address {
                return Err(CoreError::ServedElsewhere {
                    at: ReplicaAt {
                        replica: home.to_owned(),
                        registration,
                    },
                    gone: Gone::Session(raw.to_owned()),
                });
            }
        }
        tracing::info!(
            home,
            "session ended: the replica holding its own upstreams is gone"
        );
        store.delete(raw).await.map_err(unavailable)?;
        Err(CoreError::SessionNotFound)
    }

    /// The home that [`ServedElsewhere`](CoreError::ServedElsewhere) named for `raw` (its
    /// `Gone::Session`) refuses connections: nothing listens at its address any more (it died and
    /// its registration has not expired yet), and its upstreams went with it, so the session
    /// ends everywhere. Only for the session `at_home` named, i.e. after its owner check —
    /// never for a session id a request merely carries.
    pub async fn end_unreachable_home(&self, raw: &str) {
        let Some(store) = self.records() else {
            return;
        };
        tracing::info!("session ended: the replica holding its own upstreams refuses connections");
        if let Err(e) = store.delete(raw).await {
            tracing::warn!(error = %e, "session of an unreachable replica not ended in the store");
        }
    }

    /// Where a request is served on a replicated gateway: a Modern retry at the replica
    /// whose token it carries (`modern_home`), a task method at the replica whose handle it
    /// names (`task_home`), anything else here.
    pub(crate) async fn request_home(
        &self,
        msg: &switchboard_wire::Message<'_>,
        modern: bool,
    ) -> Result<(), CoreError> {
        if modern {
            self.modern_home(msg).await?;
        }
        self.task_home(msg, modern).await
    }

    /// Where a Modern retry is served: at the replica whose token its `requestState` is
    /// (a call parked there, or a relayed state whose single use is remembered there),
    /// `ServedElsewhere` while that replica is registered. Anything else — no token, one of
    /// this replica's, a gone replica's — is served here (and a foreign token refused as
    /// it always is).
    async fn modern_home(&self, msg: &switchboard_wire::Message<'_>) -> Result<(), CoreError> {
        if self.replica_id.is_none() {
            return Ok(());
        }
        let Some(token) = msg
            .param("requestState")
            .and_then(|t| serde_json::from_str::<String>(t.get()).ok())
        else {
            return Ok(());
        };
        let replica = crate::relay::replica_of_token(&token)
            .or_else(|| crate::mrtr::replica_of_token(&token).map(str::to_owned));
        match replica {
            Some(replica) => self.elsewhere(&replica, Gone::RequestState).await,
            None => Ok(()),
        }
    }

    /// Where a task method (`tasks/get|result|cancel|update`) is served: at the replica whose
    /// handle its `taskId` is (the task's owner table and its backend live there), while that
    /// replica is registered. Anything else is served here, where a handle this replica did
    /// not mint names nothing (the unknown-task answer). Both eras; reads the request only.
    async fn task_home(
        &self,
        msg: &switchboard_wire::Message<'_>,
        modern: bool,
    ) -> Result<(), CoreError> {
        if self.replica_id.is_none()
            || !msg.method.is_some_and(|m| crate::tasks::BY_ID.contains(&m))
        {
            return Ok(());
        }
        let Some(handle) = crate::tasks::requested_task(msg.params) else {
            return Ok(());
        };
        match crate::tasks::replica_of_handle(&handle) {
            Some(replica) => self.elsewhere(replica, Gone::Task { modern }).await,
            None => Ok(()),
        }
    }

    /// Where a client's answer to a gateway question is taken: the replica that asked it,
    /// named in its key (`client_ask`), while that replica is registered. `Ok` when the key
    /// names none, this one, or one that is gone (the caller then refuses the answer).
    pub(crate) async fn answer_home(
        &self,
        msg: &switchboard_wire::Message<'_>,
    ) -> Result<(), CoreError> {
        let key = msg
            .id
            .as_ref()
            .and_then(switchboard_wire::RequestId::as_str);
        let replica = key.as_deref().and_then(crate::client_ask::replica_of_key);
        match replica {
            Some(replica) => self.elsewhere(replica, Gone::Question).await,
            None => Ok(()),
        }
    }

    /// Where a POST for an HTTP+SSE session this replica does not hold is taken: the replica
    /// its endpoint URL names (`replica=`), whose stream is the session, while registered.
    /// `Ok` when that is none, this one, or one that is gone (the caller answers 404).
    pub async fn sse_home(&self, replica: Option<&str>) -> Result<(), CoreError> {
        match replica {
            Some(replica) => self.elsewhere(replica, Gone::Stream).await,
            None => Ok(()),
        }
    }

    /// `ServedElsewhere` when `replica` is another registered replica.
    async fn elsewhere(&self, replica: &str, gone: Gone) -> Result<(), CoreError> {
        let (Some(own), Some(store)) = (self.replica_id.as_deref(), self.records()) else {
            return Ok(());
        };
        if replica == own || !plausible_replica(replica) {
            return Ok(());
        }
        match store.replica_address(replica).await.map_err(unavailable)? {
            Some(registration) => Err(CoreError::ServedElsewhere {
                at: ReplicaAt {
                    replica: replica.to_owned(),
                    registration,
                },
                gone,
            }),
            None => Ok(()),
        }
    }

    /// This replica's name, with replicas: an HTTP+SSE endpoint URL carries it (`replica=`),
    /// so a POST reaching another replica is taken to the one whose stream is the session.
    pub fn replica_id(&self) -> Option<&str> {
        self.replica_id.as_deref()
    }

    /// The suffix this replica puts on its listen events' ids (`listen-7@REPLICA`), so a
    /// client resuming through another replica is sent back to the one holding its replay
    /// buffer. `None` without replicas.
    pub fn listen_id_suffix(&self) -> Option<String> {
        let replica = self.replica_id.as_deref()?;
        Some(format!("{REPLICA_MARK}{replica}"))
    }

    /// Where a `Last-Event-ID` can be resumed: here (`Ok` with the id as this replica
    /// numbered it, or `None` when it names nothing this replica can replay), or at the
    /// replica that numbered it (`StreamElsewhere`) while it is registered. A replica that
    /// is gone took the events with it: the stream starts afresh here.
    pub(crate) async fn resume_at<'a>(
        &self,
        last_event_id: Option<&'a str>,
    ) -> Result<Option<&'a str>, CoreError> {
        let Some(own) = self.replica_id.as_deref() else {
            return Ok(last_event_id);
        };
        let Some((event, replica)) = last_event_id.and_then(|id| id.split_once(REPLICA_MARK))
        else {
            return Ok(None);
        };
        if replica == own {
            return Ok(Some(event));
        }
        if !plausible_replica(replica) {
            return Ok(None);
        }
        let Some(store) = self.records() else {
            return Ok(None);
        };
        match store.replica_address(replica).await.map_err(unavailable)? {
            Some(registration) => Err(CoreError::StreamElsewhere(ReplicaAt {
                replica: replica.to_owned(),
                registration,
            })),
            None => Ok(None),
        }
    }
}

/// Hex digits in a replica's name.
const REPLICA_ID_LEN: usize = 16;

/// A fresh name for this replica (random: a restarted process is a new replica, whose
/// predecessor's sessions with a home ended with it).
pub fn new_replica_id() -> String {
    crate::route::random_hex()[..REPLICA_ID_LEN].to_owned()
}

/// Whether a client-supplied replica name could be one (else no lookup is made).
fn plausible_replica(name: &str) -> bool {
    name.len() == REPLICA_ID_LEN && name.bytes().all(|b| b.is_ascii_hexdigit())
}

fn unavailable(e: StoreError) -> CoreError {
    CoreError::Store(e.to_string())
}
