//! Warm partitions: per-session mode's backend processes for Modern requests.
//!
//! A Modern client keeps no session, but a Legacy-only backend keeps state per connection
//! (what a tool call changed, its subscriptions, tools it registers for the client's
//! capabilities). Starting a process per call loses all of it and costs a spawn and a
//! handshake each time. So Modern requests of one principal run on a process kept for that
//! principal and the capability set its requests declare (`Key`): the backend's
//! `initialize` carries exactly those capabilities, like a Legacy client's would.
//!
//! - Gateway-held backend state keyed by the authenticated principal, never by anything the
//!   client names: no session id is read, the session store is not touched (invariant 4).
//!   Anonymous callers are one principal and share their partitions.
//! - Bounded: at most one per (principal, capability set), so eight per principal, and the
//!   pool size (min(128, `--max-sessions`)) in all; idle ones (`--partition-idle`) are reaped,
//!   all are stopped on shutdown; a dead one is replaced on next use (its in-flight calls
//!   were already answered 502 by the upstream pending table).
//! - Attribution: a partition runs at most one *input-capable* call (a `tools/call`,
//!   `prompts/get` or `resources/read` declaring sampling, elicitation or roots) at a time,
//!   running or parked ([`Lease`]): every server request it makes while that call is open is
//!   that call's, and becomes an `input_required` round exactly as on a dedicated process. A
//!   second such call meanwhile is the ambiguous case and gets a dedicated process. Requests
//!   that cannot ask for input (lists, calls declaring nothing) run concurrently; a server
//!   request with no lease open is refused to the backend (-32601, as in shared mode).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{mpsc, OnceCell, OwnedSemaphorePermit, Semaphore};

use switchboard_upstream::{Upstream, UpstreamOwner};
use switchboard_wire::classify::META_CLIENT_CAPABILITIES;
use switchboard_wire::{encode_notification, method, Message};

use super::sink::{Asked, CallSink};
use super::{AskedSlot, Calls, Plain, GRACE};
use crate::modern_listen::{Filter, ModernListeners};
use crate::reaper::Background;
use crate::route::RouteKey;
use crate::Answer;
use crate::{CoreError, Principal};

/// The input capabilities a Modern request can declare, as bits of a [`Key`].
const CAPABILITIES: [&str; 3] = ["sampling", "elicitation", "roots"];

/// Which partition a request belongs to: whose, of which backend, declaring what.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    principal: String,
    backend: crate::BackendId,
    caps: u8,
}

impl Key {
    pub(crate) fn of(caller: &Principal, msg: &Message<'_>, backend: &crate::BackendId) -> Key {
        let declared: Value = msg
            .meta(META_CLIENT_CAPABILITIES)
            .and_then(|c| serde_json::from_str(c.get()).ok())
            .unwrap_or(Value::Null);
        let mut caps = 0;
        for (bit, cap) in CAPABILITIES.iter().enumerate() {
            if declared.get(cap).is_some_and(|v| !v.is_null()) {
                caps |= 1 << bit;
            }
        }
        Key {
            principal: caller.key(),
            backend: backend.clone(),
            caps,
        }
    }

    /// Whether a call in this partition may be asked for input.
    pub(crate) fn input_capable(&self) -> bool {
        self.caps != 0
    }

    /// The `capabilities` of the partition's `initialize` (empty objects: the Modern
    /// declaration's sub-options are per request, the handshake only needs the families).
    fn capabilities(&self) -> Value {
        let mut caps = serde_json::Map::new();
        for (bit, cap) in CAPABILITIES.iter().enumerate() {
            if self.caps & (1 << bit) != 0 {
                caps.insert((*cap).to_owned(), json!({}));
            }
        }
        Value::Object(caps)
    }
}

