//! Tool trust: a pin per (backend, tool) on the definition a model reads (`digest`), kept in
//! a state file (`store`) that survives restarts and that `switchboard trust` edits.
//!
//! Every tools list the aggregating gateway fetches from a backend is screened here before
//! the catalog records it (`Trust::screen_tools`): a pinned tool whose definition is the
//! same is served; one seen for the first time is pinned (`newTools: allow`) or held for
//! approval (`newTools: quarantine`); a pinned tool whose definition changed is, in `pin`
//! mode, quarantined — left out of every list and refused on every call, naming it, before
//! its backend sees the call — and in `warn` mode served but logged and audited. A held
//! definition is recorded as `pending`; approving it makes it the pin.
//!
//! The file is the truth: every change (the gateway's or the command's) is a locked
//! read-modify-write, and the gateway re-reads it when its modification time changes (a
//! task polling once a second, `Trust::watch`), so an approval takes effect
//! without a restart. The in-memory copy is behind a short lock never held across an await;
//! file I/O runs on the blocking pool.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tracing::{info, warn};

use crate::audit::AuditLog;
use state::{blocked, blocked_keys, classify};

mod digest;
mod gateway;
mod state;
pub mod store;
#[cfg(test)]
mod tests;

pub(crate) use gateway::tools_changed;
pub use store::{Pending, Pin, StoreError, TrustFile};

/// The current UTC time as the state file and audit lines write it (RFC 3339).
pub fn now() -> String {
    crate::audit::now_rfc3339()
}

/// What a changed definition does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrustMode {
    /// Quarantined until approved.
    #[default]
    Pin,
    /// Served; logged and audited.
    Warn,
    /// Nothing is pinned or checked.
    Off,
}

/// What a tool seen for the first time does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NewTools {
    /// Pinned as it is and served.
    #[default]
    Allow,
    /// Held for approval like a changed one.
    Quarantine,
}

/// What an approval over HTTP did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    Approved,
    /// Nothing waits for that tool.
    NothingPending,
    /// What waits is no longer the definition with the given digest.
    Changed,
}

/// The trust settings (`trust:` in the config file, `--trust`, `--trust-state`).
#[derive(Debug, Clone, Default)]
pub struct TrustConfig {
    pub mode: TrustMode,
    pub new_tools: NewTools,
    /// `None`: pins live in memory only (tests; a gateway without a writable place).
    pub state_file: Option<PathBuf>,
    /// Who may approve over HTTP (`POST /trust/approve`): an API key's name, `ISSUER SUBJECT`
    /// of a token, or `anonymous` (auth off). Empty: nobody (only `switchboard trust approve`,
    /// which needs the state file, can). An ordinary caller must not be able to approve the
    /// tool that was quarantined in front of it.
    pub approvers: Vec<String>,
}

impl TrustConfig {
    /// Whether `who` may approve over HTTP.
    pub fn may_approve(&self, who: &crate::Principal) -> bool {
        self.approvers.iter().any(|a| match a.split_once(' ') {
            Some((issuer, subject)) => who.issuer == issuer && who.subject == subject,
            None if a == "anonymous" => who.issuer == "anonymous",
            None => who.issuer == "api-key" && who.subject == *a,
        })
    }
}

/// A tool's definition as screened: its name, digest and pinned fields.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) name: String,
    pub(crate) digest: String,
    pub(crate) pinned: Value,
}

impl Seen {
    pub(crate) fn of(tool: &Value) -> Option<Seen> {
        let name = tool.get("name")?.as_str()?.to_owned();
        Some(Seen {
            name,
            digest: digest::digest(tool),
            pinned: digest::pinned_part(tool),
        })
    }
}

/// Something a screen found that the operator must hear about.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finding {
    pub(crate) backend: String,
    pub(crate) tool: String,
    /// `changed` or `new`.
    pub(crate) reason: &'static str,
    pub(crate) quarantined: bool,
    pub(crate) changed: Vec<&'static str>,
    /// Old and new values of the changed fields, bounded.
    pub(crate) diff: Value,
}

/// The trust state of an aggregating gateway.
#[derive(Debug)]
pub struct Trust {
    config: TrustConfig,
    known: parking_lot::Mutex<Known>,
    audit: Option<Arc<AuditLog>>,
}

