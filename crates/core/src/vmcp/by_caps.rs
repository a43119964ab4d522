//! Lists of per-session backends as the caller's own capabilities would get them.
//!
//! A Legacy backend whose sessions each get an upstream of their own (`isolation:
//! per-session`, a Legacy-only remote) may offer some tools (prompts, resources) only to
//! clients that declared sampling, elicitation or roots (server-everything does). The
//! gateway's own fetch, on the shared upstream handshaken with no client capabilities, never
//! sees those, so they vanished from every list. For such a backend the gateway keeps, per
//! declared set of those three (a caller with none reads the shared fetch), an upstream of
//! its own handshaken with exactly that set (started with the backend's per-session
//! spawner, acting as itself: no caller's credential), and that set's lists from it, cached
//! for the list TTL.
//!
//! Names are merged from every set's list known so far (`Vmcp::rebuild`), so one exposed
//! name means one item whoever asks; what a caller is shown of such a backend is what its
//! own set lists.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};

use switchboard_upstream::{InboundSink, Upstream, UpstreamOwner};
use switchboard_wire::classify::META_CLIENT_CAPABILITIES;
use switchboard_wire::{
    codes, encode_error, encode_result, method, ErrorObject, Message, MessageKind,
};

use super::{Cached, Vmcp};
use crate::catalog::{Entry, Kind, Merged};
use crate::client_ask::ClientAsks;
use crate::per_session::Spawner;
use crate::session::ClientCaps;
use crate::BackendId;
use crate::Backends;

/// The client capabilities a backend may tailor its lists to, one bit each.
const CAPABILITIES: [&str; 3] = ["sampling", "elicitation", "roots"];

/// A set of [`CAPABILITIES`] a caller declared (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct CapSet(u8);

impl CapSet {
    /// What a Legacy session declared in its `initialize`.
    pub(crate) fn of_session(caps: ClientCaps) -> CapSet {
        let bits = [caps.sampling, caps.elicitation, caps.roots]
            .iter()
            .enumerate()
            .fold(0, |acc, (bit, on)| acc | (u8::from(*on) << bit));
        CapSet(bits)
    }

    /// What a Modern request declares in `_meta` (absent or `null` members: not).
    pub(crate) fn of_modern(msg: &Message<'_>) -> CapSet {
        let declared: Value = msg
            .meta(META_CLIENT_CAPABILITIES)
            .and_then(|c| serde_json::from_str(c.get()).ok())
            .unwrap_or(Value::Null);
        let bits = CAPABILITIES.iter().enumerate().fold(0, |acc, (bit, cap)| {
            acc | (u8::from(declared.get(cap).is_some_and(|v| !v.is_null())) << bit)
        });
        CapSet(bits)
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The `capabilities` of the handshake that gets this set's lists.
    fn capabilities(self) -> Value {
        let mut caps = serde_json::Map::new();
        for (bit, cap) in CAPABILITIES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                caps.insert((*cap).to_owned(), json!({}));
            }
        }
        Value::Object(caps)
    }
}

/// The per-set lists and the upstreams they are read from.
#[derive(Debug, Default)]
pub(crate) struct ByCaps {
    lists: parking_lot::Mutex<HashMap<(BackendId, Kind, CapSet), Cached>>,
    /// How many times the lists were forgotten (new guardrails): a fetch that began before
    /// keeps nothing (it was checked by the guardrails the lists were forgotten for).
    generation: std::sync::atomic::AtomicU64,
    /// Each (backend, set) its own slot, started once: one slow backend's start never holds
    /// up another's. A slot taken out of the map (its backend left) stops its upstream when
    /// the last user lets go of it, a start still in flight included.
    listers: parking_lot::Mutex<HashMap<(BackendId, CapSet), ListerSlot>>,
}

type ListerSlot = Arc<tokio::sync::Mutex<Option<Lister>>>;

#[derive(Debug)]
struct Lister {
    handle: Upstream,
    /// Stops it when dropped.
    _owner: UpstreamOwner,
}

impl ByCaps {
    /// Every item `backend` listed of `kind` for any set so far (merged with its shared list
    /// by `rebuild`).
    pub(super) fn every_set(&self, backend: &BackendId, kind: Kind) -> Vec<Arc<[Value]>> {
        self.lists
            .lock()
            .iter()
            .filter(|((b, k, _), _)| b == backend && *k == kind)
            .map(|(_, c)| c.items.clone())
            .collect()
    }

    /// Forgets the lists and stops the upstreams of backends not in `keep`.
    pub(super) fn retain(&self, keep: impl Fn(&BackendId) -> bool) {
        self.lists.lock().retain(|(b, _, _), _| keep(b));
        self.listers.lock().retain(|(b, _), _| keep(b));
    }

