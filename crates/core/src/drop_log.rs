//! "Logged once per method at warn, then debug": a backend that floods unattributable messages
//! must not flood the log, but the first occurrence must be visible.

use std::collections::HashSet;

use parking_lot::Mutex;
use tracing::{debug, warn};

use crate::BackendId;

/// Remembers which (reason, method) pairs were already warned about.
#[derive(Debug, Default)]
pub(crate) struct DropLog {
    seen: Mutex<HashSet<(&'static str, String)>>,
}

impl DropLog {
    /// Logs a dropped or refused backend message.
    pub(crate) fn record(&self, reason: &'static str, method: &str) {
        if self.first(reason, method) {
            warn!(%method, %reason, "backend message not delivered (further ones logged at debug)");
        } else {
            debug!(%method, %reason, "backend message not delivered");
        }
    }

    /// Like [`Self::record`], naming the backend that sent it.
    pub(crate) fn record_for(&self, backend: &BackendId, reason: &'static str, method: &str) {
        if self.first(reason, method) {
            warn!(%backend, %method, %reason, "backend message not delivered (further ones logged at debug)");
        } else {
            debug!(%backend, %method, %reason, "backend message not delivered");
        }
    }

    /// Whether this (reason, method) pair is new.
    fn first(&self, reason: &'static str, method: &str) -> bool {
        {
            let mut seen = self.seen.lock();
            // Bounded: a hostile backend inventing method names must not grow this forever.
            seen.len() < 1024 && seen.insert((reason, method.to_owned()))
        }
    }
}
