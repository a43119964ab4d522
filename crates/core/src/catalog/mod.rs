//! The virtual server's catalog: merging many backends' lists into one, pure (no I/O, no
//! async, no `Gateway`). The gateway fans out, collects each backend's items (all pages) and
//! calls [`merge`]; the [`Merged`] view is what it lists ([`page`]) and routes by
//! ([`Merged::lookup`], [`route_uri`]).
//!
//! **Order.** Entries come in configured backend order, then each backend's own order. Nothing
//! depends on hash-map iteration, so identical input gives identical output; tie-breaks that
//! pick a winner among colliding names use (backend's configured position, original name),
//! never an item's position, so the mapping does not change when a backend reorders its list.
//!
//! **Names** (tools and prompts; see [`Conflict`] for the strategies). After filters and
//! overrides each item has a *base* name (its original, or its override's). Then:
//! 1. Base names held by two or more items are resolved by the strategy; a collision that
//!    involves an override's name is an error under every strategy (the user chose a name
//!    that is taken), as is every collision under `manual`.
//! 2. `prefix` prefixes every non-override name; `conditional` prefixes the colliding ones,
//!    then repeats until stable: a name still held by several items is prefixed on each item
//!    that is not prefixed yet (`a:x`, `b:x`, `c:a_x` give `a_x`, `b_x`, `c_a_x`, so a
//!    `{backend}_` prefix the gateway added always names the real backend).
//! 3. Tools: a name outside `^[a-zA-Z0-9_-]{1,64}$` is shortened (`names`).
//! 4. What still clashes (only generated names can: `prefix` turning `a:b_x` and `a_b:x` both
//!    into `a_b_x`, or a hash-prefix clash) is settled by claim order — names used verbatim
//!    first, then by (backend position, original name) — a later claimant re-hashing with the
//!    next attempt number until free (with a warning).
//!
//! **Resources and templates** are never renamed: URIs are locators (`ui://`, custom schemes
//! intact). A URI (or `uriTemplate`) listed by several backends is served by the first in
//! configured order; the others' copies are dropped with a warning.

mod caps;
mod cursor;
mod merge;
mod names;
mod rules;
mod uri;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::BackendId;

pub use caps::{merge_capabilities, merge_instructions, MAX_INSTRUCTIONS};
pub use cursor::{page, BadCursor, Page, MAX_CURSOR};
pub use merge::merge;
pub use names::{valid_tool_name, MAX_TOOL_NAME};
pub use rules::{BackendRules, Filter, Override, Visibility};
pub(crate) use uri::canonical_scheme;

/// One of the four merged lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `tools/list`, items named by `name`.
    Tools,
    /// `prompts/list`, items named by `name`.
    Prompts,
    /// `resources/list`, items named by `uri`.
    Resources,
    /// `resources/templates/list`, items named by `uriTemplate`.
    ResourceTemplates,
}

impl Kind {
    /// The list method.
    pub fn list_method(self) -> &'static str {
        match self {
            Kind::Tools => "tools/list",
            Kind::Prompts => "prompts/list",
            Kind::Resources => "resources/list",
            Kind::ResourceTemplates => "resources/templates/list",
        }
    }

    /// Whether its items are named by URI (a scheme in any case names the same item).
    pub(crate) fn has_uris(self) -> bool {
        matches!(self, Kind::Resources | Kind::ResourceTemplates)
    }

    /// The member of the list result holding the items.
    pub fn result_key(self) -> &'static str {
        match self {
            Kind::Tools => "tools",
            Kind::Prompts => "prompts",
            Kind::Resources => "resources",
            Kind::ResourceTemplates => "resourceTemplates",
        }
    }

    /// The member of an item that names it.
    pub fn item_key(self) -> &'static str {
        match self {
            Kind::Tools | Kind::Prompts => "name",
            Kind::Resources => "uri",
            Kind::ResourceTemplates => "uriTemplate",
        }
    }

    /// Whether items of this kind may be renamed (URIs never are).
    pub fn renamable(self) -> bool {
        matches!(self, Kind::Tools | Kind::Prompts)
    }

    /// The word warnings use.
    fn noun(self) -> &'static str {
        match self {
            Kind::Tools => "tool",
            Kind::Prompts => "prompt",
            Kind::Resources => "resource URI",
            Kind::ResourceTemplates => "resource template",
        }
    }

    /// Distinct per kind, so a cursor of one list never fits another.
    fn tag(self) -> u8 {
        match self {
            Kind::Tools => 1,
            Kind::Prompts => 2,
            Kind::Resources => 3,
            Kind::ResourceTemplates => 4,
        }
    }
}