#[derive(Debug, Default)]
struct Known {
    file: TrustFile,
    /// The file's stamp when it was last read or written here.
    mtime: Option<store::Stamp>,
    /// Whether "the pin table is full" was said already.
    told_full: bool,
    /// Whether the state file's last change failed (and was said).
    told_io: bool,
}

impl Trust {
    /// The state as the file holds it now (empty, with a warning, when it cannot be read:
    /// the first screen then reports the error again if it persists).
    pub(crate) fn new(config: TrustConfig, audit: Option<Arc<AuditLog>>) -> Self {
        let mut known = Known::default();
        if let Some(path) = &config.state_file {
            match store::load(path) {
                Ok(file) => {
                    known.file = file;
                    known.mtime = store::stamp(path);
                }
                Err(e) => warn!("{e}; starting with no pins"),
            }
        }
        Trust {
            config,
            known: parking_lot::Mutex::new(known),
            audit,
        }
    }

    pub(crate) fn config(&self) -> &TrustConfig {
        &self.config
    }

    /// Whether `backend`'s `tool` is quarantined now (hidden and refused).
    pub(crate) fn blocks(&self, backend: &str, tool: &str) -> bool {
        if self.config.mode == TrustMode::Off {
            return false;
        }
        let key = store::key(backend, tool);
        let known = self.known.lock();
        blocked(&known.file, &self.config, &key)
    }

    /// Screens one fetch of `backend`'s tools (blocking: file I/O). Returns what the operator
    /// must hear about, already logged and audited.
    pub(crate) fn screen(&self, backend: &str, seen: &[Seen]) -> Vec<Finding> {
        if self.config.mode == TrustMode::Off {
            return Vec::new();
        }
        let now = crate::audit::now_rfc3339();
        let mut full = false;
        let apply = |file: &mut TrustFile| {
            let mut changed = false;
            let mut found = Vec::new();
            for one in seen {
                let (c, f) = classify(file, &self.config, backend, one, &now, &mut full);
                changed |= c;
                found.extend(f);
            }
            (changed, found)
        };
        let found = self.change(apply);
        if full {
            let mut known = self.known.lock();
            if !std::mem::replace(&mut known.told_full, true) {
                warn!(
                    max = store::MAX_PINS,
                    per_backend = store::MAX_PINS_PER_BACKEND,
                    backend,
                    "trust: pin table full for this backend; its new tools are held until pins are removed (switchboard trust)"
                );
            }
        }
        for f in &found {
            self.tell(f);
        }
        found
    }

    /// Applies `change` to the state: through the file when there is one (re-read under its
    /// lock; the memory copy is then what was written), else — or when the file cannot be
    /// used — in memory (a broken file must not open the gate).
    fn change<R>(&self, mut change: impl FnMut(&mut TrustFile) -> (bool, R)) -> R {
        if let Some(path) = &self.config.state_file {
            match store::update(path, &mut change) {
                Ok((answer, file, stamp)) => {
                    let mut known = self.known.lock();
                    known.told_io = false;
                    known.file = file;
                    known.mtime = stamp;
                    return answer;
                }
                Err(e) => {
                    // Said once per run of failures (every list fetch would repeat it).
                    if !std::mem::replace(&mut self.known.lock().told_io, true) {
                        warn!("{e}; trust decisions are kept in memory only");
                    }
                }
            }
        }
        // Pure CPU under the lock: concurrent changes cannot lose each other.
        let mut known = self.known.lock();
        change(&mut known.file).1
    }

    /// Approves `backend`'s pending `tool` (blocking) on behalf of `by` (its audit line
    /// names them), only while the pending definition is still the one with `digest` (the
    /// one the operator reviewed: the backend may have changed it again since).
    pub(crate) fn approve(
        &self,
        backend: &str,
        tool: &str,
        digest: &str,
        by: &crate::Principal,
    ) -> Approval {
        let key = store::key(backend, tool);
        let now = crate::audit::now_rfc3339();
        let outcome = self.change(|file| match file.pending.get(&key) {
            None => (false, Approval::NothingPending),
            Some(p) if p.digest != digest => (false, Approval::Changed),
            Some(_) => {
                let ok = file.approve(&key, &now);
                (ok, Approval::Approved)
            }
        });
        if outcome == Approval::Approved {
            info!(%backend, %tool, "trust: tool approved");
            let mut details = Map::new();
            details.insert(
                "approvedBy".into(),
                json!({"issuer": by.issuer, "subject": by.subject}),
            );
            details.insert("via".into(), json!("http"));
            self.audit_line("tool_approved", "approved", backend, tool, details);
        }
        outcome
    }

