//! Legacy sessions: the table of live `Mcp-Session-Id`s.
//!
//! One owner (a `parking_lot` mutex around a map), locked only for map operations and never
//! across `.await`. Ids are 128-bit CSPRNG values; an id is valid only while it is in the
//! table, so DELETE, TTL expiry and shutdown all end a session the same way: removal.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::route::random_hex;
use crate::CoreError;

/// A gateway-minted session id (visible ASCII, 32 hex digits).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    fn mint() -> Self {
        SessionId(random_hex())
    }

    /// The id as sent in `Mcp-Session-Id`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Session ids are bearer-like secrets: log only a prefix.
        write!(f, "{}…", &self.0[..self.0.len().min(8)])
    }
}

/// What the gateway remembers about one session.
#[derive(Debug, Clone)]
pub struct Session {
    /// The protocol version negotiated with this client.
    pub protocol_version: &'static str,
    /// Last time the client used the session; drives TTL expiry.
    last_seen: Instant,
}

/// All live sessions.
#[derive(Debug)]
pub struct SessionStore {
    sessions: Mutex<HashMap<String, Session>>,
    max: usize,
    ttl: Duration,
}

impl SessionStore {
    /// A store holding at most `max` sessions, each expiring after `ttl` without use.
    pub fn new(max: usize, ttl: Duration) -> Self {
        SessionStore {
            sessions: Mutex::new(HashMap::new()),
            max,
            ttl,
        }
    }

    /// Creates a session, or refuses when the table is full.
    pub fn create(&self, protocol_version: &'static str) -> Result<SessionId, CoreError> {
        let mut sessions = self.sessions.lock();
        if sessions.len() >= self.max {
            return Err(CoreError::TooManySessions(self.max));
        }
        let id = loop {
            let id = SessionId::mint();
            if !sessions.contains_key(&id.0) {
                break id;
            }
        };
        let session = Session {
            protocol_version,
            last_seen: Instant::now(),
        };
        sessions.insert(id.0.clone(), session);
        Ok(id)
    }

    /// Looks a session up by the client-supplied header value and refreshes its TTL.
    pub fn touch(&self, raw: &str) -> Result<(SessionId, Session), CoreError> {
        let mut sessions = self.sessions.lock();
        let session = sessions.get_mut(raw).ok_or(CoreError::SessionNotFound)?;
        session.last_seen = Instant::now();
        Ok((SessionId(raw.to_owned()), session.clone()))
    }

    /// Ends a session. Errors if it did not exist.
    pub fn remove(&self, raw: &str) -> Result<(), CoreError> {
        self.sessions
            .lock()
            .remove(raw)
            .map(drop)
            .ok_or(CoreError::SessionNotFound)
    }

    /// Removes every session idle for longer than the TTL; returns how many.
    pub fn reap(&self) -> usize {
        let now = Instant::now();
        let mut sessions = self.sessions.lock();
        let before = sessions.len();
        sessions.retain(|_, s| now.duration_since(s.last_seen) < self.ttl);
        before - sessions.len()
    }

    /// Number of live sessions.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The TTL, so the reaper can tick at a fraction of it.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle() {
        let store = SessionStore::new(2, Duration::from_secs(60));
        let a = store.create("2025-11-25").unwrap();
        let b = store.create("2025-06-18").unwrap();
        assert_ne!(a, b);
        assert!(matches!(
            store.create("2025-11-25"),
            Err(CoreError::TooManySessions(2))
        ));
        assert_eq!(
            store.touch(b.as_str()).unwrap().1.protocol_version,
            "2025-06-18"
        );
        store.remove(a.as_str()).unwrap();
        assert!(matches!(
            store.touch(a.as_str()),
            Err(CoreError::SessionNotFound)
        ));
        assert!(matches!(
            store.remove(a.as_str()),
            Err(CoreError::SessionNotFound)
        ));
        assert!(matches!(
            store.touch("forged"),
            Err(CoreError::SessionNotFound)
        ));
        assert_eq!(store.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_expire_and_used_ones_do_not() {
        let store = SessionStore::new(10, Duration::from_secs(60));
        let idle = store.create("2025-11-25").unwrap();
        let used = store.create("2025-11-25").unwrap();
        tokio::time::advance(Duration::from_secs(40)).await;
        store.touch(used.as_str()).unwrap();
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(store.reap(), 1);
        assert!(store.touch(idle.as_str()).is_err());
        assert!(store.touch(used.as_str()).is_ok());
    }
}
