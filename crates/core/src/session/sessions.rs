//! The table of live sessions ([`Sessions`]): creation, lookup by a client-supplied id,
//! and every way a session ends (handing back its state as [`Ended`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{OwnerCounts, OwnerSlot, Session, SessionId, SubKey, Transport};
use crate::listen_stream::{ListenState, ListenStream};
use crate::route::RouteKey;
use crate::BackendId;
use crate::CoreError;
use crate::Principal;

/// The state of a session that just ended, for cleanup outside the table lock.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) id: String,
    /// Who owned it (issuer, subject), for its audit line.
    pub(crate) owner: (String, String),
    pub(crate) subscriptions: HashSet<SubKey>,
    pub(crate) had_log_level: bool,
    /// Route keys of requests that were still waiting, with their backends; each backend is
    /// told to cancel its own.
    pub(crate) in_flight: Vec<(BackendId, RouteKey)>,
    /// Per-session mode: the session's backend processes (or upstream sessions), to shut
    /// down.
    pub(crate) processes: Vec<switchboard_upstream::UpstreamOwner>,
}

/// All live sessions.
#[derive(Debug)]
pub struct Sessions {
    /// Keyed by ids this gateway minted (random), so a fast hasher is safe: no client chooses
    /// what is inserted, and a lookup of a crafted id probes one bucket.
    sessions: Mutex<foldhash::HashMap<String, Session>>,
    max: usize,
    /// Most live sessions one principal may hold (`usize::MAX`: no limit).
    max_per_principal: usize,
    per_principal: OwnerCounts,
    /// Resource subscriptions per principal, over its sessions (`watch`).
    pub(super) subscriptions_per_principal: OwnerCounts,
    ttl: Duration,
    generation: std::sync::atomic::AtomicU64,
}