    /// Re-reads the file when it changed since it was last read or written here (blocking).
    /// Returns the keys that were quarantined before and are not now (approved elsewhere),
    /// or `None` when nothing changed.
    pub(crate) fn reload_if_changed(&self) -> Option<Vec<String>> {
        let path = self.config.state_file.as_ref()?;
        let mtime = store::stamp(path);
        let seen = self.known.lock().mtime;
        if mtime == seen {
            return None;
        }
        let file = match store::load(path) {
            Ok(file) => file,
            Err(e) => {
                warn!("{e}; keeping the trust state last read");
                self.known.lock().mtime = mtime;
                return None;
            }
        };
        let after = blocked_keys(&file, &self.config);
        let before = {
            let mut known = self.known.lock();
            // A change made here while the file was read (a fresh quarantine) wrote a newer
            // file and stamp: installing the older read would undo it until the next tick.
            if known.mtime != seen {
                return None;
            }
            let before = blocked_keys(&known.file, &self.config);
            known.file = file;
            known.mtime = mtime;
            before
        };
        let released: Vec<String> = before.difference(&after).cloned().collect();
        for key in &released {
            if let Some((backend, tool)) = key.split_once('/') {
                info!(%backend, %tool, "trust: tool approved (state file)");
                let mut details = Map::new();
                details.insert("via".into(), json!("file"));
                self.audit_line("tool_approved", "approved", backend, tool, details);
            }
        }
        Some(released)
    }

    /// What `/trust` shows: the settings and every pending definition (at most `limit`).
    pub(crate) fn status(&self, limit: usize) -> Value {
        let known = self.known.lock();
        let pending: Vec<Value> = known
            .file
            .pending
            .iter()
            .take(limit)
            .map(|(key, p)| {
                let (backend, tool) = key.split_once('/').unwrap_or((key, ""));
                json!({"backend": backend, "tool": tool, "reason": p.reason,
                    "changed": p.changed, "quarantined": blocked(&known.file, &self.config, key),
                    "digest": p.digest,
                    "seenAt": p.seen_at})
            })
            .collect();
        json!({
            "mode": match self.config.mode { TrustMode::Pin => "pin", TrustMode::Warn => "warn", TrustMode::Off => "off" },
            "newTools": match self.config.new_tools { NewTools::Allow => "allow", NewTools::Quarantine => "quarantine" },
            "pins": known.file.pins.len(),
            "pending": pending,
        })
    }

    fn tell(&self, f: &Finding) {
        let (event, outcome) = if f.quarantined {
            ("tool_quarantined", "quarantined")
        } else {
            ("tool_changed", "served")
        };
        if f.quarantined {
            warn!(backend = %f.backend, tool = %f.tool, reason = f.reason, changed = ?f.changed,
                "trust: tool quarantined; approve with `switchboard trust approve {}/{}`",
                f.backend, f.tool);
        } else {
            warn!(backend = %f.backend, tool = %f.tool, changed = ?f.changed,
                "trust: tool definition changed since it was pinned (mode warn: served)");
        }
        let mut details = Map::new();
        details.insert("reason".into(), json!(f.reason));
        details.insert("changed".into(), json!(f.changed));
        details.insert("diff".into(), f.diff.clone());
        self.audit_line(event, outcome, &f.backend, &f.tool, details);
    }

    fn audit_line(
        &self,
        event: &str,
        outcome: &str,
        backend: &str,
        tool: &str,
        details: Map<String, Value>,
    ) {
        let Some(audit) = &self.audit else {
            return;
        };
        let mut entry = crate::access::trust_line(event, outcome);
        entry["backend"] = json!(backend);
        entry["tool"] = json!(tool);
        if let Value::Object(map) = &mut entry {
            map.extend(details);
        }
        audit.record(&entry);
    }
}