/// How colliding names are resolved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Conflict {
    /// Every name gets the prefix.
    Prefix,
    /// Only names that collide get the prefix, on every backend that has them; a single
    /// backend keeps bare names (the default: users' existing names survive where they can).
    #[default]
    Conditional,
    /// The first backend in priority order keeps the name; the others' items are dropped,
    /// with a warning each.
    Priority,
    /// Every collision must be resolved by an override, else the merge fails listing them.
    Manual,
}

/// The naming strategy of a merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strategy {
    /// How collisions are resolved.
    pub conflict: Conflict,
    /// The prefix, with `{backend}` standing for the backend's name (`{backend}_` default).
    pub prefix_format: String,
    /// For [`Conflict::Priority`]: backends in priority order; backends not listed follow in
    /// configured order (empty = configured order).
    pub priority: Vec<BackendId>,
}

impl Default for Strategy {
    fn default() -> Self {
        Strategy {
            conflict: Conflict::default(),
            prefix_format: DEFAULT_PREFIX_FORMAT.to_owned(),
            priority: Vec::new(),
        }
    }
}

/// The default [`Strategy::prefix_format`].
pub const DEFAULT_PREFIX_FORMAT: &str = "{backend}_";

/// One exposed item.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The name (or URI) clients see.
    pub exposed: Arc<str>,
    /// The backend serving it.
    pub backend: BackendId,
    /// The backend's own name (or URI) for it.
    pub original: Arc<str>,
    /// The item as listed, with the exposed name and the overrides applied (values intact;
    /// members in key order, as `serde_json::Value` keeps them without `preserve_order`).
    pub item: Box<RawValue>,
}

/// Items listed by several backends that the strategy could not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    /// The name they would share.
    pub name: String,
    /// Each item involved: its backend and original name.
    pub items: Vec<(BackendId, String)>,
}