    /// Forgets every set's lists (new guardrails check them again at their next fetch); the
    /// upstreams stay.
    pub(super) fn forget_lists(&self) {
        let mut lists = self.lists.lock();
        lists.clear();
        (self.generation).fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// See [`ByCaps::generation`]'s field: read before the shape a fetch is checked by.
    fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Stops every upstream (gateway shutdown).
    pub(crate) fn end(&self) {
        self.lists.lock().clear();
        self.listers.lock().clear();
    }
}

/// The inbound side of a lister: it serves no client, so it asks nobody anything.
#[derive(Debug)]
struct ListerSink;

impl InboundSink for ListerSink {
    fn deliver(&self, _line: &Bytes, msg: &Message<'_>, backend: &Upstream) {
        let (MessageKind::Request, Some(id)) = (msg.kind, msg.id.as_ref()) else {
            return;
        };
        let line = if msg.method == Some(method::PING) {
            encode_result(id, "{}")
        } else {
            let err = ErrorObject::new(codes::METHOD_NOT_FOUND, "Method not found".to_owned());
            encode_error(Some(id), &err)
        };
        let _ = backend.try_send_line(line);
    }
}

/// The set a Legacy request's session declared (none without a session).
pub(crate) fn caps_of(asks: &ClientAsks, call: &crate::Exchange<'_>) -> CapSet {
    let caps = call.session().and_then(|s| asks.caps(s).ok());
    CapSet::of_session(caps.unwrap_or_default())
}

/// What lists tailored to a caller's capabilities are fetched with: the backend set, who
/// starts per-session upstreams, and the deadlines of a list request and a handshake.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tailoring<'a> {
    pub(crate) backends: &'a Backends,
    pub(crate) per_session: &'a Spawner,
    pub(crate) request_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
}

impl Tailoring<'_> {
    /// Whether `backend` may tailor its lists to the caller's capabilities (see the module
    /// docs): a Legacy backend whose sessions get an upstream of their own.
    fn lists_by_caps(&self, backend: &BackendId) -> bool {
        self.per_session.for_backend(backend).is_some()
            && self
                .backends
                .get(backend)
                .is_some_and(|e| e.info().era.legacy)
    }
}

impl Vmcp {
    /// Fetches the lists of `kind` for `set` that are stale, from every backend that tailors
    /// them. True when one changed (the merged view is then built again).
    pub(crate) async fn refresh_set(&self, kind: Kind, set: CapSet, t: Tailoring<'_>) -> bool {
        let vmcp = self;
        if set.is_empty() {
            return false;
        }
        // Before the shape: lists forgotten after this (new guardrails, stored before they
        // are forgotten) keep nothing this refresh fetched under the shape read here.
        let generation = vmcp.by_caps.generation();
        let shape = vmcp.shape();
        let ttl = shape.config.list_ttl;
        let stale: Vec<BackendId> = shape
            .order
            .iter()
            .map(|(id, _)| id)
            .filter(|id| t.lists_by_caps(id))
            .filter(|id| {
                let lists = vmcp.by_caps.lists.lock();
                lists
                    .get(&((*id).clone(), kind, set))
                    .is_none_or(|c| c.fetched.elapsed() >= ttl)
            })
            .cloned()
            .collect();
        let mut changed = false;
        for id in stale {
            let deadline = shape.config.fetch_timeout;
            let fetched = tokio::time::timeout(deadline, self.fetch_for_set(&id, kind, set, t))
                .await
                .unwrap_or_else(|_| Err(format!("no complete list within {deadline:?}")));
            // Checked as the shared list's definitions are (`Vmcp::view`): a definition a
            // guardrail refuses is left out of this set's list too, a redacted one replaced.
            let fetched = match (&shape.config.guardrails, fetched) {
                (Some(g), Ok(items)) => Ok(g.definitions(id.as_str(), kind, items)),
                (_, fetched) => fetched,
            };
            // Pinned like the shared list's tools (`trust`): a tool offered only to callers
            // with some capability is held until approved all the same.
            if let (Kind::Tools, Ok(items), Some(trust)) = (kind, &fetched, &vmcp.trust) {
                trust.screen_tools(&id, items).await;
            }
            let mut lists = vmcp.by_caps.lists.lock();
            if vmcp.by_caps.generation() != generation {
                return changed;
            }
            let key = (id.clone(), kind, set);
            let before = lists.get(&key).map(|c| c.items.clone());
            let items: Arc<[Value]> = match fetched {
                Ok(items) => items.into(),
                Err(why) => {
                    tracing::warn!(backend = %id, list = kind.list_method(), "list for the caller's capabilities not fetched: {why}");
                    before.clone().unwrap_or_else(|| Arc::from(Vec::new()))
                }
            };
            changed |= before.as_deref() != Some(&items[..]);
            lists.insert(
                key,
                Cached {
                    items,
                    fetched: Instant::now(),
                    failed: None,
                },
            );
        }
        changed
    }

