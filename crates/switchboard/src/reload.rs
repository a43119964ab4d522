//! Hot reload (`serve`): one worker watches the config file (polled, by modification time,
//! length and inode) and `SIGHUP`, reads the file through the same checks `validate` runs,
//! and applies what may change while serving — backends added, removed or changed, their
//! filters and overrides, the aggregation settings, the Cedar policy, the guardrails — or refuses the file
//! whole and keeps the running configuration. The core swaps the snapshots (`Gateway::reshape`);
//! this worker starts what is new first and drains what left afterwards.
//!
//! Not reloaded (logged when they change; a restart applies them): listen address, identity,
//! limits, timeouts, isolation defaults, worker threads, composite tools, trust settings.
//! Backends whose sessions hold upstreams of their own (a per-session process, a Legacy-only
//! remote) cannot be added, removed or changed: those upstreams live in the sessions.

pub(crate) mod policy;
mod served;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use switchboard_core::guardrails::Guardrails;
use switchboard_core::{BackendId, Gateway, Registry, ReloadOutcome, Reshape};

use crate::config::ServeSpec;
use crate::running::RunningSet;
use crate::start_backends::{Origin, StartedSet};
use policy::ReloadablePolicy;
pub(crate) use served::Served;
use served::{fixed_key, guards_key, Digest};

/// How often the file is looked at. A change is applied once two looks agree, so an editor
/// that writes in several steps is read once, whole.
const POLL: Duration = Duration::from_millis(500);
/// How often a retired backend is checked for calls still in flight.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// What the worker needs, handed over by `serve` once the gateway is up.
pub(crate) struct Reloader {
    /// The file, and how it looked when the running configuration was read from it.
    pub(crate) watched: Watched,
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) running: RunningSet,
    pub(crate) policy: Option<Arc<ReloadablePolicy>>,
    /// Whether the gateway aggregates (a transparent proxy reloads its policy only).
    pub(crate) aggregate: bool,
    /// A call to a retired backend gets this long to finish.
    pub(crate) drain_limit: Duration,
    pub(crate) served: Served,
    /// `SIGHUP`, installed before the gateway listened (so an early one cannot end it).
    pub(crate) hangup: Option<tokio::signal::unix::Signal>,
    /// Configured backends that did not start (at startup or when a reload added them):
    /// retried with backoff by applying the file again, until each joins.
    pub(crate) missing: Vec<BackendId>,
    /// Why a per-user OAuth backend may not be served with the running identity and address
    /// (anonymous callers off loopback would share one user's tokens); `None`: it may.
    pub(crate) per_user_refused: Option<String>,
    /// Every sandboxed backend's home, shared with their configurations: a reload adds the
    /// new ones, and each process started after that hides them. Not part of a backend's
    /// fingerprint, so adding a backend restarts no other.
    pub(crate) homes: switchboard_upstream::sandbox::Homes,
    /// Where the guardrails a reload builds audit their actions.
    pub(crate) audit: Option<Arc<switchboard_core::audit::AuditLog>>,
}

/// First and longest wait between two tries of the backends that did not start.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Why a reload is applied: an operator's change is reported whatever it did; a retry of the
/// missing backends only when it changed something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Operator(&'static str),
    Retry,
}

impl Trigger {
    fn why(self) -> &'static str {
        match self {
            Trigger::Operator(why) => why,
            Trigger::Retry => "retrying backends that did not start",
        }
    }
}

/// The file's identity now; `None` while it cannot be read.
/// What a file looked like (modified, length, inode): a change to any is a change.
pub(crate) type Stamp = Option<(std::time::SystemTime, u64, u64)>;

/// The config file `serve` watches, with how it looked before it was read: a change made
/// while the gateway started (before the reload worker first looks) is still a change.
#[derive(Debug, Clone)]
pub(crate) struct Watched {
    pub(crate) path: PathBuf,
    pub(crate) seen: Stamp,
}

impl Watched {
    /// `path`, stamped now: call it before the file is read.
    pub(crate) fn before_reading(path: PathBuf) -> Watched {
        let seen = stamp(&path);
        Watched { path, seen }
    }
}

pub(crate) fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