/// One warm backend process.
#[derive(Debug)]
pub(crate) struct Partition {
    pub(crate) handle: Upstream,
    process: parking_lot::Mutex<Option<UpstreamOwner>>,
    /// Where the backend's requests for input go: the leased call's channel, or nowhere.
    asked: AskedSlot,
    pub(crate) log: Arc<parking_lot::Mutex<Option<mpsc::Sender<Bytes>>>>,
    /// One permit: the input-capable call running or parked here.
    input: Arc<Semaphore>,
    /// Requests and leases using the partition now; it is idle at zero.
    users: AtomicUsize,
    last_used: parking_lot::Mutex<Instant>,
    /// Its principal's `subscriptions/listen` streams on this process.
    pub(crate) listeners: Arc<ModernListeners>,
    /// Listens per subscribed URI: the process is subscribed while the count is positive.
    subscribed: parking_lot::Mutex<HashMap<String, usize>>,
    /// Its calls that declared no input capability, running now.
    pub(crate) plain: Plain,
    /// Set when a leased call ended without its answer: the backend may still be running that
    /// call's handler, and what it asks next belongs to nobody alive. Such a process is never
    /// leased again (that would hand the abandoned call's requests to the next call); it
    /// leaves the table and dies with its last user.
    retired: AtomicBool,
}

impl Partition {
    fn idle_for(&self, idle: Duration, now: Instant) -> bool {
        self.users.load(Ordering::Acquire) == 0
            && now.saturating_duration_since(*self.last_used.lock()) >= idle
    }

    fn retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    fn take_process(&self) -> Option<UpstreamOwner> {
        self.process.lock().take()
    }
}

/// A request using a partition; the partition is not idle while one exists.
#[derive(Debug)]
pub(crate) struct Use(pub(crate) Arc<Partition>);

impl Use {
    fn new(part: Arc<Partition>) -> Use {
        part.users.fetch_add(1, Ordering::AcqRel);
        Use(part)
    }
}

