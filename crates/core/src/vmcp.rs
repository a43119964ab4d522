//! The aggregating path: many backends presented as one MCP server (`switchboard serve` with
//! more than one backend). With one backend none of this is on the path.
//!
//! Per backend and list kind the gateway keeps the last list that backend gave through the
//! gateway's own route (`Route::internal`: its shared process, or the upstream the
//! gateway keeps for itself), every page of it. A list is fetched again when its TTL has
//! passed or the backend said `list_changed` (the sink marks it, `registry`); fetches of
//! one kind run in parallel, one refresh at a time, each backend within its deadline.
//!
//! Names are computed (`catalog::merge`) from the last known list of **every** backend, also
//! of one that is down: a failing backend must not rename the others' tools (with the
//! default `conditional` strategy its leaving would otherwise un-prefix them). What lists show
//! is that merge without the backends that failed their last fetch; calls route by the full
//! merge, so a call to a down backend's tool fails fast, naming it, instead of "unknown".

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tracing::warn;

pub(crate) use crate::catalog::View;
use crate::catalog::{self, BackendRules, Kind, Strategy};
use crate::send::Sender;
use crate::BackendId;
use crate::{BackendInfo, Backends, CoreError};

mod by_caps;
mod counts;
mod origins;
mod pages;
mod renamed;
mod route;

pub(crate) use by_caps::{caps_of, CapSet, Tailoring};
use pages::fetch_list;
pub use renamed::RenamedName;
pub(crate) use route::{kinds_for, list_kind, routable};

/// Every list kind, in the order the gateway keeps them.
pub(crate) const KINDS: [Kind; 4] = [
    Kind::Tools,
    Kind::Prompts,
    Kind::Resources,
    Kind::ResourceTemplates,
];

/// A backend whose last fetch failed is asked again after this long, not at every list (a
/// hung one would make each list wait out its deadline).
const RETRY_FAILED: Duration = Duration::from_secs(2);

/// What a backend that cannot be listed does to a merged list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Left out of lists (the others are listed); its calls fail naming it.
    #[default]
    BestEffort,
    /// The whole list fails, naming it.
    Fail,
}

/// How the virtual server is put together (from the config file).
#[derive(Debug, Clone)]
pub struct VmcpConfig {
    /// How names that collide across backends are resolved.
    pub strategy: Strategy,
    /// Filters and overrides, per backend (a backend not named has none).
    pub rules: Vec<(BackendId, BackendRules)>,
    /// See [`FailureMode`].
    pub failure_mode: FailureMode,
    /// How long a backend's list is reused without asking it again.
    pub list_ttl: Duration,
    /// Items per page of a merged list.
    pub page_size: usize,
    /// Deadline of fetching one backend's list (all its pages).
    pub fetch_timeout: Duration,
    /// `tools/list` shows `find_tools` and `call_tool` instead of the catalog
    /// (`tool_search`).
    pub tool_search: bool,
    /// Tool pins (`trust`); `None`: off.
    pub trust: Option<crate::trust::TrustConfig>,
    /// Guardrails that check definitions as lists are merged (`guardrails`).
    pub guardrails: Option<Arc<crate::guardrails::Guardrails>>,
}

impl Default for VmcpConfig {
    fn default() -> Self {
        VmcpConfig {
            strategy: Strategy::default(),
            rules: Vec::new(),
            failure_mode: FailureMode::default(),
            list_ttl: Duration::from_secs(5),
            page_size: 500,
            fetch_timeout: Duration::from_secs(10),
            tool_search: false,
            trust: None,
            guardrails: None,
        }
    }
}

/// The aggregating state, owned by the gateway (`Gateway::vmcp`).
#[derive(Debug)]
pub(crate) struct Vmcp {
    /// What a reload replaces ([`Vmcp::reshape`]): read once per use, so one list or one
    /// routing decision sees one shape.
    shape: crate::snapshot::Snapshot<Shape>,
    state: parking_lot::Mutex<State>,
    /// One refresh per kind at a time; others wait for it and use its result.
    refreshing: [tokio::sync::Mutex<()>; 4],
    /// `Some` when tool search is on.
    tool_search: Option<crate::tool_search::ToolSearch>,
    /// Tool pins and quarantine (`trust`).
    pub(crate) trust: Option<Arc<crate::trust::Trust>>,
    /// The composite tools' names (`workflow`): listed tools no backend serves, judged by
    /// the policy without an origin.
    pub(crate) composites: std::collections::HashSet<String>,
    /// Lists of backends that tailor them to the caller's capabilities (`by_caps`).
    pub(crate) by_caps: by_caps::ByCaps,
}

