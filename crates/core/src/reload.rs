//! Hot reload, the core's half: a new backend set and virtual-server shape put in place while
//! sessions keep running. The binary (`switchboard::reload`) reads and checks the file, starts
//! what is new and drains what left; this module swaps the snapshots (`backends`, `health`,
//! `vmcp`'s shape) and tells each session what changed for it.
//!
//! Order matters for isolation and for "nothing is lost": the new backends are connected
//! *before* the swap (a reload that cannot start one changes nothing), the swap happens in one
//! step per snapshot, and a request that had already routed keeps the entry it holds, so its
//! answer still arrives; a backend that left is stopped only after it drains (the binary).

use std::sync::Arc;

use bytes::Bytes;
use switchboard_wire::{encode_notification, method};

use futures::future::BoxFuture;

use crate::backends::BackendEntry;
use crate::catalog::Kind;
use crate::guardrails::Guardrails;
use crate::health::Health;
use crate::per_session::Spawner;
use crate::registry::Registry;
use crate::send::Sender;
use crate::vmcp::{Vmcp, VmcpConfig, KINDS};
use crate::{Backend, BackendId, Backends, CoreError};

/// What a reload asks of the core.
#[derive(Debug)]
pub struct Reshape {
    /// The new set, in configured order (never empty).
    pub order: Vec<BackendId>,
    /// The backends of `order` that are new or were replaced, connected and handshaken.
    pub started: Vec<(BackendId, Backend)>,
    /// The new aggregation settings and per-backend rules.
    pub vmcp: VmcpConfig,
    /// The policy was replaced: any session's lists may look different now.
    pub policy_changed: bool,
    /// New guardrails (`Some(None)`: none any more), put in force in the same step as the
    /// set: a backend the reload adds is never reachable, nor its tools listed, under the
    /// rules from before it (which lack its own). `None`: unchanged.
    pub guardrails: Option<Option<Arc<Guardrails>>>,
}

/// What a reload did.
#[derive(Debug, Default)]
pub struct Reshaped {
    /// Backends that left the set (removed, or replaced by a new process under their name):
    /// the binary drains and stops them.
    pub retired: Vec<Retiring>,
    /// The `list_changed` notifications every live session was sent, one each.
    pub announced: Vec<&'static str>,
}

/// A backend that left the set, still answering what was sent to it before.
#[derive(Debug)]
pub struct Retiring(Arc<BackendEntry>);

impl Retiring {
    /// Its name.
    pub fn id(&self) -> &BackendId {
        &self.0.id
    }

    /// Calls sent to it still awaiting their answer.
    pub fn pending(&self) -> usize {
        self.0.backend.handle.pending_len()
    }
}

/// How a reload attempt ended (the `switchboard_config_reloads` metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadOutcome {
    Applied,
    Refused,
    Unchanged,
}

/// What a reload changes and whom it tells, taken explicitly (`Gateway::reload` builds it):
/// the set and its health entries, the virtual server's shape, the routing tables, the
/// spawners (own upstreams stay where they are), the way to the backends and, when the
/// policy changed, how every session's subscriptions are judged again.
pub struct Reload<'a> {
    pub(crate) vmcp: Option<&'a Vmcp>,
    pub(crate) backends: &'a Backends,
    pub(crate) health: &'a Health,
    pub(crate) registry: &'a Registry,
    pub(crate) per_session: &'a Spawner,
    pub(crate) sender: &'a Sender,
    /// The guardrails in force, which a reshape may replace with the set.
    pub(crate) guardrails: &'a arc_swap::ArcSwapOption<Guardrails>,
    /// How long a started process may take to answer a re-subscribe.
    pub(crate) handshake_timeout: std::time::Duration,
    /// Judges every session's subscriptions under the policy now in force
    /// (`session_ops::Upkeep::rejudge_subscriptions`).
    pub(crate) rejudge: Box<dyn Fn() -> BoxFuture<'a, ()> + Send + Sync + 'a>,
}

impl std::fmt::Debug for Reload<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reload").finish_non_exhaustive()
    }
}

