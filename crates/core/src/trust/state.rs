//! The trust state machine on one tool sighting: pinned and the same → served; pinned and
//! changed → pending (quarantined in `pin` mode); never pinned → pinned (`newTools:
//! allow`) or pending and quarantined (`newTools: quarantine`).

use std::collections::HashSet;

use serde_json::Value;

use super::digest::{canonical, changed_fields, diff};
use super::store::{
    self, Pending, Pin, TrustFile, MAX_DEFINITION_BYTES, MAX_PINS, MAX_PINS_PER_BACKEND,
};
use super::{Finding, NewTools, Seen, TrustConfig, TrustMode};

/// Applies one sighting of `seen` at `backend` to `file`: whether the file changed, and
/// what to report (once per new definition: a sighting of what is already pending is quiet).
/// `full` is set when a new tool could not be pinned for want of room.
pub(crate) fn classify(
    file: &mut TrustFile,
    config: &TrustConfig,
    backend: &str,
    seen: &Seen,
    now: &str,
    full: &mut bool,
) -> (bool, Option<Finding>) {
    let key = store::key(backend, &seen.name);
    let pin = file.pins.get(&key);
    if pin.is_some_and(|p| p.digest == seen.digest) {
        // Back to what was approved (a pending change was reverted): nothing is held.
        return (file.pending.remove(&key).is_some(), None);
    }
    let quarantined = match pin {
        Some(_) => config.mode == TrustMode::Pin,
        None if config.new_tools == NewTools::Allow => {
            if !room(&file.pins, backend) {
                // Held, not served unpinned (see `blocked`): a tool without a pin could
                // change what it does unnoticed.
                *full = true;
                return (false, None);
            }
            file.pending.remove(&key);
            let pin = Pin {
                digest: seen.digest.clone(),
                definition: kept_definition(&seen.pinned),
                pinned_at: now.to_owned(),
            };
            file.pins.insert(key, pin);
            return (true, None);
        }
        None => true,
    };
    if file
        .pending
        .get(&key)
        .is_some_and(|p| p.digest == seen.digest && p.quarantined == quarantined)
    {
        return (false, None);
    }
    if pin.is_none() && !file.pending.contains_key(&key) && !room(&file.pending, backend) {
        // A new tool under `newTools: quarantine`, not recorded (no room to approve it
        // from) but still held: see `blocked`. A changed pinned tool is always recorded (at
        // most one per pin), since only its pending entry holds it.
        *full = true;
        return (false, None);
    }
    let old = pin.and_then(|p| p.definition.clone());
    let finding = hold(file, key, backend, seen, old, quarantined, now);
    (true, Some(finding))
}

/// Records `seen` as pending for `key` (`old`: the pinned definition, when there is a pin)
/// and returns the finding to report.
fn hold(
    file: &mut TrustFile,
    key: String,
    backend: &str,
    seen: &Seen,
    old: Option<Value>,
    quarantined: bool,
    now: &str,
) -> Finding {
    let had_pin = file.pins.contains_key(&key);
    let (reason, fields) = if had_pin {
        ("changed", changed_fields(old.as_ref(), &seen.pinned))
    } else {
        ("new", Vec::new())
    };
    let pending = Pending {
        digest: seen.digest.clone(),
        definition: kept_definition(&seen.pinned),
        seen_at: now.to_owned(),
        reason: reason.to_owned(),
        changed: fields.iter().map(|f| (*f).to_owned()).collect(),
        quarantined,
    };
    file.pending.insert(key, pending);
    Finding {
        backend: backend.to_owned(),
        tool: seen.name.clone(),
        reason,
        quarantined,
        diff: diff(old.as_ref(), &seen.pinned, &fields),
        changed: fields,
    }
}

/// The pinned fields, when small enough to keep.
fn kept_definition(pinned: &Value) -> Option<Value> {
    (canonical(pinned).len() <= MAX_DEFINITION_BYTES).then(|| pinned.clone())
}

/// Whether `key` is quarantined under `config`: a held definition, or (with `newTools:
/// quarantine`) a tool never approved, recorded or not.
pub(crate) fn blocked(file: &TrustFile, config: &TrustConfig, key: &str) -> bool {
    match config.mode {
        TrustMode::Off => false,
        _ if file.pending.get(key).is_some_and(|p| p.quarantined) => true,
        _ if file.pins.contains_key(key) => false,
        _ => match config.new_tools {
            NewTools::Quarantine => true,
            // Not pinned for want of room: held until there is room to pin it.
            NewTools::Allow => {
                let backend = key.split_once('/').map_or(key, |(b, _)| b);
                !room(&file.pins, backend)
            }
        },
    }
}

/// Whether `table` has room for one more entry of `backend` (the whole table's bound, and
/// the backend's share of it).
fn room<V>(table: &std::collections::BTreeMap<String, V>, backend: &str) -> bool {
    if table.len() >= MAX_PINS {
        return false;
    }
    // Keys are `backend/tool`: the backend's entries are one range (`0` follows `/`).
    let (from, to) = (format!("{backend}/"), format!("{backend}0"));
    table.range(from..to).take(MAX_PINS_PER_BACKEND).count() < MAX_PINS_PER_BACKEND
}

/// Every recorded key [`blocked`] holds (an unrecorded new tool is not listed: there is no
/// name for it here).
pub(crate) fn blocked_keys(file: &TrustFile, config: &TrustConfig) -> HashSet<String> {
    file.pending
        .keys()
        .filter(|k| blocked(file, config, k))
        .cloned()
        .collect()
}