/// The virtual server's make-up: the backends and their rules, how names are merged.
#[derive(Debug)]
pub(crate) struct Shape {
    /// Strategy, failure mode and list settings (`tool_search` and `trust` are fixed at
    /// start: their state lives beside the shape).
    pub(crate) config: VmcpConfig,
    /// Backends in configured order with their rules.
    pub(crate) order: Vec<(BackendId, BackendRules)>,
    /// What the gateway presents as itself: merged capabilities, its own `serverInfo`.
    pub(crate) presented: Arc<BackendInfo>,
}

impl Shape {
    fn new(config: VmcpConfig, backends: &[(BackendId, &BackendInfo)]) -> Self {
        let order = backends
            .iter()
            .map(|(id, _)| {
                let rules = config
                    .rules
                    .iter()
                    .find(|(r, _)| r == id)
                    .map(|(_, rules)| rules.clone())
                    .unwrap_or_default();
                (id.clone(), rules)
            })
            .collect();
        Shape {
            config,
            order,
            presented: Arc::new(presented(backends)),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    lists: HashMap<(BackendId, Kind), Cached>,
    views: HashMap<Kind, Arc<View>>,
}

#[derive(Debug)]
struct Cached {
    items: Arc<[Value]>,
    fetched: Instant,
    /// Why the last fetch failed; `None` when it succeeded.
    failed: Option<String>,
}

/// One backend's last known list of a kind, its rules, and why its last fetch failed.
type Known<'a> = (BackendId, &'a BackendRules, Arc<[Value]>, Option<String>);

impl Vmcp {
    /// The state for `backends` (in configured order, with each one's declared info).
    /// `audit` receives the trust events.
    pub(crate) fn new(
        config: VmcpConfig,
        backends: &[(BackendId, &BackendInfo)],
        audit: Option<Arc<crate::audit::AuditLog>>,
    ) -> Self {
        let trust = config
            .trust
            .clone()
            .map(|t| Arc::new(crate::trust::Trust::new(t, audit)));
        Vmcp {
            composites: Default::default(),
            by_caps: Default::default(),
            trust,
            state: parking_lot::Mutex::new(State::default()),
            refreshing: Default::default(),
            tool_search: config
                .tool_search
                .then(crate::tool_search::ToolSearch::default),
            shape: crate::snapshot::Snapshot::new(Arc::new(Shape::new(config, backends))),
        }
    }

    /// Tool search, when on.
    pub(crate) fn tool_search(&self) -> Option<&crate::tool_search::ToolSearch> {
        self.tool_search.as_ref()
    }

    /// How long a backend's list is reused.
    pub(crate) fn list_ttl(&self) -> Duration {
        self.shape().config.list_ttl
    }

    /// What the gateway presents as its server.
    pub(crate) fn presented(&self) -> Arc<BackendInfo> {
        self.shape().presented.clone()
    }

    /// The shape now.
    pub(crate) fn shape(&self) -> Arc<Shape> {
        self.shape.load()
    }

