//! Per-backend visibility filters and overrides, keyed by the backend's ORIGINAL names (so a
//! change of conflict strategy never silently changes what is hidden).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// What a name that neither `allow` nor `deny` matches gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Visibility {
    /// Visible.
    Allow,
    /// Hidden: absent from lists and refused on call, exactly like an unknown name.
    Deny,
}

/// Which of a backend's tools (or prompts) are visible, and how they are presented.
///
/// Patterns are exact names, or a prefix followed by one trailing `*` (`*` alone matches
/// everything); a `*` anywhere else is an ordinary character.
///
/// Visibility of an original name, in order: matched by `deny` → hidden (deny beats allow);
/// matched by `allow` → visible; else `default_visibility`. When `default_visibility` is not
/// set it is `Deny` if `allow` is non-empty and `Allow` otherwise, so `allow: [a, b]` alone
/// means "only a and b" — the reading users expect from an allow-list.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Filter {
    /// Names (or `prefix*` globs) shown.
    pub allow: Vec<String>,
    /// Names (or `prefix*` globs) hidden; beats `allow`.
    pub deny: Vec<String>,
    /// What unmatched names get (see the type's doc for the default).
    pub default_visibility: Option<Visibility>,
    /// Presentation changes by original name.
    pub overrides: BTreeMap<String, Override>,
}

/// How one item is presented instead of the backend's own declaration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Override {
    /// The exposed name, used verbatim: never prefixed (the user chose it), still shortened
    /// if it breaks the tool-name rule. A name it makes equal to another is a merge error.
    pub name: Option<String>,
    /// Replaces the item's `title`.
    pub title: Option<String>,
    /// Replaces the item's `description`.
    pub description: Option<String>,
    /// Merged into the item's `annotations` member by member (a `null` member removes that
    /// annotation); a non-object value replaces `annotations` whole.
    pub annotations: Option<Value>,
}

/// One backend's aggregation rules. Resources and templates have none: URIs are locators.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BackendRules {
    /// For `tools/list` and `tools/call`.
    pub tools: Filter,
    /// For `prompts/list`, `prompts/get` and prompt completions.
    pub prompts: Filter,
}

/// Whether `pattern` matches `name` (exact, or `prefix*`).
pub(crate) fn glob_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

impl Filter {
    /// Whether the item the backend calls `original` is visible.
    pub fn visible(&self, original: &str) -> bool {
        if self.deny.iter().any(|p| glob_matches(p, original)) {
            return false;
        }
        if self.allow.iter().any(|p| glob_matches(p, original)) {
            return true;
        }
        let default = self.default_visibility.unwrap_or(if self.allow.is_empty() {
            Visibility::Allow
        } else {
            Visibility::Deny
        });
        default == Visibility::Allow
    }
}

impl Override {
    /// Applies title, description and annotations to `item` (an object; the name is set by
    /// the merge, which knows the final exposed name).
    pub(crate) fn apply(&self, item: &mut Map<String, Value>) {
        if let Some(title) = &self.title {
            item.insert("title".to_owned(), Value::String(title.clone()));
        }
        if let Some(description) = &self.description {
            item.insert("description".to_owned(), Value::String(description.clone()));
        }
        let Some(annotations) = &self.annotations else {
            return;
        };
        let Value::Object(changes) = annotations else {
            item.insert("annotations".to_owned(), annotations.clone());
            return;
        };
        let slot = item
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        if let Value::Object(current) = slot {
            for (key, value) in changes {
                if value.is_null() {
                    current.remove(key);
                } else {
                    current.insert(key.clone(), value.clone());
                }
            }
        }
    }
}