impl Drop for Use {
    fn drop(&mut self) {
        *self.0.last_used.lock() = Instant::now();
        self.0.users.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The partition's one input-capable call, running or parked. Dropping it closes the call's
/// channel for server requests (later ones are refused) and frees the partition for the next.
#[derive(Debug)]
pub(crate) struct Lease {
    using: Use,
    _input: OwnedSemaphorePermit,
}

impl Lease {
    pub(crate) fn handle(&self) -> Upstream {
        self.using.0.handle.clone()
    }

    pub(crate) fn log(&self) -> Arc<parking_lot::Mutex<Option<mpsc::Sender<Bytes>>>> {
        self.using.0.log.clone()
    }

    pub(crate) fn close(&self) {
        *self.using.0.asked.lock() = None;
    }

    /// The leased call ended without its answer: see [`Partition::retired`].
    pub(crate) fn retire(&self) {
        self.using.0.retired.store(true, Ordering::Release);
    }
}

type Cell = Arc<OnceCell<Arc<Partition>>>;

/// Every partition, bounded in all; a principal past its share of them may not take the
/// last free ones.
#[derive(Debug)]
pub(crate) struct Partitions {
    cells: parking_lot::Mutex<HashMap<Key, Cell>>,
    max: usize,
    /// Partitions any principal may hold ([`share_of`]) ...
    share: usize,
    /// ... and the free ones only a principal within its share may take ([`reserve_of`]).
    reserve: usize,
    idle: Duration,
}

/// One principal's share of a table of `max` partitions: an eighth, and at least the eight
/// capability sets of one backend (never more than the table).
pub(crate) fn share_of(max: usize) -> usize {
    (max / 8).max(1 << CAPABILITIES.len()).min(max.max(1))
}

/// The free partitions kept for principals within their share: a quarter of the table (and a
/// principal past its share holds at most half of it).
/// Without it, one caller's open listens (each holds a partition per per-session backend)
/// and capability sets could fill the table, and every other caller's Modern requests would
/// be refused; with it, a caller past its share still uses what nobody needs (a lone user,
/// or every anonymous caller, who are one principal, with many per-session backends).
pub(crate) fn reserve_of(max: usize) -> usize {
    max / 4
}

impl Partitions {
    pub(crate) fn new(max: usize, idle: Duration) -> Self {
        Partitions {
            cells: parking_lot::Mutex::new(HashMap::new()),
            max: max.max(1),
            share: share_of(max),
            reserve: reserve_of(max),
            idle,
        }
    }

    /// Live partitions (for `/stats`).
    pub(crate) fn len(&self) -> usize {
        self.cells.lock().len()
    }

    /// Every started partition's listen registry (a policy change judges them again).
    pub(crate) fn listeners(&self) -> Vec<Arc<ModernListeners>> {
        self.cells
            .lock()
            .values()
            .filter_map(|cell| cell.get().map(|p| p.listeners.clone()))
            .collect()
    }

    /// The cell for `key`, made room for by reaping idle partitions: the principal's own
    /// when it is past its share and only the reserve is free; when the table is full, dead
    /// ones and then the one idle the longest.
    fn cell(&self, key: &Key) -> Result<(Cell, Vec<UpstreamOwner>), CoreError> {
        let mut cells = self.cells.lock();
        let mut reaped = Vec::new();
        let mine = |k: &Key| k.principal == key.principal;
        // Past its share, a principal takes free room above the reserve, up to half the
        // table: one principal never holds more than half, and the reserve stays for
        // principals within their shares (several such, together, can still fill it).
        let past_share = |cells: &HashMap<Key, Cell>| {
            let held = cells.keys().filter(|k| mine(k)).count();
            held >= self.share && (cells.len() + self.reserve >= self.max || held >= self.max / 2)
        };
        if !cells.contains_key(key) {
            if past_share(&cells) {
                reaped = sweep(&mut cells, Duration::ZERO, mine);
                if past_share(&cells) {
                    return Err(CoreError::PartitionShare(self.share));
                }
            }
            if cells.len() >= self.max {
                // Dead, retired and abandoned ones first (nobody loses anything), then the one
                // idle the longest: not every idle one of every principal, whose backend
                // state partitions exist to keep.
                reaped.extend(sweep(&mut cells, Duration::MAX, |_| true));
                if cells.len() >= self.max {
                    reaped.extend(evict_least_recent(&mut cells));
                }
                if cells.len() >= self.max {
                    return Err(CoreError::TooManyPartitions(self.max));
                }
            }
        }
        let cell = cells.entry(key.clone()).or_default().clone();
        Ok((cell, reaped))
    }

    /// Forgets `cell` if it is still `key`'s (it failed to start, or its process died).
    fn forget(&self, key: &Key, cell: &Cell) -> Option<UpstreamOwner> {
        let mut cells = self.cells.lock();
        if cells.get(key).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            cells.remove(key);
        }
        cell.get().and_then(|p| p.take_process())
    }

    /// Forgets a retired partition's cell, leaving its process to its remaining users (it is
    /// stopped when the last one lets go of it).
    fn forget_retired(&self, key: &Key, cell: &Cell) {
        let mut cells = self.cells.lock();
        if cells.get(key).is_some_and(|c| Arc::ptr_eq(c, cell)) {
            cells.remove(key);
        }
    }

    /// Removes idle partitions (and ones whose process died); their processes to stop.
    pub(crate) fn reap(&self) -> Vec<UpstreamOwner> {
        sweep(&mut self.cells.lock(), self.idle, |_| true)
    }

    /// Removes every partition (gateway shutdown).
    pub(crate) fn drain(&self) -> Vec<UpstreamOwner> {
        self.cells
            .lock()
            .drain()
            .filter_map(|(_, c)| c.get().and_then(|p| p.take_process()))
            .collect()
    }
}

/// Removes the partition idle the longest (no request using or starting it); its process to
/// stop.
fn evict_least_recent(cells: &mut HashMap<Key, Cell>) -> Option<UpstreamOwner> {
    let oldest = (cells.iter())
        .filter(|(_, cell)| Arc::strong_count(cell) == 1)
        .filter_map(|(key, cell)| Some((key, cell.get()?)))
        .filter(|(_, part)| part.users.load(Ordering::Acquire) == 0)
        .min_by_key(|(_, part)| *part.last_used.lock())
        .map(|(key, _)| key.clone())?;
    let cell = cells.remove(&oldest)?;
    cell.get().and_then(|p| p.take_process())
}

/// Removes the idle partitions (and ones whose process died) among those `of` picks; their
/// processes to stop.
fn sweep(
    cells: &mut HashMap<Key, Cell>,
    idle: Duration,
    of: impl Fn(&Key) -> bool,
) -> Vec<UpstreamOwner> {
    let now = Instant::now();
    let mut stopped = Vec::new();
    cells.retain(|key, cell| {
        if !of(key) {
            return true;
        }
        // A request between `cell()` and its `Use` holds a clone of the cell (taken under this
        // lock): its partition is not idle, even though `users` does not count it yet.
        if Arc::strong_count(cell) > 1 {
            return true;
        }
        // Nobody holds it: a start that was abandoned (its request dropped) left it empty.
        let Some(part) = cell.get() else { return false };
        // A retired one leaves the table at once, but its process stays with the requests
        // still using it (it is stopped with the last of them).
        if part.retired() {
            if part.users.load(Ordering::Acquire) == 0 {
                stopped.extend(part.take_process());
            }
            return false;
        }
        if part.handle.is_closed() || part.idle_for(idle, now) {
            stopped.extend(part.take_process());
            return false;
        }
        true
    });
    stopped
}

impl Use {
    /// The partition's input lease for an input-capable call, or `None` when another call
    /// holds it (the ambiguous case: the caller falls back to a dedicated process).
    pub(crate) fn lease(self) -> Option<(Lease, mpsc::Receiver<Asked>)> {
        let using = self;
        if using.0.retired() {
            return None;
        }
        let permit = using.0.input.clone().try_acquire_owned().ok()?;
        // Retired between the check above and the permit (its abandoned holder let go just
        // now): what the process asks next is the abandoned call's, never this one's.
        if using.0.retired() {
            return None;
        }
        let (tx, rx) = mpsc::channel(super::ASKED_QUEUE);
        *using.0.asked.lock() = Some(tx);
        Some((
            Lease {
                using,
                _input: permit,
            },
            rx,
        ))
    }
}

impl Partitions {
    /// Stops idle partitions (called by the reaper), in `background`.
    pub(crate) fn reap_in(&self, background: &Background) {
        stop_in(background, self.reap());
    }