    /// Puts a reloaded shape in place: `backends` is the new set in order, `dropped` the
    /// backends whose cached lists go (removed, or replaced by a new process). `install`
    /// swaps the backend set itself; `guardrails`, when replaced, check every definition from
    /// now on. Every kind's refresh lock is held throughout, so no
    /// refresh reads one of shape and set without the other, and none that read the old ones
    /// installs its view after this. Every merged view is built again at its next use.
    pub(crate) async fn reshape(
        &self,
        mut config: VmcpConfig,
        guardrails: Option<Option<Arc<crate::guardrails::Guardrails>>>,
        backends: &[(BackendId, &BackendInfo)],
        dropped: &[BackendId],
        install: impl FnOnce(),
    ) {
        let _held = self.lock_refreshes().await;
        let old = self.shape();
        config.tool_search = old.config.tool_search;
        config.trust.clone_from(&old.config.trust);
        // New guardrails check every definition again (`set_guardrails`).
        let recheck = guardrails.is_some();
        config.guardrails = guardrails.unwrap_or_else(|| old.config.guardrails.clone());
        install();
        self.shape.store(Arc::new(Shape::new(config, backends)));
        let kept = |id: &BackendId| !dropped.contains(id) && backends.iter().any(|(b, _)| b == id);
        self.by_caps.retain(kept);
        if recheck {
            self.by_caps.forget_lists();
        }
        let mut state = self.state.lock();
        state.views.clear();
        state.lists.retain(|(id, _), _| kept(id) && !recheck);
    }

    /// Puts a shape taken before a reshape back (the reload was rolled back); `install`
    /// puts the backend set back.
    pub(crate) async fn restore(&self, shape: Arc<Shape>, install: impl FnOnce()) {
        let _held = self.lock_refreshes().await;
        install();
        self.by_caps
            .retain(|id| shape.order.iter().any(|(b, _)| b == id));
        // Lists fetched under the reshape's guardrails are checked again under these.
        let (now, then) = (&self.shape().config.guardrails, &shape.config.guardrails);
        let same_guards = match (now, then) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        let mut state = self.state.lock();
        state.views.clear();
        (state.lists).retain(|(id, _), _| same_guards && shape.order.iter().any(|(b, _)| b == id));
        drop(state);
        self.shape.store(shape);
        // After the store: a capability set's fetch reads the shape after the generation.
        if !same_guards {
            self.by_caps.forget_lists();
        }
    }

    /// Checks definitions with `guards` from now on (a reload replaced them): every list, each
    /// capability set's too, is fetched and checked again at its next use.
    pub(crate) async fn set_guardrails(&self, guards: Option<Arc<crate::guardrails::Guardrails>>) {
        let _held = self.lock_refreshes().await;
        let old = self.shape();
        let mut config = old.config.clone();
        config.guardrails = guards;
        self.shape.store(Arc::new(Shape {
            config,
            order: old.order.clone(),
            presented: old.presented.clone(),
        }));
        self.by_caps.forget_lists();
        let mut state = self.state.lock();
        state.views.clear();
        state.lists.clear();
    }

    /// Drops the merged list of `kind` (new names): the next use builds it again.
    pub(crate) fn forget_view(&self, kind: Kind) {
        self.state.lock().views.remove(&kind);
    }

    /// The current merged list of `kind`, if one was built.
    pub(crate) fn current(&self, kind: Kind) -> Option<Arc<View>> {
        self.state.lock().views.get(&kind).cloned()
    }

    /// Every kind's refresh lock, always taken in the same order.
    async fn lock_refreshes(&self) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut held = Vec::with_capacity(self.refreshing.len());
        for lock in &self.refreshing {
            held.push(lock.lock().await);
        }
        held
    }

    /// Whether `kind` must be fetched again from some backend (never fetched, TTL passed, or
    /// the backend said it changed).
    /// A backend whose breaker is open (`open`) is not asked: it is left out (see `rebuild`).
    fn stale(
        &self,
        kind: Kind,
        changed: &dyn Fn(&BackendId, Kind) -> bool,
        open: &[BackendId],
    ) -> Vec<BackendId> {
        let shape = self.shape();
        let state = self.state.lock();
        let ttl = shape.config.list_ttl;
        shape
            .order
            .iter()
            .map(|(id, _)| id)
            .filter(|id| !open.contains(id))
            .filter(|id| {
                changed(id, kind)
                    || state.lists.get(&((*id).clone(), kind)).is_none_or(|c| {
                        let wait = if c.failed.is_some() {
                            RETRY_FAILED.min(ttl)
                        } else {
                            ttl
                        };
                        c.fetched.elapsed() >= wait
                    })
            })
            .cloned()
            .collect()
    }