impl Reload<'_> {
    /// Counts one reload attempt.
    pub fn count_reload(&self, outcome: ReloadOutcome) {
        crate::metrics::reloaded(match outcome {
            ReloadOutcome::Applied => "applied",
            ReloadOutcome::Refused => "refused",
            ReloadOutcome::Unchanged => "unchanged",
        });
    }

    /// Puts a reloaded backend set and shape in place (see the module docs). Refused, with
    /// nothing changed, when the gateway does not aggregate, `order` is empty, repeats a name
    /// or names a backend that is neither running nor started, or when a list that merged
    /// before no longer merges with the new shape (a `manual` collision the new backends
    /// bring): the old set and shape are put back and keep serving.
    pub async fn reshape(&self, plan: Reshape) -> Result<Reshaped, CoreError> {
        let Some(vmcp) = self.vmcp else {
            return Err(CoreError::Aggregation(
                "a transparent proxy cannot change its backends".into(),
            ));
        };
        let entries = self.entries_for(&plan)?;
        if !crate::backends::distinct(entries.iter().map(|e| &e.id)) {
            return Err(CoreError::Aggregation(
                "a backend set must be non-empty, each name once".into(),
            ));
        }
        let before: Vec<Option<Digest>> = KINDS.iter().map(|k| digest_of(vmcp, *k)).collect();
        let old: Vec<Arc<BackendEntry>> = self.backends.iter().collect();
        let fresh: Vec<BackendId> = plan.started.iter().map(|(id, _)| id.clone()).collect();
        let retired: Vec<Arc<BackendEntry>> = old
            .iter()
            .filter(|e| !plan.order.contains(&e.id) || fresh.contains(&e.id))
            .cloned()
            .collect();
        let dropped: Vec<BackendId> = retired.iter().map(|e| e.id.clone()).collect();
        let old_shape = vmcp.shape();
        let old_guards = plan
            .guardrails
            .as_ref()
            .map(|_| self.guardrails.load_full());
        {
            let infos: Vec<(BackendId, &crate::BackendInfo)> =
                entries.iter().map(|e| (e.id.clone(), e.info())).collect();
            let guards = plan.guardrails.clone();
            vmcp.reshape(plan.vmcp, guards, &infos, &dropped, || {
                // A new process starts with a health entry of its own (its predecessor's
                // breaker is not its history).
                self.health.reshape(&plan.order, &fresh);
                if let Some(guards) = plan.guardrails {
                    self.put_guardrails(guards);
                }
                self.backends.replace(entries.clone());
            })
            .await;
        }
        let mut after = Vec::with_capacity(KINDS.len());
        for (i, kind) in KINDS.iter().enumerate() {
            match vmcp.view(*kind, self.sender, self.backends).await {
                Ok(_) => after.push(digest_of(vmcp, *kind)),
                Err(e) if before[i].is_some() => {
                    self.roll_back(old_shape, old, old_guards).await;
                    return Err(e);
                }
                Err(_) => after.push(None),
            }
        }
        for id in &dropped {
            self.forget(id);
        }
        for entry in entries.iter().filter(|e| fresh.contains(&e.id)) {
            self.carry_over(entry).await;
        }
        if plan.policy_changed {
            (self.rejudge)().await;
        }
        let announced = self.announce_changes(&before, &after, plan.policy_changed);
        Ok(Reshaped {
            retired: retired.into_iter().map(Retiring).collect(),
            announced,
        })
    }

    /// Puts the set, shape and guardrails from before a reshape back (`guards`: those the
    /// reshape replaced, if it did).
    async fn roll_back(
        &self,
        shape: Arc<crate::vmcp::Shape>,
        old: Vec<Arc<BackendEntry>>,
        guards: Option<Option<Arc<Guardrails>>>,
    ) {
        let Some(vmcp) = self.vmcp else {
            return;
        };
        let order: Vec<BackendId> = old.iter().map(|e| e.id.clone()).collect();
        vmcp.restore(shape, || {
            self.health.reshape(&order, &[]);
            self.backends.replace(old);
            if let Some(guards) = guards {
                self.put_guardrails(guards);
            }
        })
        .await;
    }

    /// The guardrails requests start with from now on, and every backend message's check
    /// (the merged lists' copy is the shape's).
    fn put_guardrails(&self, guards: Option<Arc<Guardrails>>) {
        (self.registry.progress).guard(crate::guardrails::note_check(&guards));
        self.guardrails.store(guards);
    }

    /// What the gateway kept about a backend process that left: the task ids it handed out
    /// (a new process under the name may hand the same ids to someone else) and its tools'
    /// `Mcp-Param-*` designations.
    fn forget(&self, id: &BackendId) {
        let tables = self.registry.tables(id);
        tables.tasks.clear();
        tables.questions.forget_all();
        tables.tool_headers.invalidate();
    }

    /// What sessions hold at a backend that a reload started (new, or a new process under an
    /// old name): its subscriptions are made again on the new process, its `Mcp-Param-*`
    /// designations re-learned, and the most verbose level sessions asked for applied (as
    /// after a crash restart, `session_ops`).
    async fn carry_over(&self, entry: &BackendEntry) {
        let tables = self.registry.tables(&entry.id);
        let deadline = self.handshake_timeout;
        for uri in tables.subs.uris() {
            let params = serde_json::json!({ "uri": uri });
            let handle = &entry.backend.handle;
            if let Err(e) = crate::backend::call(handle, method::SUBSCRIBE, params, deadline).await
            {
                tracing::debug!(error = %e, backend = %entry.id, "re-subscribe after reload failed");
            }
        }
        let with = (self.sender, self.registry, self.backends);
        let _ = crate::session_ops::reconcile_log_level(with, entry).await;
    }

    /// The new set's entries: a kept backend's own (its era, log level and handle carry
    /// over), a started one's new.
    fn entries_for(&self, plan: &Reshape) -> Result<Vec<Arc<BackendEntry>>, CoreError> {
        plan.order
            .iter()
            .map(|id| {
                if let Some((_, backend)) = plan.started.iter().find(|(s, _)| s == id) {
                    return Ok(Arc::new(BackendEntry::new(id.clone(), backend.clone())));
                }
                self.backends
                    .get(id)
                    .ok_or_else(|| CoreError::UnknownBackend(id.clone()))
            })
            .collect()
    }

    /// The policy alone was replaced (a transparent proxy has no shape to reload): every
    /// session's lists may look different, so each hears every `list_changed` once.
    pub async fn policy_replaced(&self) -> Vec<&'static str> {
        (self.rejudge)().await;
        let all = [
            method::TOOLS_LIST_CHANGED,
            method::PROMPTS_LIST_CHANGED,
            method::RESOURCES_LIST_CHANGED,
        ];
        for name in all {
            self.announce(name);
        }
        all.to_vec()
    }

    /// New guardrails alone (no backend changed): requests that start from now on, every
    /// backend message on its way to a client, and every merged list are checked by `guards`
    /// (`None`: by none). The lists are built again at once, and each family whose content
    /// changed is announced once: a definition the new rules refuse is gone, a redacted one
    /// replaced, and a client would otherwise keep the old ones until it lists again. A
    /// transparent proxy checks no definitions, so it has nothing to announce.
    pub async fn guardrails_replaced(&self, guards: Option<Arc<Guardrails>>) -> Vec<&'static str> {
        let Some(vmcp) = self.vmcp else {
            self.put_guardrails(guards);
            return Vec::new();
        };
        let before: Vec<Option<Digest>> = KINDS.iter().map(|k| digest_of(vmcp, *k)).collect();
        vmcp.set_guardrails(guards.clone()).await;
        self.put_guardrails(guards);
        let mut after = Vec::with_capacity(KINDS.len());
        for kind in KINDS {
            let built = vmcp.view(kind, self.sender, self.backends).await;
            after.push(built.ok().and_then(|_| digest_of(vmcp, kind)));
        }
        self.announce_changes(&before, &after, false)
    }

    /// Each list family whose merged content differs between `before` and `after` (every one
    /// after a policy change), announced once to everyone; the names sent.
    fn announce_changes(
        &self,
        before: &[Option<Digest>],
        after: &[Option<Digest>],
        policy_changed: bool,
    ) -> Vec<&'static str> {
        let announced = announcements(before, after, policy_changed);
        for name in &announced {
            self.announce(name);
        }
        announced
    }

    /// One payload-free `name` to every live session and Modern listener that asked for
    /// list changes (as a backend's own are rebuilt, `dispatch`).
    fn announce(&self, name: &'static str) {
        let data = Bytes::from(encode_notification(name, None));
        self.registry.sessions.broadcast(&data);
        self.registry.listeners.list_changed(name);
    }

    /// Whether sessions get upstreams of their own on `id` (per-session process or a
    /// Legacy-only remote): those live in sessions, and a reload does not move them.
    pub fn has_own_upstreams(&self, id: &BackendId) -> bool {
        self.per_session.for_backend(id).is_some()
    }

    /// The names of the backends served now, in order.
    pub fn backend_names(&self) -> Vec<BackendId> {
        self.backends.iter().map(|e| e.id.clone()).collect()
    }
}

