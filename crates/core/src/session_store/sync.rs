//! A held session whose record changed through another replica (its revision moved): this
//! process reads it again and makes what it holds match — the log level, and the
//! subscriptions (made at this replica's backends when added, dropped when removed, the
//! backend told when it was the last subscriber here).

use switchboard_wire::method;

use super::{parse, Host, Record, SessionStore};
use crate::session::{SessionId, SubKey};
use crate::BackendId;

impl SessionStore {
    /// Reads the session's record again and applies it (see the module docs). A record that
    /// cannot be read now changes nothing: the next request tries again.
    pub(super) async fn reconcile(
        &self,
        host: &impl Host,
        backends: &crate::Backends,
        id: &SessionId,
        caller: &crate::Principal,
    ) {
        let Some(store) = self.records() else {
            return;
        };
        let Ok(Some((bytes, rev))) = store.get(id.as_str()).await else {
            return;
        };
        let Some(record) = parse(&bytes) else {
            return;
        };
        let wanted = wanted(&record);
        let held = self
            .registry
            .sessions
            .apply_stored(id.as_str(), record.log_level, rev);
        let Ok(held) = held else {
            return;
        };
        // Made through a replica whose policy this one may not share (mid-reload): judged
        // again here, as the caller (the session's owner, checked), as an adopted
        // session's are.
        for key in wanted.iter().filter(|k| !held.contains(*k)) {
            if !self.policy || host.may_watch(caller, &key.1) {
                self.resubscribe(host, backends, id, key.clone()).await;
            }
        }
        for key in held.iter().filter(|k| !wanted.contains(*k)) {
            self.drop_subscription(host, id, key).await;
        }
        tracing::debug!(session = ?id, "session changed elsewhere: reconciled");
    }

    /// Removes one of the session's subscriptions here; the backend hears the unsubscribe
    /// when no session here is left on that URI.
    async fn drop_subscription(&self, host: &impl Host, id: &SessionId, key: &SubKey) {
        let tables = self.registry.tables(&key.0);
        let lock = tables.subs.lock(&key.1).await;
        let had = self
            .registry
            .sessions
            .remove_subscription(id.as_str(), key)
            .unwrap_or(false);
        if had && tables.subs.remove(&lock, id.as_str()) {
            let params = serde_json::json!({ "uri": key.1 });
            let _ = host.ask_backend(&key.0, method::UNSUBSCRIBE, params).await;
        }
    }
}

/// The subscriptions a record names (unknown backend names are skipped).
fn wanted(record: &Record) -> Vec<SubKey> {
    record
        .subscriptions
        .iter()
        .filter_map(|(b, u)| Some((b.parse::<BackendId>().ok()?, u.clone())))
        .collect()
}