    /// Records one backend's fetch: new items, or the failure (its last items are kept).
    fn record(&self, id: &BackendId, kind: Kind, fetched: Result<Vec<Value>, String>) {
        let mut state = self.state.lock();
        let key = (id.clone(), kind);
        let now = Instant::now();
        match fetched {
            Ok(items) => {
                state.lists.insert(
                    key,
                    Cached {
                        items: items.into(),
                        fetched: now,
                        failed: None,
                    },
                );
            }
            Err(why) => {
                warn!(backend = %id, list = kind.list_method(), "backend left out: {why}");
                let items = state
                    .lists
                    .get(&key)
                    .map(|c| c.items.clone())
                    .unwrap_or_else(|| Arc::from(Vec::new()));
                state.lists.insert(
                    key,
                    Cached {
                        items,
                        fetched: now,
                        failed: Some(why),
                    },
                );
            }
        }
    }

    /// Merges `kind` again from what is cached and installs it. A merge that fails (a
    /// `manual` collision that appeared at run time) keeps the previous list.
    ///
    /// The merge runs without the lock (it may take a while on a long list; every routed call
    /// reads the views); one refresh per kind at a time installs, so they cannot race.
    fn rebuild(&self, kind: Kind, open: &[BackendId]) -> Result<Arc<View>, CoreError> {
        let shape = self.shape();
        let state = self.state.lock();
        let lists: Vec<Known<'_>> = shape
            .order
            .iter()
            .map(|(id, rules)| {
                let cached = state.lists.get(&(id.clone(), kind));
                let items = cached
                    .map(|c| c.items.clone())
                    .unwrap_or_else(|| Arc::from(Vec::new()));
                let sets = self.by_caps.every_set(id, kind);
                let items = match sets.is_empty() {
                    true => items,
                    false => {
                        let taken = taken_by_others(&state, kind, id, &shape.order);
                        by_caps::with_every_set(kind, items, sets, &taken)
                    }
                };
                let failed = cached.and_then(|c| c.failed.clone());
                (id.clone(), rules, items, failed)
            })
            .collect();
        drop(state);
        let input: Vec<(BackendId, &BackendRules, &[Value])> = lists
            .iter()
            .map(|(id, rules, items, _)| (id.clone(), *rules, &items[..]))
            .collect();
        let down: Vec<(BackendId, String)> = lists
            .iter()
            .filter_map(|(id, _, _, failed)| {
                let why = if open.contains(id) {
                    Some("circuit breaker open".to_owned())
                } else {
                    failed.clone()
                };
                Some((id.clone(), why?))
            })
            .collect();
        let merged = catalog::merge(kind, &shape.config.strategy, &input);
        match merged {
            Ok(all) => {
                let out: Vec<BackendId> = down.iter().map(|(id, _)| id.clone()).collect();
                // Quarantined tools stay in `all` (names are computed as if they were there,
                // and a call is refused naming them) but are not listed.
                let held = |e: &catalog::Entry| {
                    kind == Kind::Tools
                        && self
                            .trust
                            .as_ref()
                            .is_some_and(|t| t.blocks(e.backend.as_str(), &e.original))
                };
                let visible = all.filtered(|e| !out.contains(&e.backend) && !held(e));
                let breakers_open = open.to_vec();
                let view = Arc::new(View {
                    all,
                    visible,
                    down,
                    breakers_open,
                });
                self.state.lock().views.insert(kind, view.clone());
                Ok(view)
            }
            Err(e) => {
                warn!(list = kind.list_method(), "merged list not rebuilt: {e}");
                self.state
                    .lock()
                    .views
                    .get(&kind)
                    .cloned()
                    .ok_or_else(|| CoreError::Aggregation(e.to_string()))
            }
        }
    }
}