impl Reloader {
    /// Serves reloads until `stop`; hands back what keeps the backends running (for the
    /// orderly shutdown), after every drain has ended.
    pub(crate) async fn run(mut self, stop: CancellationToken) -> RunningSet {
        let mut hangup = self.hangup.take();
        let mut drains = JoinSet::new();
        let mut seen = self.watched.seen;
        let mut pending = None;
        let mut tick = tokio::time::interval(POLL);
        let mut backoff = RETRY_FIRST;
        let retry = tokio::time::sleep(backoff);
        tokio::pin!(retry);
        loop {
            let hup = async {
                match hangup.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                Some(()) = hup => {
                    seen = stamp(&self.watched.path);
                    pending = None;
                    if self.apply_or_stop(Trigger::Operator("SIGHUP"), &mut drains, &stop).await {
                        break;
                    }
                }
                // Not while a file change is settling: a retry applies the file too, and
                // must not read it half-written.
                () = &mut retry, if !self.missing.is_empty() && pending.is_none() => {
                    if self.apply_or_stop(Trigger::Retry, &mut drains, &stop).await {
                        break;
                    }
                    backoff = (backoff * 2).min(RETRY_MAX);
                    retry.as_mut().reset(tokio::time::Instant::now() + backoff);
                }
                _ = tick.tick() => {
                    let now = stamp(&self.watched.path);
                    if now == seen {
                        pending = None;
                    } else if pending.is_some() && pending == now {
                        seen = now;
                        pending = None;
                        if self
                            .apply_or_stop(Trigger::Operator("file changed"), &mut drains, &stop)
                            .await
                        {
                            break;
                        }
                    } else {
                        pending = now.or(pending);
                    }
                }
                Some(_) = drains.join_next(), if !drains.is_empty() => {}
            }
        }
        while drains.join_next().await.is_some() {}
        self.running
    }

    /// Applies a reload unless `stop` fires first (a reload may wait out backend startups
    /// and list fetches; shutdown does not wait for it: what it started dies with it).
    /// True when stopped.
    async fn apply_or_stop(
        &mut self,
        trigger: Trigger,
        drains: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) -> bool {
        tokio::select! {
            () = stop.cancelled() => true,
            () = self.apply(trigger, drains, stop) => false,
        }
    }

    async fn apply(
        &mut self,
        trigger: Trigger,
        drains: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) {
        let why = trigger.why();
        let outcome = match (self.try_apply(drains, stop).await, trigger) {
            (Ok(Some(summary)), _) => {
                info!(reason = why, "config reloaded: {summary}");
                println!("switchboard: config reloaded ({why}): {summary}");
                ReloadOutcome::Applied
            }
            (Ok(None) | Err(_), Trigger::Retry) => return,
            (Ok(None), Trigger::Operator(_)) => {
                println!("switchboard: config unchanged ({why})");
                ReloadOutcome::Unchanged
            }
            (Err(e), Trigger::Operator(_)) => {
                report_refusal(&e);
                println!("switchboard: config reload refused ({why}): {e:#}");
                ReloadOutcome::Refused
            }
        };
        self.gateway.reload().count_reload(outcome);
    }

    async fn try_apply(
        &mut self,
        drains: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) -> anyhow::Result<Option<String>> {
        // Reading the config converts its OpenAPI specs: bounded, but CPU-heavy for a
        // hostile one, so off the runtime's workers.
        let spec = tokio::task::spawn_blocking(load_spec)
            .await
            .context("reading the config")??;
        // Built first: a file whose guardrails do not build is refused whole. In force once
        // the rest of the file is: with the new set when the backends change (the reshape
        // carries them), else on their own.
        let Some((key, guards)) = self.changed_guardrails(&spec)? else {
            return self.apply_spec(spec, &mut None, drains, stop).await;
        };
        let mut carried = Some(guards);
        let summary = self.apply_spec(spec, &mut carried, drains, stop).await?;
        let announced = match carried {
            Some(guards) => self.gateway.reload().guardrails_replaced(guards).await,
            None => Vec::new(),
        };
        self.served.guards = key;
        Ok(Some(match (summary, announced.is_empty()) {
            (Some(summary), _) => format!("{summary}, guardrails replaced"),
            (None, true) => "guardrails replaced".to_owned(),
            (None, false) => format!("announced [{}], guardrails replaced", announced.join(", ")),
        }))
    }

    /// The guardrails of `spec` and their key, when they differ from those in force.
    fn changed_guardrails(
        &self,
        spec: &ServeSpec,
    ) -> anyhow::Result<Option<(Digest, Option<Arc<Guardrails>>)>> {
        // Read once: the key and the guardrails come from the same secrets.
        let secrets =
            crate::guardrails::secrets(&spec.guardrails, &spec.backends).context("guardrails")?;
        let key = guards_key(spec, &secrets);
        if key == self.served.guards {
            return Ok(None);
        }
        let audit = self.audit.clone();
        let guards = crate::guardrails::build(&spec.guardrails, &spec.backends, audit, secrets)
            .context("guardrails")?;
        Ok(Some((key, guards)))
    }