    /// Stops every partition (gateway shutdown; joined with the rest of `background`).
    pub(crate) fn end_in(&self, background: &Background) {
        stop_in(background, self.drain());
    }
}

fn stop_in(background: &Background, processes: Vec<UpstreamOwner>) {
    if processes.is_empty() {
        return;
    }
    background.spawn(async move {
        for p in processes {
            p.shutdown(GRACE).await;
        }
    });
}

impl Calls<'_> {
    /// The caller's partition for `key`, started (and handshaken, on behalf of the caller
    /// whose `credential` it is: the partition is that principal's alone) if needed.
    pub(crate) async fn partition(
        &self,
        key: &Key,
        credential: Option<&switchboard_upstream::Credential>,
    ) -> Result<Use, CoreError> {
        for _ in 0..2 {
            let partitions = &self.bridge.partitions;
            let (cell, reaped) = partitions.cell(key)?;
            stop_in(self.background, reaped);
            let started = cell
                .get_or_try_init(|| self.start_partition(key, credential))
                .await
                .cloned();
            match started {
                Ok(part) if !part.handle.is_closed() && !part.retired() => {
                    return Ok(Use::new(part))
                }
                Ok(part) if part.retired() => partitions.forget_retired(key, &cell),
                // Died since it was last used: replaced by a fresh one.
                Ok(_) => {
                    let dead = partitions.forget(key, &cell);
                    stop_in(self.background, dead.into_iter().collect());
                }
                Err(e) => {
                    partitions.forget(key, &cell);
                    return Err(e);
                }
            }
        }
        Err(CoreError::BackendInit(
            "the backend process exited right after it started".to_owned(),
        ))
    }

    async fn start_partition(
        &self,
        key: &Key,
        credential: Option<&switchboard_upstream::Credential>,
    ) -> Result<Arc<Partition>, CoreError> {
        let spawner = self
            .spawner
            .for_backend(&key.backend)
            .ok_or_else(|| CoreError::Unsupported(method::INITIALIZE.to_owned()))?;
        let asked: AskedSlot = Arc::default();
        let listeners = Arc::new(ModernListeners::default());
        let plain = Plain::new(self.bridge.limits.max_request_time);
        let log = Arc::new(parking_lot::Mutex::new(None));
        let sink = Arc::new(CallSink {
            asked: asked.clone(),
            registry: Arc::downgrade(self.registry),
            log: log.clone(),
            listeners: Some(listeners.clone()),
            plain: Some(plain.clone()),
        });
        let (handle, process) = crate::per_session::spawn_off_runtime(spawner, sink).await?;
        // Dropped on failure: the process is killed with it.
        let part = Arc::new(Partition {
            handle,
            process: parking_lot::Mutex::new(Some(process)),
            asked,
            log,
            input: Arc::new(Semaphore::new(1)),
            users: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            last_used: parking_lot::Mutex::new(Instant::now()),
            listeners,
            subscribed: parking_lot::Mutex::new(HashMap::new()),
            plain,
        });
        let deadline = self.bridge.limits.handshake_timeout;
        crate::backend::handshake(&part.handle, key.capabilities(), None, credential, deadline)
            .await?;
        Ok(part)
    }