/// The virtual server's own declaration: every backend's capabilities merged, its
/// instructions naming each backend's, the gateway's `serverInfo`.
fn presented(backends: &[(BackendId, &BackendInfo)]) -> BackendInfo {
    let caps: Vec<(BackendId, &Value)> = backends
        .iter()
        .map(|(id, info)| (id.clone(), &info.capabilities))
        .collect();
    let instructions: Vec<(BackendId, Option<&str>)> = backends
        .iter()
        .map(|(id, info)| {
            (
                id.clone(),
                info.instructions.as_ref().and_then(Value::as_str),
            )
        })
        .collect();
    BackendInfo {
        protocol_version: switchboard_wire::version::LATEST_LEGACY.to_owned(),
        capabilities: catalog::merge_capabilities(&caps),
        server_info: json!({"name": "switchboard", "version": env!("CARGO_PKG_VERSION")}),
        instructions: catalog::merge_instructions(&instructions).map(Value::String),
        era: crate::BackendEra {
            legacy: true,
            modern: backends.iter().any(|(_, i)| i.era.modern),
        },
    }
}

impl Vmcp {
    /// The merged list of `kind`, fetching what is stale first (one refresh at a time; a
    /// caller that waited for another's refresh uses its result).
    pub(crate) async fn view(
        &self,
        kind: Kind,
        sender: &Sender,
        backends: &Backends,
    ) -> Result<Arc<View>, CoreError> {
        let vmcp = self;
        let changed = |id: &BackendId, kind: Kind| {
            sender
                .registry
                .tables(id)
                .lists_changed
                .is_set(kind_index(kind))
        };
        // A breaker that opened or closed changes who is listed, without a fetch.
        let open = sender.health.not_closed();
        let current = || vmcp.current(kind).filter(|v| v.breakers_open == open);
        if vmcp.stale(kind, &changed, &open).is_empty() {
            if let Some(view) = current() {
                return Ok(view);
            }
        }
        let _one = vmcp.refreshing[kind_index(kind)].lock().await;
        let stale = vmcp.stale(kind, &changed, &open);
        if stale.is_empty() {
            if let Some(view) = current() {
                return Ok(view);
            }
        }
        let fetches = stale.iter().map(|id| async move {
            // Taken before the fetch: a change announced while it runs marks it again.
            sender
                .registry
                .tables(id)
                .lists_changed
                .take(kind_index(kind));
            let deadline = vmcp.shape().config.fetch_timeout;
            let fetched = tokio::time::timeout(deadline, fetch_list(sender, backends, id, kind))
                .await
                .unwrap_or_else(|_| Err(format!("no complete list within {deadline:?}")));
            (id, fetched)
        });
        let guards = vmcp.shape().config.guardrails.clone();
        for (id, fetched) in futures::future::join_all(fetches).await {
            let fetched = match (&guards, fetched) {
                (Some(g), Ok(items)) => Ok(g.definitions(id.as_str(), kind, items)),
                (_, fetched) => fetched,
            };
            if let (Kind::Tools, Ok(items), Some(trust)) = (kind, &fetched, &vmcp.trust) {
                trust.screen_tools(id, items).await;
            }
            vmcp.record(id, kind, fetched);
        }
        vmcp.rebuild(kind, &open)
    }

    /// Builds every merged list once (at startup, before clients come: so the first lists
    /// already know every backend's names).
    pub(crate) async fn warm(&self, sender: &Sender, backends: &Backends) {
        let all = KINDS.map(|kind| self.view(kind, sender, backends));
        for (kind, built) in KINDS.iter().zip(futures::future::join_all(all).await) {
            if let Err(e) = built {
                warn!(
                    list = kind.list_method(),
                    "merged list not built at startup: {e}"
                );
            }
        }
    }
}

fn kind_index(kind: Kind) -> usize {
    KINDS.iter().position(|k| *k == kind).unwrap_or(0)
}

/// The names of `kind` the other backends' shared lists hold (a set-only item must not take
/// one, see `by_caps::with_every_set`).
fn taken_by_others(
    state: &State,
    kind: Kind,
    id: &BackendId,
    order: &[(BackendId, BackendRules)],
) -> std::collections::HashSet<String> {
    let key = kind.item_key();
    order
        .iter()
        .filter(|(other, _)| other != id)
        .filter_map(|(other, _)| state.lists.get(&(other.clone(), kind)))
        .flat_map(|c| c.items.iter())
        .filter_map(|i| i.get(key)?.as_str().map(str::to_owned))
        .collect()
}