impl fmt::Display for Collision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` from ", self.name)?;
        for (i, (backend, original)) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            if original == &self.name {
                write!(f, "`{backend}`")?;
            } else {
                write!(f, "`{backend}` (its `{original}`)")?;
            }
        }
        Ok(())
    }
}

/// Why a merge produced no list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// Collisions left unresolved: every one under `manual`, and any an override makes.
    #[error("unresolved name collisions (add an override for each): {}", list(.0))]
    Unresolved(Vec<Collision>),
    /// The prefix format lacks `{backend}`.
    #[error("the prefix format {0:?} must contain {{backend}}")]
    PrefixFormat(String),
    /// A backend appears twice in the input.
    #[error("backend `{0}` is listed twice")]
    DuplicateBackend(BackendId),
}

fn list(collisions: &[Collision]) -> String {
    let parts: Vec<String> = collisions.iter().map(Collision::to_string).collect();
    parts.join("; ")
}

/// One kind's merged list as the virtual server keeps it (`vmcp`): what routing and lists
/// read, and which backends it left out.
#[derive(Debug)]
pub(crate) struct View {
    /// Every backend's last known items: what names route by.
    pub(crate) all: Merged,
    /// Without the backends whose last fetch failed: what lists show.
    pub(crate) visible: Merged,
    /// The backends left out, and why.
    pub(crate) down: Vec<(BackendId, String)>,
    /// The backends whose breaker was open when this was built (`health`): left out too, so
    /// the view is built again when that set changes.
    pub(crate) breakers_open: Vec<BackendId>,
}

/// A merged list: entries in deterministic order, and the routing table behind them.
#[derive(Debug, Clone)]
pub struct Merged {
    kind: Kind,
    entries: Vec<Entry>,
    /// Exposed name → index into `entries`; for resources and templates also the name with
    /// its scheme lower-cased (the first entry of that form, when it differs).
    index: HashMap<Arc<str>, usize>,
    warnings: Vec<String>,
    /// For templates: each entry's compiled template, in entry order.
    templates: Vec<uri::Template>,
    /// Binds cursors to this list (see `cursor`).
    fingerprint: [u8; 8],
}

impl Merged {
    /// The kind of list.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Every exposed item, in order (see the module doc).
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The backend and original name behind an exposed name (or URI, or template: exactly,
    /// else with its scheme in any case). A filtered or dropped item is absent: refuse it
    /// exactly like an unknown one.
    pub fn lookup(&self, exposed: &str) -> Option<(&BackendId, &str)> {
        let i = match self.index.get(exposed) {
            Some(i) => *i,
            None if self.kind.has_uris() => *self.index.get(&*canonical_scheme(exposed))?,
            None => return None,
        };
        let entry = &self.entries[i];
        Some((&entry.backend, &entry.original))
    }

    /// The entry behind an exposed name (as [`Merged::lookup`] finds it).
    pub fn entry(&self, exposed: &str) -> Option<&Entry> {
        let i = match self.index.get(exposed) {
            Some(i) => *i,
            None if self.kind.has_uris() => *self.index.get(&*canonical_scheme(exposed))?,
            None => return None,
        };
        self.entries.get(i)
    }

    /// Entries whose exposed name differs from the original (for status and `validate`).
    pub fn renamed(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.exposed != e.original)
    }

    /// The same list with only the entries `keep` accepts (a caller's view after policy),
    /// names unchanged: merging once and narrowing per caller keeps every name the same for
    /// every principal, so a policy or audit line written for one name means one tool.
    /// Cursors of the narrowed list are its own (its fingerprint differs).
    pub fn filtered(&self, keep: impl Fn(&Entry) -> bool) -> Merged {
        let entries: Vec<Entry> = self.entries.iter().filter(|e| keep(e)).cloned().collect();
        Merged::from_entries(self.kind, entries, self.warnings.clone())
    }

    /// Builds the routing table, templates and fingerprint over `entries` (unique names).
    pub(crate) fn from_entries(kind: Kind, entries: Vec<Entry>, warnings: Vec<String>) -> Self {
        let mut index: HashMap<Arc<str>, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.exposed.clone(), i))
            .collect();
        if kind.has_uris() {
            for (i, e) in entries.iter().enumerate() {
                if let Cow::Owned(canonical) = canonical_scheme(&e.exposed) {
                    index.entry(canonical.into()).or_insert(i);
                }
            }
        }
        let templates = match kind {
            Kind::ResourceTemplates => entries
                .iter()
                .map(|e| uri::Template::parse(&canonical_scheme(&e.exposed)))
                .collect(),
            _ => Vec::new(),
        };
        let fingerprint = merge::fingerprint(kind, &entries);
        Merged {
            kind,
            entries,
            index,
            warnings,
            templates,
            fingerprint,
        }
    }

    /// What the merge dropped or changed, in a sentence each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The backend serving `uri`: for a resource list the one that listed it; for a template
    /// list the first template (in entry order) that matches it (see `uri` for the subset of
    /// RFC 6570 understood). `None` for the other kinds.
    pub fn route_uri(&self, uri: &str) -> Option<&BackendId> {
        match self.kind {
            Kind::Resources => self.lookup(uri).map(|(backend, _)| backend),
            Kind::ResourceTemplates => {
                let uri = canonical_scheme(uri);
                let i = self.templates.iter().position(|t| t.matches(&uri))?;
                Some(&self.entries[i].backend)
            }
            Kind::Tools | Kind::Prompts => None,
        }
    }
}

/// The backend serving `uri`: the resource list's exact URI first, then the first matching
/// template (`resources/read`, `resources/subscribe`).
pub fn route_uri<'a>(
    resources: &'a Merged,
    templates: &'a Merged,
    uri: &str,
) -> Option<&'a BackendId> {
    resources
        .route_uri(uri)
        .or_else(|| templates.route_uri(uri))
}

/// `params` with its top-level `key` member (`name` for `tools/call`, `prompts/get`) set to
/// the backend's `original` name; every other byte kept (duplicates of `key` collapse into
/// the one set). `None` if `params` is not an object (the caller answers `-32602`). URIs
/// are never renamed, so it is never needed for `uri`.
pub fn rename_param(params: &RawValue, key: &str, original: &str) -> Option<Box<RawValue>> {
    rename_param_at(params, &[key], original)
}

/// [`rename_param`] for a nested member: `path` names the objects down to it, e.g.
/// `["ref", "name"]` for a prompt completion (`completion/complete`). `None` if `path` is
/// empty or any object on it is missing or not an object.
pub fn rename_param_at(params: &RawValue, path: &[&str], original: &str) -> Option<Box<RawValue>> {
    let (first, rest) = path.split_first()?;
    if rest.is_empty() {
        let value = serde_json::to_string(original).ok()?;
        return switchboard_wire::with_member(params, first, &value);
    }
    let inner = switchboard_wire::object_member(params, first)?;
    let replaced = rename_param_at(inner, rest, original)?;
    switchboard_wire::with_member(params, first, replaced.get())
}