    /// Applies `spec` but its guardrails; `guards`, new guardrails when `Some`, are taken
    /// when the backends change, to be put in force with them.
    async fn apply_spec(
        &mut self,
        spec: ServeSpec,
        guards: &mut Option<Option<Arc<Guardrails>>>,
        drains: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) -> anyhow::Result<Option<String>> {
        let configured: Vec<BackendId> = spec.backends.iter().map(|b| b.name.clone()).collect();
        let applied = self.apply_backends(spec, guards, drains, stop).await?;
        // Once the file is taken (a refused one changes nothing): a backend that never
        // started and is no longer configured is forgotten, not retried, not shown, not
        // waited for by `/readyz`.
        self.missing.retain(|id| configured.contains(id));
        self.gateway.health().forget_absent_except(&configured);
        Ok(applied)
    }

    /// [`Self::apply_spec`]'s backends, policy and shape.
    async fn apply_backends(
        &mut self,
        mut spec: ServeSpec,
        guards: &mut Option<Option<Arc<Guardrails>>>,
        drains: &mut JoinSet<()>,
        stop: &CancellationToken,
    ) -> anyhow::Result<Option<String>> {
        if let (Some(why), Some(b)) = (
            &self.per_user_refused,
            spec.backends.iter().find(|b| b.per_user()),
        ) {
            bail!("backend {}: {why}", b.name);
        }
        let new_policy = self.check_policy(&spec)?;
        let mut plan = Plan::of(&self.served, &spec);
        let fixed_changed = fixed_key(&spec) != self.served.fixed;
        if plan.is_empty() && new_policy.is_none() {
            if fixed_changed {
                warn_fixed();
            }
            return Ok(None);
        }
        if !plan.is_empty() && !self.aggregate {
            bail!("this gateway serves one backend as a transparent proxy: changing its backends or their lists needs a restart");
        }
        for id in plan.removed.iter().chain(&plan.changed) {
            if self.gateway.reload().has_own_upstreams(id) {
                bail!("backend {id} gives each session an upstream of its own: removing or changing it needs a restart");
            }
        }
        let policy_changed = new_policy.is_some();
        if plan.is_empty() {
            // The policy alone: nothing to reshape (and a transparent proxy has no shape).
            if let (Some(policy), Some((path, checked))) = (&self.policy, new_policy) {
                policy.install(&path, checked);
            }
            let announced = self.gateway.reload().policy_replaced().await;
            return Ok(Some(plan.summary(true, &announced)));
        }
        let StartedSet {
            backends,
            processes,
            internals,
            failed,
            ..
        } = self.start(&spec, &plan).await?;
        // An added backend that does not start is served without, and retried; a changed one
        // keeps its running predecessor (the reload is refused whole).
        if let Some((id, e)) = failed.iter().find(|(id, _)| plan.changed.contains(id)) {
            let e = anyhow::anyhow!("{e:#}").context(format!("backend {id}"));
            StartedSet::shutdown(processes, internals).await;
            return Err(e);
        }
        self.missing = failed.iter().map(|(id, _)| id.clone()).collect();
        for (id, e) in &failed {
            let (unauthenticated, words) = crate::start_backends::failure_words(e);
            warn!(backend = %id, "{words}; serving without it, retrying in the background");
            self.gateway
                .health()
                .not_started(id, unauthenticated, words);
        }
        if !failed.is_empty() {
            spec.backends.retain(|b| !self.missing.contains(&b.name));
            plan = Plan::of(&self.served, &spec);
            if plan.is_empty() && new_policy.is_none() {
                StartedSet::shutdown(processes, internals).await;
                return Ok(None);
            }
        }
        // In force before the reshape, which announces the lists it changed.
        let replaced = match (&self.policy, new_policy) {
            (Some(policy), Some((path, checked))) => Some(policy.install(&path, checked)),
            _ => None,
        };
        let mut vmcp = crate::start_backends::vmcp_config(&spec.aggregation, &spec.backends);
        vmcp.trust = None;
        let reshape = Reshape {
            order: spec.backends.iter().map(|b| b.name.clone()).collect(),
            started: backends,
            vmcp,
            policy_changed,
            guardrails: guards.take(),
        };
        let reshaped = match self.gateway.reload().reshape(reshape).await {
            Ok(reshaped) => reshaped,
            Err(e) => {
                if let (Some(policy), Some(old)) = (&self.policy, replaced) {
                    policy.restore(old);
                }
                StartedSet::shutdown(processes, internals).await;
                return Err(e.into());
            }
        };
        for retiring in reshaped.retired {
            let keepers = self.running.retire(retiring.id());
            let (limit, stop) = (self.drain_limit, stop.clone());
            drains.spawn(async move {
                let deadline = Instant::now() + limit;
                while retiring.pending() > 0 && Instant::now() < deadline {
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(DRAIN_POLL) => {}
                    }
                }
                keepers.stop().await;
                info!(backend = %retiring.id(), "retired backend stopped");
            });
        }
        self.running.adopt(processes, internals);
        self.served = Served {
            fixed: self.served.fixed,
            guards: self.served.guards,
            ..Served::shape_of(&spec)
        };
        if fixed_changed {
            warn_fixed();
        }
        Ok(Some(plan.summary(policy_changed, &reshaped.announced)))
    }

    /// The policy file's new text compiled, when it changed; refused when the file asks to
    /// turn the policy on or off (a restart does that).
    fn check_policy(
        &self,
        spec: &ServeSpec,
    ) -> anyhow::Result<Option<(PathBuf, (String, switchboard_policy::CedarAuthorizer))>> {
        let auth = spec.options.auth.resolve()?;
        let path = spec.options.auth.policy_path(&auth).map(Path::to_owned);
        match (&self.policy, path) {
            (None, None) => Ok(None),
            (Some(policy), Some(path)) => Ok(policy.check(&path)?.map(|p| (path, p))),
            (None, Some(_)) => bail!("turning a Cedar policy on needs a restart"),
            (Some(_), None) => bail!("turning the Cedar policy off needs a restart"),
        }
    }

    /// Starts the added and changed backends; those that fail are in the set's `failed`.
    async fn start(&self, spec: &ServeSpec, plan: &Plan) -> anyhow::Result<StartedSet> {
        self.homes
            .add(crate::start_backends::sandbox_homes(&spec.backends));
        let origins = spec
            .backends
            .iter()
            .filter(|b| plan.added.contains(&b.name) || plan.changed.contains(&b.name))
            .map(|b| Ok((b.name.clone(), Origin::of(&spec.options, b, &self.homes)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let started =
            crate::start_backends::start_all(&spec.options, origins, true, &self.registry).await?;
        if let Some((id, _)) = started.per_session.first() {
            let id = id.clone();
            StartedSet::shutdown(started.processes, started.internals).await;
            bail!("backend {id} would give each session an upstream of its own (isolation per-session, or a Legacy-only remote): adding it needs a restart");
        }
        Ok(started)
    }
}

/// Backends by what a reload does to them.
struct Plan {
    added: Vec<BackendId>,
    removed: Vec<BackendId>,
    changed: Vec<BackendId>,
    rules_changed: bool,
}

impl Plan {
    fn of(served: &Served, spec: &ServeSpec) -> Self {
        let now = Served::shape_of(spec);
        let old = |id: &BackendId| served.backends.iter().find(|(b, _)| b == id);
        let mut plan = Plan {
            added: Vec::new(),
            removed: Vec::new(),
            changed: Vec::new(),
            rules_changed: now.rules != served.rules,
        };
        for (id, print) in &now.backends {
            match old(id) {
                None => plan.added.push(id.clone()),
                Some((_, was)) if was != print => plan.changed.push(id.clone()),
                Some(_) => {}
            }
        }
        for (id, _) in &served.backends {
            if !now.backends.iter().any(|(b, _)| b == id) {
                plan.removed.push(id.clone());
            }
        }
        plan
    }

    fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && !self.rules_changed
    }

    fn summary(&self, policy: bool, announced: &[&str]) -> String {
        let names = |ids: &[BackendId]| {
            let v: Vec<&str> = ids.iter().map(BackendId::as_str).collect();
            format!("[{}]", v.join(", "))
        };
        format!(
            "added {}, removed {}, restarted {}, lists {}, policy {}, announced [{}]",
            names(&self.added),
            names(&self.removed),
            names(&self.changed),
            if self.rules_changed {
                "changed"
            } else {
                "same"
            },
            if policy { "changed" } else { "same" },
            announced.join(", ")
        )
    }
}

/// Reads the config again exactly as `serve` did at start: the process's own command line
/// (flags still override the file), through the checks `validate` runs.
fn load_spec() -> anyhow::Result<ServeSpec> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let matches = crate::cli::Cli::command()
        .try_get_matches_from(argv)
        .context("the command line")?;
    let cli = crate::cli::Cli::from_arg_matches(&matches).context("the command line")?;
    let crate::cli::Command::Serve(args) = cli.command else {
        bail!("only `serve` reloads its configuration");
    };
    let sub = matches.subcommand_matches("serve");
    let given = |id: &str| sub.and_then(|m| m.value_source(id)) == Some(ValueSource::CommandLine);
    crate::config::serve_spec(args, &given)
}

/// Every error of a refused file on its own log line, with its path.
fn report_refusal(e: &anyhow::Error) {
    if let Some(errors) = e.downcast_ref::<crate::config::ConfigErrors>() {
        for one in &errors.errors {
            error!(file = %errors.source_name, "config reload refused: {one}");
        }
    } else {
        error!("config reload refused: {e:#}");
    }
    warn!("the running configuration keeps serving");
}

fn warn_fixed() {
    warn!("settings outside backends, their lists, aggregation and the policy changed: they take effect at the next restart");
}