/// One `list_changed` per list family whose items changed (every family after a policy
/// change).
fn announcements(
    before: &[Option<Digest>],
    after: &[Option<Digest>],
    policy_changed: bool,
) -> Vec<&'static str> {
    let mut announced = Vec::new();
    for (i, kind) in KINDS.iter().enumerate() {
        let name = list_changed(*kind);
        let changed = policy_changed || before.get(i) != after.get(i);
        if changed && !announced.contains(&name) {
            announced.push(name);
        }
    }
    announced
}

/// What a client would see of one list: each visible item, as listed.
type Digest = Vec<(Arc<str>, BackendId, String)>;

fn digest_of(vmcp: &crate::vmcp::Vmcp, kind: Kind) -> Option<Digest> {
    let view = vmcp.current(kind)?;
    Some(
        view.visible
            .entries()
            .iter()
            .map(|e| {
                (
                    e.exposed.clone(),
                    e.backend.clone(),
                    e.item.get().to_owned(),
                )
            })
            .collect(),
    )
}

/// The notification that says `kind` changed (templates are resources).
fn list_changed(kind: Kind) -> &'static str {
    match kind {
        Kind::Tools => method::TOOLS_LIST_CHANGED,
        Kind::Prompts => method::PROMPTS_LIST_CHANGED,
        Kind::Resources | Kind::ResourceTemplates => method::RESOURCES_LIST_CHANGED,
    }
}