impl Sessions {
    /// A store holding at most `max` sessions, each expiring after `ttl` without use.
    pub fn new(max: usize, ttl: Duration) -> Self {
        Sessions {
            sessions: Mutex::new(foldhash::HashMap::default()),
            max,
            max_per_principal: usize::MAX,
            per_principal: OwnerCounts::default(),
            subscriptions_per_principal: OwnerCounts::default(),
            ttl,
            generation: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Creates a Streamable HTTP session owned by `owner`, or refuses when the table is full.
    pub fn create(
        &self,
        protocol_version: &'static str,
        owner: &Principal,
    ) -> Result<SessionId, CoreError> {
        self.create_with(
            Transport::Streamable,
            protocol_version,
            ListenState::default(),
            None,
            owner,
        )
    }

    /// Limits how many live sessions one principal may hold (beyond the table's own bound):
    /// with authentication on, one caller cannot take every session from the others.
    pub fn with_principal_limit(mut self, max: usize) -> Self {
        self.max_per_principal = max.max(1);
        self
    }

    /// Takes a place in `owner`'s count, or refuses when it has its limit. Called with the
    /// session table locked (see [`OwnerSlot`] for the lock order).
    fn count_against_owner(&self, owner: &Principal) -> Result<Option<OwnerSlot>, CoreError> {
        if self.max_per_principal == usize::MAX {
            return Ok(None);
        }
        let key = (owner.issuer.clone(), owner.subject.clone());
        let mut counts = self.per_principal.lock();
        let n = counts.entry(key.clone()).or_default();
        if *n >= self.max_per_principal {
            return Err(CoreError::TooManyPrincipalSessions(self.max_per_principal));
        }
        *n += 1;
        Ok(Some(OwnerSlot {
            counts: self.per_principal.clone(),
            owner: key,
        }))
    }

    /// Creates a session of `transport` with the given stream state and task set.
    pub(crate) fn create_with(
        &self,
        transport: Transport,
        protocol_version: &'static str,
        listen: ListenState,
        tasks: Option<JoinSet<()>>,
        owner: &Principal,
    ) -> Result<SessionId, CoreError> {
        let mut sessions = self.sessions.lock();
        if sessions.len() >= self.max {
            return Err(CoreError::TooManySessions(self.max));
        }
        let counted = self.count_against_owner(owner)?;
        let id = loop {
            let id = SessionId::mint();
            if !sessions.contains_key(&id.0) {
                break id;
            }
        };
        let session = Session::new(transport, protocol_version, listen, tasks, owner, counted);
        sessions.insert(id.0.clone(), session);
        Ok(id)
    }

    /// Makes a Streamable HTTP session held in the session store live here, under its own
    /// id and owner (`session_store`, which checked the owner). Already live (a concurrent
    /// request adopted it first): nothing changes, if it is that owner's Streamable HTTP
    /// session; another's, or an HTTP+SSE one, is not found (a record naming another owner
    /// than the session live here is not this session's).
    pub(crate) fn adopt(
        &self,
        raw: &str,
        protocol_version: &'static str,
        owner: &Principal,
    ) -> Result<SessionId, CoreError> {
        let mut sessions = self.sessions.lock();
        if let Some(live) = sessions.get(raw) {
            let same = live.transport == Transport::Streamable
                && *live.owner() == (owner.issuer.clone(), owner.subject.clone());
            return match same {
                true => Ok(SessionId(raw.to_owned())),
                false => Err(CoreError::SessionNotFound),
            };
        }
        if sessions.len() >= self.max {
            return Err(CoreError::TooManySessions(self.max));
        }
        let counted = self.count_against_owner(owner)?;
        let session = Session::new(
            Transport::Streamable,
            protocol_version,
            ListenState::default(),
            None,
            owner,
            counted,
        );
        sessions.insert(raw.to_owned(), session);
        Ok(SessionId(raw.to_owned()))
    }
}

impl Sessions {
    /// Looks a session of `transport` owned by `caller` up by the client-supplied value and
    /// refreshes its TTL. Returns the canonical id and the session's negotiated version. A
    /// session of another principal is not found, exactly like an unknown id (no oracle).
    pub fn touch(
        &self,
        raw: &str,
        transport: Transport,
        caller: &Principal,
    ) -> Result<(SessionId, &'static str), CoreError> {
        self.with_owned(raw, transport, caller, |s| {
            s.last_seen = Instant::now();
            s.protocol_version
        })
        .map(|v| (SessionId(raw.to_owned()), v))
    }

    /// Runs `f` on a live session under the table lock (`f` must not block).
    pub(super) fn with<R>(
        &self,
        raw: &str,
        f: impl FnOnce(&mut Session) -> R,
    ) -> Result<R, CoreError> {
        let mut sessions = self.sessions.lock();
        sessions
            .get_mut(raw)
            .map(f)
            .ok_or(CoreError::SessionNotFound)
    }

    /// Like [`Self::with`], for a client-supplied id that must name a session of `transport`:
    /// an id of the other transport is treated exactly like an unknown one.
    pub(super) fn with_transport<R>(
        &self,
        raw: &str,
        transport: Transport,
        f: impl FnOnce(&mut Session) -> R,
    ) -> Result<R, CoreError> {
        let mut sessions = self.sessions.lock();
        sessions
            .get_mut(raw)
            .filter(|s| s.transport == transport)
            .map(f)
            .ok_or(CoreError::SessionNotFound)
    }

    /// Like [`Self::with_transport`], for a client-supplied id that must also belong to
    /// `caller`: another principal's session is treated exactly like an unknown one.
    pub(super) fn with_owned<R>(
        &self,
        raw: &str,
        transport: Transport,
        caller: &Principal,
        f: impl FnOnce(&mut Session) -> R,
    ) -> Result<R, CoreError> {
        let mut sessions = self.sessions.lock();
        sessions
            .get_mut(raw)
            .filter(|s| s.transport == transport && s.owned_by(caller))
            .map(f)
            .ok_or(CoreError::SessionNotFound)
    }

    /// Refreshes the TTL of a session the gateway itself holds the id of (an open HTTP+SSE
    /// stream). False once it has ended.
    pub(crate) fn refresh(&self, id: &SessionId, transport: Transport) -> bool {
        self.with_transport(id.as_str(), transport, |s| s.last_seen = Instant::now())
            .is_ok()
    }

    /// Runs `f` on every live session under the table lock (`f` must not block).
    pub(super) fn for_each(&self, mut f: impl FnMut(&str, &mut Session)) {
        for (id, s) in self.sessions.lock().iter_mut() {
            f(id, s);
        }
    }

    /// Opens (or replaces) a Streamable HTTP session's listen stream.
    pub fn attach_listener(
        &self,
        raw: &str,
        caller: &Principal,
        last_event_id: Option<&str>,
    ) -> Result<ListenStream, CoreError> {
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.with_owned(raw, Transport::Streamable, caller, |s| {
            s.last_seen = Instant::now();
            s.listen.attach(generation, last_event_id)
        })
    }

    /// Closes the session's listen stream if it is still `generation`.
    pub fn detach_listener(&self, raw: &str, generation: u64) {
        let _ = self.with_transport(raw, Transport::Streamable, |s| s.listen.detach(generation));
    }

    /// Queues a message on one session's listen stream.
    /// Queues `data` on the session's listen stream; false when no stream of it is attached
    /// here (it is kept for a resume here either way).
    pub(crate) fn push_listen(&self, raw: &str, data: Bytes) -> bool {
        self.with(raw, |s| {
            let attached = s.listen.is_attached();
            s.listen.push(data);
            attached
        })
        .unwrap_or(false)
    }

    /// Queues `data` on the session's listen stream only if one is attached here (a message a
    /// peer replica forwarded: kept nowhere else).
    pub(crate) fn push_if_attached(&self, raw: &str, data: Bytes) -> bool {
        self.with(raw, |s| s.listen.is_attached() && s.listen.push(data))
            .unwrap_or(false)
    }

    /// Ends a session of `transport` (and, when `caller` is given, owned by it). Errors if it
    /// did not exist (on that transport, for that caller).
    pub(crate) fn remove(
        &self,
        raw: &str,
        transport: Transport,
        caller: Option<&Principal>,
    ) -> Result<Ended, CoreError> {
        let session = {
            let mut sessions = self.sessions.lock();
            let mine = |s: &Session| caller.is_none_or(|c| s.owned_by(c));
            if !sessions
                .get(raw)
                .is_some_and(|s| s.transport == transport && mine(s))
            {
                return Err(CoreError::SessionNotFound);
            }
            sessions.remove(raw).ok_or(CoreError::SessionNotFound)?
        };
        Ok(ended(raw.to_owned(), session))
    }

    /// Ends a session whatever its transport (the gateway's own cleanup paths).
    pub(crate) fn remove_any(&self, raw: &str) -> Result<Ended, CoreError> {
        let session = self
            .sessions
            .lock()
            .remove(raw)
            .ok_or(CoreError::SessionNotFound)?;
        Ok(ended(raw.to_owned(), session))
    }

    /// Ends every session (gateway shutdown).
    pub(crate) fn drain(&self) -> Vec<Ended> {
        let all: Vec<(String, Session)> = self.sessions.lock().drain().collect();
        all.into_iter().map(|(id, s)| ended(id, s)).collect()
    }

    /// Removes every session idle for longer than the TTL.
    pub(crate) fn reap(&self) -> Vec<Ended> {
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        let expired: Vec<String> = sessions
            .iter()
            .filter(|(_, s)| now.duration_since(s.last_seen) >= self.ttl && s.in_flight.is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        expired
            .into_iter()
            .filter_map(|id| sessions.remove(&id).map(|s| ended(id, s)))
            .collect()
    }

    /// Per-session mode: removes sessions with their own backend whose listen stream has been
    /// gone for longer than `grace` and that wait for nothing (the client is gone; its process
    /// should not live until the TTL).
    pub(crate) fn reap_lost_listeners(&self, grace: Duration) -> Vec<Ended> {
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        let lost: Vec<String> = sessions
            .iter()
            .filter(|(_, s)| {
                !s.own.is_empty()
                    && s.in_flight.is_empty()
                    && s.listen.lost_for(now).is_some_and(|d| d >= grace)
            })
            .map(|(id, _)| id.clone())
            .collect();
        lost.into_iter()
            .filter_map(|id| sessions.remove(&id).map(|s| ended(id, s)))
            .collect()
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `raw` names a live HTTP+SSE session (its stream is the session: it has no
    /// record another replica could serve it from).
    pub(crate) fn is_sse(&self, raw: &str) -> bool {
        self.with(raw, |s| s.transport == Transport::Sse)
            .unwrap_or(false)
    }

    /// Whether `raw` names a live session (any transport).
    pub(crate) fn is_live(&self, raw: &str) -> bool {
        self.with(raw, |_| ()).is_ok()
    }

    /// Runs `f` with the session's owner (issuer, subject) under the table lock while `raw`
    /// names a live session (`f` touches no session and must not block): work that must
    /// not outlive the session, such as recording what its end purges.
    pub(crate) fn while_live<R>(
        &self,
        raw: &str,
        f: impl FnOnce(&(String, String)) -> R,
    ) -> Result<R, CoreError> {
        self.with(raw, |s| f(s.owner()))
    }

    /// Live sessions per transport: (Streamable HTTP, HTTP+SSE).
    pub(crate) fn count_by_transport(&self) -> (usize, usize) {
        let (mut streamable, mut sse) = (0, 0);
        self.for_each(|_, s| match s.transport {
            Transport::Streamable => streamable += 1,
            Transport::Sse => sse += 1,
        });
        (streamable, sse)
    }

    /// Live sessions per principal (issuer, subject): Streamable HTTP and HTTP+SSE, in no
    /// order. For `/status`; no session id leaves here.
    pub(crate) fn count_by_principal(&self) -> Vec<((String, String), usize, usize)> {
        let mut counts: HashMap<(String, String), (usize, usize)> = HashMap::new();
        self.for_each(|_, s| {
            let count = match counts.get_mut(s.owner()) {
                Some(count) => count,
                None => counts.entry(s.owner().clone()).or_default(),
            };
            match s.transport {
                Transport::Streamable => count.0 += 1,
                Transport::Sse => count.1 += 1,
            }
        });
        counts
            .into_iter()
            .map(|(owner, (streamable, sse))| (owner, streamable, sse))
            .collect()
    }

    /// The TTL, so the reaper can tick at a fraction of it.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Sum of per-session table entries (subscriptions, in-flight requests, attached streams),
    /// for leak tests.
    pub fn entry_count(&self) -> usize {
        self.sessions
            .lock()
            .values()
            .map(|s| {
                s.subscriptions.len() + s.in_flight.len() + usize::from(s.listen.is_attached())
            })
            .sum()
    }
}

fn ended(id: String, session: Session) -> Ended {
    let in_flight = match session.tasks {
        // HTTP+SSE: every request runs in one of the session's tasks. Aborting them drops each
        // call, which withdraws it and tells the backend to cancel it, exactly once per key.
        Some(mut tasks) => {
            tasks.abort_all();
            Vec::new()
        }
        // Streamable HTTP: anything still waiting is cancelled with its session.
        None => session
            .in_flight
            .into_values()
            .filter_map(|f| {
                f.cancel.cancel();
                f.at_backend.then_some((f.backend, f.key))
            })
            .collect(),
    };
    Ended {
        id,
        owner: session.owner,
        subscriptions: session.subscriptions,
        had_log_level: session.log_level.is_some(),
        in_flight,
        processes: session
            .own
            .into_values()
            .filter_map(|mut o| o.process.take())
            .collect(),
    }
}

#[cfg(test)]
mod tests;