    /// `subscriptions/listen` in per-session mode: served from the caller's partition (the
    /// process its calls change), its resource subscriptions made on that process, until the
    /// client closes the stream.
    pub(crate) async fn partition_listen(
        &self,
        caller: &Principal,
        (id, msg): (&switchboard_wire::RequestId, &Message<'_>),
        stream: mpsc::Sender<Bytes>,
        route: &crate::resolve::Route,
    ) -> Result<Answer, CoreError> {
        // The partition is a process of the route's backend: that backend says what it feeds.
        let entry = route.entry(self.backends)?;
        let info = entry.info();
        let using = self
            .partition(
                &Key::of(caller, msg, &route.backend),
                caller.credential.as_ref(),
            )
            .await?;
        let part = using.0.clone();
        let honoured = crate::modern::honoured(info, Filter::parse(msg.params));
        let _guard = part.listeners.register(
            &RouteKey::mint(),
            id,
            honoured.clone(),
            stream.clone(),
            false,
        );
        if self.watched {
            part.listeners.watched_by(&_guard, caller);
        }
        let deadline = self.bridge.limits.request_timeout;
        let mut subs = PartitionSubscriptions {
            background: self.background,
            deadline,
            part: part.clone(),
            uris: Vec::new(),
        };
        for uri in honoured.uris.iter() {
            let first = {
                let mut counts = part.subscribed.lock();
                let n = counts.entry(uri.clone()).or_default();
                *n += 1;
                *n == 1
            };
            subs.uris.push(uri.clone());
            if first {
                // Counted as running: what the backend asks meanwhile is no one call's.
                let running = part.plain.start_other();
                let params = json!({ "uri": uri });
                let sent = crate::backend::call(&part.handle, method::SUBSCRIBE, params, deadline);
                running.ended(sent.await.is_ok());
            }
        }
        acknowledge(&stream, id, &honoured).await;
        // Served until the client closes the stream, which drops this future and the guards.
        stream.closed().await;
        drop(using);
        Err(CoreError::Cancelled)
    }
}

/// Sends a listen's acknowledgement: the subset of what it asked that will be delivered.
pub(crate) async fn acknowledge(
    stream: &mpsc::Sender<Bytes>,
    id: &switchboard_wire::RequestId,
    honoured: &Filter,
) {
    let tag: Value = serde_json::from_str(id.as_json()).unwrap_or(Value::Null);
    let meta = switchboard_wire::classify::META_SUBSCRIPTION_ID;
    let ack = json!({ "_meta": { meta: tag }, "notifications": honoured.to_json() }).to_string();
    if let Ok(ack) = serde_json::value::RawValue::from_string(ack) {
        let note = encode_notification("notifications/subscriptions/acknowledged", Some(&ack));
        let _ = stream.send(Bytes::from(note)).await;
    }
}

/// Releases a partition listen's resource subscriptions when it ends: the last listen of a
/// URI unsubscribes the process (in the background, bounded by the request deadline).
struct PartitionSubscriptions<'a> {
    background: &'a Background,
    /// Each unsubscribe's.
    deadline: Duration,
    part: Arc<Partition>,
    uris: Vec<String>,
}

impl Drop for PartitionSubscriptions<'_> {
    fn drop(&mut self) {
        let mut last = Vec::new();
        {
            let mut counts = self.part.subscribed.lock();
            for uri in self.uris.drain(..) {
                if let Some(n) = counts.get_mut(&uri) {
                    *n -= 1;
                    if *n == 0 {
                        counts.remove(&uri);
                        last.push(uri);
                    }
                }
            }
        }
        if last.is_empty() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let handle = self.part.handle.clone();
        let plain = self.part.plain.clone();
        let deadline = self.deadline;
        self.background.spawn(async move {
            for uri in last {
                let running = plain.start_other();
                let params = json!({ "uri": uri });
                let sent = crate::backend::call(&handle, method::UNSUBSCRIBE, params, deadline);
                running.ended(sent.await.is_ok());
            }
        });
    }
}

#[cfg(test)]
mod tests;
