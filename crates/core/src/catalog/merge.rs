//! The merge pipeline (the rules are in the module doc of `catalog`): collect each backend's
//! visible items, resolve base-name collisions by the strategy, prefix, apply the tool-name
//! rule, settle what still clashes by claim order, build the routing table.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::names::{self, HASH_HEX};
use super::rules::Filter;
use super::{BackendRules, Collision, Conflict, Entry, Kind, MergeError, Merged, Strategy};
use crate::BackendId;

/// One backend item on its way to an entry.
#[derive(Debug)]
struct Item {
    /// Position of its backend in the input (configured order).
    backend: usize,
    original: Arc<str>,
    /// The override's name, else the original.
    base: String,
    /// Its name comes from an override: used verbatim, never prefixed.
    overridden: bool,
    prefixed: bool,
    dropped: bool,
    /// Prefixed or not, before the tool-name rule (what a shortened name hashes).
    candidate: String,
    exposed: String,
    object: Map<String, Value>,
}

/// Merges one kind of list from `backends` (in configured order; each slice is that backend's
/// items as it listed them, all pages). See the `catalog` module doc for every rule.
/// Rounds of conditional prefixing at most (the loop in `prefix_names`).
const MAX_PREFIX_ROUNDS: usize = 4;

pub fn merge(
    kind: Kind,
    strategy: &Strategy,
    backends: &[(BackendId, &BackendRules, &[Value])],
) -> Result<Merged, MergeError> {
    merge_with(kind, strategy, backends, HASH_HEX)
}

/// [`merge`] with a chosen hash width, so tests can force hash-prefix clashes.
pub(crate) fn merge_with(
    kind: Kind,
    strategy: &Strategy,
    backends: &[(BackendId, &BackendRules, &[Value])],
    hex: usize,
) -> Result<Merged, MergeError> {
    if !strategy.prefix_format.contains("{backend}") {
        return Err(MergeError::PrefixFormat(strategy.prefix_format.clone()));
    }
    let ids: Vec<&BackendId> = backends.iter().map(|(id, _, _)| id).collect();
    let mut distinct = HashSet::new();
    if let Some(twice) = ids.iter().find(|id| !distinct.insert(**id)) {
        return Err(MergeError::DuplicateBackend((*twice).clone()));
    }
    let mut warnings = Vec::new();
    let mut items = collect(kind, backends, &mut warnings);
    if kind.renamable() {
        resolve_bases(kind, strategy, &ids, &mut items, &mut warnings)?;
        prefix_names(strategy, &ids, &mut items)?;
        finalize(kind, &ids, &mut items, hex, &mut warnings);
    } else {
        dedupe_uris(kind, &ids, &mut items, &mut warnings);
    }
    Ok(build(kind, &ids, items, warnings))
}

fn filter_of(kind: Kind, rules: &BackendRules) -> Option<&Filter> {
    match kind {
        Kind::Tools => Some(&rules.tools),
        Kind::Prompts => Some(&rules.prompts),
        Kind::Resources | Kind::ResourceTemplates => None,
    }
}

/// Every visible item with a usable key, overrides applied; the rest dropped with a warning
/// (a hidden item silently: hiding it is what the user asked for).
fn collect(
    kind: Kind,
    backends: &[(BackendId, &BackendRules, &[Value])],
    warnings: &mut Vec<String>,
) -> Vec<Item> {
    let (noun, key) = (kind.noun(), kind.item_key());
    let mut items = Vec::new();
    for (bi, (id, rules, list)) in backends.iter().enumerate() {
        let filter = filter_of(kind, rules);
        let mut seen = HashSet::new();
        for value in list.iter() {
            let original = match value.get(key) {
                Some(Value::String(s)) if !s.is_empty() => s,
                _ => {
                    warnings.push(format!(
                        "an item of backend `{id}`'s {} has no string `{key}`: dropped",
                        kind.list_method()
                    ));
                    continue;
                }
            };
            if !seen.insert(original.as_str()) {
                warnings.push(format!(
                    "backend `{id}` lists {noun} `{original}` twice: the first kept"
                ));
                continue;
            }
            if filter.is_some_and(|f| !f.visible(original)) {
                continue;
            }
            items.push(item(kind, (bi, id), filter, original, value, warnings));
        }
        for wanted in filter.iter().flat_map(|f| f.overrides.keys()) {
            if !seen.contains(wanted.as_str()) {
                warnings.push(format!(
                    "the override of {noun} `{wanted}` of backend `{id}` matches nothing it lists"
                ));
            }
        }
    }
    items
}

