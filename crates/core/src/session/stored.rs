//! What a session's record in a session store (`session_store`) is made from and restored
//! into: read as owned snapshots, written back as named updates.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::value::RawValue;

use super::{Sessions, SubKey};
use crate::CoreError;
use crate::Principal;

/// A session's state as its stored record carries it.
#[derive(Debug)]
pub(crate) struct StoredState {
    /// (issuer, subject) of the principal that opened it.
    pub(crate) owner: (String, String),
    pub(crate) protocol_version: String,
    /// The client's `initialize` params.
    pub(crate) init_params: Option<Box<RawValue>>,
    pub(crate) log_level: Option<u8>,
    /// (backend, URI) pairs, the backend by name.
    pub(crate) subscriptions: Vec<(String, String)>,
}

impl Sessions {
    /// The owner (issuer, subject) of session `raw`.
    pub(crate) fn owner_of(&self, raw: &str) -> Result<(String, String), CoreError> {
        self.with(raw, |s| s.owner().clone())
    }

    /// What session `raw`'s record is written from.
    pub(crate) fn stored_state(&self, raw: &str) -> Result<StoredState, CoreError> {
        self.with(raw, |s| StoredState {
            owner: s.owner().clone(),
            protocol_version: s.protocol_version.to_owned(),
            init_params: s.init_params.clone(),
            log_level: s.log_level,
            subscriptions: s
                .subscriptions
                .iter()
                .map(|(b, u)| (b.to_string(), u.clone()))
                .collect(),
        })
    }

    /// Keeps the client's `initialize` params (its record carries them to another replica).
    pub(crate) fn set_init_params(&self, raw: &str, params: Option<Box<RawValue>>) {
        let _ = self.with(raw, |s| s.init_params = params);
    }

    /// The revision of the session's record this process last wrote or read.
    pub(crate) fn stored_rev(&self, raw: &str) -> Result<Option<u64>, CoreError> {
        self.with(raw, |s| s.stored_rev)
    }

    /// The session's record was written (or read) at revision `rev`.
    pub(crate) fn set_stored_rev(&self, raw: &str, rev: u64) {
        let _ = self.with(raw, |s| {
            s.stored_rev = Some(rev);
            s.unstorable = false;
        });
    }

    /// The session's record is larger than the store takes: served here only until a
    /// write fits.
    pub(crate) fn set_unstorable(&self, raw: &str) {
        let _ = self.with(raw, |s| s.unstorable = true);
    }

    /// Whether the session's record was last found larger than the store takes.
    pub(crate) fn is_unstorable(&self, raw: &str) -> bool {
        self.with(raw, |s| s.unstorable).unwrap_or(false)
    }

    /// A session adopted from its record (revision `rev`): its log level and `initialize`
    /// params as recorded, and, under a policy, the principal its subscriptions are judged
    /// as (`subscriber`; `None` leaves the session's as it is).
    pub(crate) fn restore_stored(
        &self,
        raw: &str,
        (log_level, init_params): (Option<u8>, Option<Box<RawValue>>),
        rev: u64,
        subscriber: Option<Arc<Principal>>,
    ) {
        let _ = self.with(raw, |s| {
            s.log_level = log_level;
            s.init_params = init_params;
            s.stored_rev = Some(rev);
            if let Some(who) = subscriber {
                s.subscriber = Some(who);
            }
        });
    }

    /// A record changed elsewhere, read again at revision `rev`: its log level is applied.
    /// Returns the subscriptions the session holds here, to be made to match the record.
    pub(crate) fn apply_stored(
        &self,
        raw: &str,
        log_level: Option<u8>,
        rev: u64,
    ) -> Result<HashSet<SubKey>, CoreError> {
        self.with(raw, |s| {
            s.log_level = log_level;
            s.stored_rev = Some(rev);
            s.subscriptions.clone()
        })
    }
}