    /// `visible` as a caller declaring `set` sees it: the items of a backend that tailors its
    /// lists are those its list for `set` holds (for no capabilities, its shared list).
    pub(crate) fn visible_to(
        &self,
        visible: &Merged,
        kind: Kind,
        set: CapSet,
        t: Tailoring<'_>,
    ) -> Merged {
        let vmcp = self;
        let mut listed: HashMap<BackendId, HashSet<String>> = HashMap::new();
        {
            let state = vmcp.state.lock();
            let sets = vmcp.by_caps.lists.lock();
            for (id, _) in vmcp.shape().order.iter() {
                if !t.lists_by_caps(id) {
                    continue;
                }
                let items = if set.is_empty() {
                    state
                        .lists
                        .get(&(id.clone(), kind))
                        .map(|c| c.items.clone())
                } else {
                    sets.get(&(id.clone(), kind, set)).map(|c| c.items.clone())
                };
                let names = items
                    .iter()
                    .flat_map(|i| i.iter())
                    .filter_map(|i| i.get(kind.item_key())?.as_str().map(str::to_owned))
                    .collect();
                listed.insert(id.clone(), names);
            }
        }
        if listed.is_empty() {
            return visible.filtered(|_| true);
        }
        visible.filtered(|e: &Entry| {
            listed
                .get(&e.backend)
                .is_none_or(|names| names.contains(&*e.original))
        })
    }

    /// Every page of `backend`'s list of `kind` as a client declaring `set` gets it.
    async fn fetch_for_set(
        &self,
        backend: &BackendId,
        kind: Kind,
        set: CapSet,
        t: Tailoring<'_>,
    ) -> Result<Vec<Value>, String> {
        let handle = self.lister(backend, set, t).await?;
        let deadline = t.request_timeout;
        let method = kind.list_method();
        let page = |cursor: Option<String>| {
            let handle = &handle;
            async move {
                let params = match cursor {
                    Some(c) => json!({ "cursor": c }),
                    None => json!({}),
                };
                let answer = crate::backend::call(handle, method, params, deadline).await;
                crate::backend::list_page(method, answer)
            }
        };
        super::pages::every_page(kind, page).await
    }

    /// The gateway's own upstream on `backend` handshaken with `set`, started (or started
    /// again, when it died) on first use.
    async fn lister(
        &self,
        backend: &BackendId,
        set: CapSet,
        t: Tailoring<'_>,
    ) -> Result<Upstream, String> {
        let vmcp = self;
        let slot = (vmcp.by_caps.listers.lock())
            .entry((backend.clone(), set))
            .or_default()
            .clone();
        let mut lister = slot.lock().await;
        if let Some(l) = lister.as_ref().filter(|l| !l.handle.is_closed()) {
            return Ok(l.handle.clone());
        }
        let spawner = t
            .per_session
            .for_backend(backend)
            .ok_or("no per-session spawner")?;
        let (handle, owner) = crate::per_session::spawn_off_runtime(spawner, Arc::new(ListerSink))
            .await
            .map_err(|e| e.to_string())?;
        // Acting as itself: a process (or upstream session) every caller's lists come from.
        let deadline = t.handshake_timeout;
        crate::backend::handshake(&handle, set.capabilities(), None, None, deadline)
            .await
            .map_err(|e| e.to_string())?;
        *lister = Some(Lister {
            handle: handle.clone(),
            _owner: owner,
        });
        Ok(handle)
    }
}

/// A backend's shared list with what it listed for any capability set (`by_caps`) added,
/// each item once (by the member that names it): names are merged from all of them.
///
/// A set-only name another backend's shared list holds is left out (`taken`): one caller's
/// declared capabilities must not rename another backend's tool for everyone (a collision
/// prefixes both under `conditional`, drops one under `priority`, fails `manual`).
pub(super) fn with_every_set(
    kind: Kind,
    shared: Arc<[Value]>,
    sets: Vec<Arc<[Value]>>,
    taken: &std::collections::HashSet<String>,
) -> Arc<[Value]> {
    if sets.is_empty() {
        return shared;
    }
    let key = kind.item_key();
    let mut seen: std::collections::HashSet<String> = shared
        .iter()
        .filter_map(|i| i.get(key)?.as_str().map(str::to_owned))
        .collect();
    let mut all = shared.to_vec();
    for item in sets.iter().flat_map(|s| s.iter()) {
        if let Some(name) = item.get(key).and_then(Value::as_str) {
            if !taken.contains(name) && seen.insert(name.to_owned()) {
                all.push(item.clone());
            }
        }
    }
    all.into()
}
