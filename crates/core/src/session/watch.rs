//! What a session asked to hear: its resource subscriptions (mirrored from the backends'
//! subscription tables), who made them, the URIs it watches at its own processes, and its
//! log level.

use std::sync::Arc;

use super::{Sessions, SubKey};
use crate::CoreError;
use crate::Principal;

/// Most URIs one session watches at its own processes under a policy (more are withheld).
const MAX_OWN_WATCHED: usize = 1024;
/// Most resource subscriptions one session holds (`resources/subscribe` past it is refused).
pub(crate) const MAX_SUBSCRIPTIONS: usize = 1024;
/// Most resource subscriptions one principal holds over all its sessions (the anonymous
/// principal, every caller of a gateway without authentication, excepted).
pub(crate) const MAX_SUBSCRIPTIONS_PER_PRINCIPAL: usize = 4 * MAX_SUBSCRIPTIONS;
/// Longest resource URI the gateway subscribes to or watches for a caller, in bytes.
pub(crate) const MAX_URI_BYTES: usize = 8192;

/// What an answered subscribe or unsubscribe at a session's own process means for the URIs
/// the session watches there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnWatch {
    /// An unsubscribe: the URI is no longer watched.
    Unwatch,
    /// A subscribe the policy in force allows: the URI is watched (within the bound).
    Watch,
    /// Nothing changes but the subscriber.
    Keep,
}

impl Sessions {
    /// Whether session `raw` is subscribed to `key`.
    pub(crate) fn is_subscribed(&self, raw: &str, key: &SubKey) -> Result<bool, CoreError> {
        self.with(raw, |s| s.subscriptions.contains(key))
    }

    /// Whether session `raw` may record a subscription to `key`: it holds it already, or
    /// fewer than [`MAX_SUBSCRIPTIONS`] and its principal fewer than
    /// [`MAX_SUBSCRIPTIONS_PER_PRINCIPAL`].
    pub(crate) fn may_subscribe(&self, raw: &str, key: &SubKey) -> Result<(), CoreError> {
        self.with(raw, |s| self.room_for(s, key))?
    }

    fn room_for(&self, s: &super::Session, key: &SubKey) -> Result<(), CoreError> {
        if s.subscriptions.contains(key) {
            return Ok(());
        }
        if s.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(CoreError::TooManySubscriptions(MAX_SUBSCRIPTIONS));
        }
        let (issuer, subject) = s.owner();
        if crate::principal::is_anonymous(issuer, subject) {
            return Ok(());
        }
        let counts = self.subscriptions_per_principal.lock();
        match counts.get(s.owner()) {
            Some(n) if *n >= MAX_SUBSCRIPTIONS_PER_PRINCIPAL => Err(
                CoreError::TooManySubscriptions(MAX_SUBSCRIPTIONS_PER_PRINCIPAL),
            ),
            _ => Ok(()),
        }
    }

    /// Records the session's subscription to `key` (within [`MAX_SUBSCRIPTIONS`] and its
    /// principal's [`MAX_SUBSCRIPTIONS_PER_PRINCIPAL`]); true when it is new.
    pub(crate) fn add_subscription(&self, raw: &str, key: &SubKey) -> Result<bool, CoreError> {
        self.with(raw, |s| {
            self.room_for(s, key)?;
            if !s.subscriptions.insert(key.clone()) {
                return Ok(false);
            }
            let counts = &self.subscriptions_per_principal;
            let owner = s.owner().clone();
            (s.subscribed
                .get_or_insert_with(|| Share::new(counts.clone(), owner)))
            .add();
            Ok(true)
        })?
    }

    /// Forgets the session's subscription to `key`; true when it had one.
    pub(crate) fn remove_subscription(&self, raw: &str, key: &SubKey) -> Result<bool, CoreError> {
        self.with(raw, |s| {
            let had = s.subscriptions.remove(key);
            if let (true, Some(share)) = (had, s.subscribed.as_mut()) {
                share.remove();
            }
            had
        })
    }

    /// Remembers who subscribed last (its credential dropped): a changed policy judges the
    /// session's subscriptions again as this principal. A session that ended needs nothing.
    pub(crate) fn set_subscriber(&self, raw: &str, who: Arc<Principal>) {
        let _ = self.with(raw, |s| s.subscriber = Some(who));
    }

    /// Every subscription of a session with a recorded subscriber: (session, subscriber,
    /// subscription), for judging them again.
    pub(crate) fn judged_subscriptions(&self) -> Vec<(String, Arc<Principal>, SubKey)> {
        let mut held = Vec::new();
        self.for_each(|sid, s| {
            if let Some(who) = &s.subscriber {
                held.extend(
                    s.subscriptions
                        .iter()
                        .map(|k| (sid.to_owned(), who.clone(), k.clone())),
                );
            }
        });
        held
    }

    /// Every URI a session with a recorded subscriber watches at its own processes:
    /// (session, subscriber, URI), for judging them again.
    pub(crate) fn judged_own_watches(&self) -> Vec<(String, Arc<Principal>, String)> {
        let mut own = Vec::new();
        self.for_each(|sid, s| {
            if let Some(who) = &s.subscriber {
                own.extend(
                    s.own_watched
                        .iter()
                        .map(|u| (sid.to_owned(), who.clone(), u.clone())),
                );
            }
        });
        own
    }

    /// Stops `uri`'s updates from the session's own processes reaching it.
    pub(crate) fn unwatch_own(&self, raw: &str, uri: &str) {
        let _ = self.with(raw, |s| s.own_watched.remove(uri));
    }

    /// A subscribe or unsubscribe at the session's own process, as `who`: the session is
    /// judged as `who` from now on, and `uri` (scheme folded) watched or not as `change` says.
    pub(crate) fn note_own_watch(
        &self,
        raw: &str,
        who: Arc<Principal>,
        uri: String,
        change: OwnWatch,
    ) {
        let _ = self.with(raw, |s| {
            s.subscriber = Some(who);
            if change == OwnWatch::Unwatch {
                s.own_watched.remove(&uri);
            } else if change == OwnWatch::Watch && s.own_watched.len() < MAX_OWN_WATCHED {
                s.own_watched.insert(uri);
            }
        });
    }

    /// Records the session's `logging/setLevel` (a rank, see `logging`).
    pub(crate) fn set_log_level(&self, raw: &str, level: u8) -> Result<(), CoreError> {
        self.with(raw, |s| s.log_level = Some(level))
    }

    /// The log level of every session that set one.
    pub(crate) fn log_levels(&self) -> Vec<u8> {
        let mut levels = Vec::new();
        self.for_each(|_, s| levels.extend(s.log_level));
        levels
    }
}

/// A session's subscriptions in its principal's count: added and removed with them, given
/// back whole when the session is dropped, however it ends. Lock order: the session table,
/// then the counts.
#[derive(Debug)]
pub(crate) struct Share {
    counts: super::OwnerCounts,
    owner: (String, String),
    held: usize,
}

impl Share {
    fn new(counts: super::OwnerCounts, owner: (String, String)) -> Share {
        Share {
            counts,
            owner,
            held: 0,
        }
    }

    fn add(&mut self) {
        *self.counts.lock().entry(self.owner.clone()).or_default() += 1;
        self.held += 1;
    }

    fn remove(&mut self) {
        self.give_back(1);
    }

    fn give_back(&mut self, n: usize) {
        let n = n.min(self.held);
        if n == 0 {
            return;
        }
        self.held -= n;
        let mut counts = self.counts.lock();
        if let Some(count) = counts.get_mut(&self.owner) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                counts.remove(&self.owner);
            }
        }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.give_back(self.held);
    }
}