/// A visible item with its override applied.
fn item(
    kind: Kind,
    (bi, id): (usize, &BackendId),
    filter: Option<&Filter>,
    original: &str,
    value: &Value,
    warnings: &mut Vec<String>,
) -> Item {
    // The caller found the key member, so `value` is an object.
    let mut object = value.as_object().cloned().unwrap_or_default();
    let over = filter.and_then(|f| f.overrides.get(original));
    if let Some(over) = over {
        over.apply(&mut object);
    }
    let name = over.and_then(|o| o.name.as_deref());
    if name == Some("") {
        warnings.push(format!(
            "the override of {} `{original}` of backend `{id}` has an empty name: ignored",
            kind.noun()
        ));
    }
    let name = name.filter(|n| !n.is_empty());
    Item {
        backend: bi,
        original: Arc::from(original),
        base: name.unwrap_or(original).to_owned(),
        overridden: name.is_some(),
        prefixed: false,
        dropped: false,
        candidate: String::new(),
        exposed: String::new(),
        object,
    }
}

/// Indices of the live items by `name_of`, groups in name order.
fn groups<'a>(items: &'a [Item], name_of: impl Fn(&'a Item) -> &'a str) -> Vec<Vec<usize>> {
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate().filter(|(_, it)| !it.dropped) {
        by_name.entry(name_of(item)).or_default().push(i);
    }
    by_name.into_values().filter(|g| g.len() > 1).collect()
}

fn collision(name: &str, group: &[usize], items: &[Item], ids: &[&BackendId]) -> Collision {
    Collision {
        name: name.to_owned(),
        items: group
            .iter()
            .map(|&i| (ids[items[i].backend].clone(), items[i].original.to_string()))
            .collect(),
    }
}

/// Step 1: base names held by several items, by the strategy.
fn resolve_bases(
    kind: Kind,
    strategy: &Strategy,
    ids: &[&BackendId],
    items: &mut [Item],
    warnings: &mut Vec<String>,
) -> Result<(), MergeError> {
    // Unlisted backends follow the listed ones, in configured order.
    let rank = |bi: usize| {
        let listed = strategy.priority.iter().position(|p| p == ids[bi]);
        listed.unwrap_or(strategy.priority.len() + bi)
    };
    let mut unresolved = Vec::new();
    for group in groups(items, |it| &it.base) {
        let overridden = group.iter().any(|&i| items[i].overridden);
        match strategy.conflict {
            _ if overridden => {
                unresolved.push(collision(&items[group[0]].base, &group, items, ids))
            }
            Conflict::Manual => {
                unresolved.push(collision(&items[group[0]].base, &group, items, ids))
            }
            Conflict::Priority => {
                let winner = group
                    .iter()
                    .copied()
                    .min_by_key(|&i| rank(items[i].backend));
                let Some(winner) = winner else { continue };
                for &i in group.iter().filter(|&&i| i != winner) {
                    items[i].dropped = true;
                    warnings.push(format!(
                        "{} `{}` of backend `{}` dropped: `{}` has priority",
                        kind.noun(),
                        items[i].original,
                        ids[items[i].backend],
                        ids[items[winner].backend]
                    ));
                }
            }
            Conflict::Conditional => group.iter().for_each(|&i| items[i].prefixed = true),
            Conflict::Prefix => {}
        }
    }
    if unresolved.is_empty() {
        Ok(())
    } else {
        Err(MergeError::Unresolved(unresolved))
    }
}

/// Step 2: the prefix (all non-override names under `prefix`; under `conditional` until no
/// unprefixed name is shared), then any shared name that involves an override is an error.
fn prefix_names(
    strategy: &Strategy,
    ids: &[&BackendId],
    items: &mut [Item],
) -> Result<(), MergeError> {
    let prefixes: Vec<String> = ids
        .iter()
        .map(|id| names::prefix(&strategy.prefix_format, id.as_str()))
        .collect();
    if strategy.conflict == Conflict::Prefix {
        items
            .iter_mut()
            .filter(|it| !it.overridden)
            .for_each(|it| it.prefixed = true);
    }
    for round in 0.. {
        for it in items.iter_mut() {
            it.candidate = if it.prefixed {
                format!("{}{}", prefixes[it.backend], it.base)
            } else {
                it.base.clone()
            };
        }
        // A hostile backend can chain names (`x`, `b_x`, `b_b_x`, …) so that every round
        // prefixes one more: bounded, whatever still collides is settled below by claim
        // order, deterministically, like any other clash left after prefixing.
        if strategy.conflict != Conflict::Conditional || round >= MAX_PREFIX_ROUNDS {
            break;
        }
        // Each round prefixes at least one item, and an item at most once: it terminates.
        let mut changed = false;
        for group in groups(items, |it| &it.candidate) {
            for i in group {
                let it = &mut items[i];
                if !it.prefixed && !it.overridden {
                    it.prefixed = true;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let unresolved: Vec<Collision> = groups(items, |it| &it.candidate)
        .into_iter()
        .filter(|g| g.iter().any(|&i| items[i].overridden))
        .map(|g| collision(&items[g[0]].candidate, &g, items, ids))
        .collect();
    if unresolved.is_empty() {
        Ok(())
    } else {
        Err(MergeError::Unresolved(unresolved))
    }
}

/// Steps 3 and 4: the tool-name rule, then claim order for what still clashes.
fn finalize(
    kind: Kind,
    ids: &[&BackendId],
    items: &mut [Item],
    hex: usize,
    warnings: &mut Vec<String>,
) {
    let strict = kind == Kind::Tools;
    let mut generated = vec![false; items.len()];
    for (i, it) in items.iter_mut().enumerate() {
        generated[i] = it.prefixed;
        it.exposed = it.candidate.clone();
        if strict && !names::valid_tool_name(&it.exposed) {
            it.exposed = names::shortened(&it.candidate, 0, hex);
            generated[i] = true;
        }
    }
    // Claim order: verbatim names first, then (backend position, original name) — never the
    // item's position, so a backend reordering its list changes no name.
    let mut order: Vec<usize> = (0..items.len()).filter(|&i| !items[i].dropped).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| (generated[i], items[i].backend, items[i].original.clone());
        key(a).cmp(&key(b))
    });
    let mut taken: HashSet<String> = HashSet::new();
    for i in order {
        let it = &mut items[i];
        let first = it.exposed.clone();
        let mut attempt = 0u32;
        while taken.contains(&it.exposed) {
            attempt += 1;
            // Widen the hash every 8 attempts so even a tiny width terminates.
            let width = (hex + attempt as usize / 8).min(32);
            it.exposed = if strict {
                names::shortened(&it.candidate, attempt, width)
            } else {
                names::suffixed(&it.candidate, attempt, width)
            };
        }
        if attempt > 0 {
            warnings.push(format!(
                "{} `{}` of backend `{}` exposed as `{}`: `{first}` was taken",
                kind.noun(),
                it.original,
                ids[it.backend],
                it.exposed
            ));
        }
        taken.insert(it.exposed.clone());
    }
}

/// Resources and templates: the first backend in configured order serves a URI.
fn dedupe_uris(kind: Kind, ids: &[&BackendId], items: &mut [Item], warnings: &mut Vec<String>) {
    let mut server: HashMap<String, usize> = HashMap::new();
    for it in items.iter_mut() {
        it.exposed = it.base.clone();
        match server.entry(it.base.clone()) {
            MapEntry::Occupied(first) => {
                it.dropped = true;
                warnings.push(format!(
                    "{} `{}` duplicated by `{}`; `{}` serves it",
                    kind.noun(),
                    it.base,
                    ids[it.backend],
                    ids[*first.get()]
                ));
            }
            MapEntry::Vacant(slot) => {
                slot.insert(it.backend);
            }
        }
    }
}

fn build(kind: Kind, ids: &[&BackendId], items: Vec<Item>, mut warnings: Vec<String>) -> Merged {
    let mut entries = Vec::with_capacity(items.len());
    for mut it in items.into_iter().filter(|it| !it.dropped) {
        if kind.renamable() {
            it.object.insert(
                kind.item_key().to_owned(),
                Value::String(it.exposed.clone()),
            );
        }
        let item = match serde_json::value::to_raw_value(&it.object) {
            Ok(item) => item,
            Err(e) => {
                warnings.push(format!(
                    "{} `{}` not encodable: {e}",
                    kind.noun(),
                    it.original
                ));
                continue;
            }
        };
        entries.push(Entry {
            exposed: Arc::from(it.exposed),
            backend: ids[it.backend].clone(),
            original: it.original,
            item,
        });
    }
    Merged::from_entries(kind, entries, warnings)
}

/// The first 8 bytes of SHA-256 over the kind and the exposed names (length-prefixed, so no
/// two lists share an encoding).
pub(super) fn fingerprint(kind: Kind, entries: &[Entry]) -> [u8; 8] {
    let mut hasher = Sha256::new();
    hasher.update([kind.tag()]);
    for e in entries {
        hasher.update((e.exposed.len() as u64).to_le_bytes());
        hasher.update(e.exposed.as_bytes());
    }
    let digest = hasher.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&digest[..8]);
    out
}
