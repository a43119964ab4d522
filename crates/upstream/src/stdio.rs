//! A stdio MCP server process, multiplexed by key.
//!
//! Tasks, each with one job and one owner:
//! - **writer** owns the child's stdin; a bounded queue feeds it, so a backend that stops
//!   reading applies backpressure instead of growing memory. Cancelling it closes stdin.
//! - **reader** owns stdout: frames lines, resolves responses through the pending table, and
//!   hands everything else (notifications, backend requests) to `core` on a bounded channel.
//! - **stderr** drains stderr into the log (a full stderr pipe would block the child), a
//!   burst cut to its first lines and a count (`stderr`).
//! - **waiter** owns the `Child`: it reaps it and publishes how it ended (so the reader can
//!   fail pending calls with "backend exited with status 3" rather than a bare "closed"), and
//!   kills it when asked. [`StdioProcess`] is the one thing that can ask, and owns the
//!   shutdown sequence; dropping it kills the process.
//!
//! The pending table is the one piece of shared state: a `parking_lot` mutex held only for a
//! map operation, never across `.await`. When stdout ends, the table is closed and every pending
//! call fails at once, so nothing waits for a dead process.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::value::RawValue;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use switchboard_wire::{Message, MessageKind};

use crate::answer::{Reply, Withdraw};
use crate::framing::{Frame, LineReader};
use crate::{BackendResponse, Exit, InboundSink, PendingCall, Upstream, UpstreamError};

/// How long the reader waits, once stdout has ended, for the process's exit status before it
/// fails the pending calls without one (a process may close stdout and keep running).
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(1);

/// How to start and bound a stdio backend.
#[derive(Debug, Clone)]
pub struct StdioConfig {
    /// Program to run.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to (or replacing in) the environment it inherits.
    pub env: Vec<(String, String)>,
    /// The gateway's own secrets among what it would inherit (the store password, the
    /// replicas' secret): removed, so no backend — a third-party server — ever sees them.
    /// One its `env` sets explicitly is the operator's choice and is passed.
    pub withheld: Vec<String>,
    /// Its working directory; `None`: the gateway's.
    pub cwd: Option<std::path::PathBuf>,
    /// Longest stdout line accepted; longer lines are logged and skipped, so a runaway backend
    /// cannot make the gateway buffer without bound.
    pub max_line_bytes: usize,
    /// Capacity of the queue of lines waiting to be written to stdin.
    pub write_queue: usize,
    /// Run it inside a sandbox ([`crate::sandbox`]); `None`: as the gateway's own child.
    pub sandbox: Option<std::sync::Arc<crate::sandbox::Sandbox>>,
    /// Sandboxed, each process gets a home of its own instead of the backend's: a bounded
    /// tmpfs inside its sandbox, seeded with a copy of the backend's home, gone with the
    /// process ([`crate::sandbox`]). For the processes that serve one caller (per-session,
    /// partitions, MRTR), and a per-session backend's shared process (the others start from
    /// the backend's home: no process serving callers may write it).
    pub private_home: bool,
    /// Every sandboxed backend's home, shared by the gateway's backends: the others' are
    /// hidden in this one's sandbox ([`crate::sandbox::Homes`]).
    pub homes: crate::sandbox::Homes,
}

impl StdioConfig {
    /// Default line limit: large enough for big tool results, small enough to bound memory.
    pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

    /// A config with default limits.
    pub fn new(program: impl Into<String>, args: Vec<String>) -> Self {
        StdioConfig {
            program: program.into(),
            args,
            env: Vec::new(),
            withheld: Vec::new(),
            cwd: None,
            max_line_bytes: Self::DEFAULT_MAX_LINE_BYTES,
            write_queue: 1024,
            sandbox: None,
            private_home: false,
            homes: crate::sandbox::Homes::default(),
        }
    }
}

mod pending;
mod stderr;
use pending::{Pending, PendingTable};
use stderr::stderr_loop;

/// Lines of stderr kept for error reports (a backend that dies at startup says why there).
const STDERR_TAIL: usize = 20;

#[derive(Debug)]
struct Shared {
    program: String,
    pid: Option<u32>,
    writer: mpsc::Sender<Bytes>,
    pending: Mutex<PendingTable>,
    /// Set once its pending table closed (stdout ended, or it was shut down): read without
    /// the table's lock by [`StdioHandle::is_closed`].
    ended: std::sync::atomic::AtomicBool,
    stderr_tail: Mutex<std::collections::VecDeque<String>>,
}

/// Cloneable API to a stdio backend. A handle names a *slot*: when the supervisor restarts a
/// crashed backend it installs the new process in the same slot ([`StdioHandle::adopt`]), so
/// every holder of the handle reaches the new process, and calls issued to the old one have
/// already failed.
#[derive(Debug, Clone)]
pub struct StdioHandle {
    slot: Arc<parking_lot::RwLock<Arc<Shared>>>,
}

/// Owner of the child process; the only thing that can stop it. Dropping it kills the
/// process.
#[derive(Debug)]
pub struct StdioProcess {
    stop_writer: CancellationToken,
    /// Tells the waiter to kill the process.
    kill: CancellationToken,
    /// How the process ended, once it has.
    exit: watch::Receiver<Option<Exit>>,
    shared: Arc<Shared>,
}

impl Drop for StdioProcess {
    fn drop(&mut self) {
        self.kill.cancel();
    }
}

/// Starts `config.program`; its unsolicited messages go to `sink`. Returns the call handle and
/// the owner of the process.
pub fn spawn(
    config: &StdioConfig,
    sink: Arc<dyn InboundSink>,
) -> Result<(StdioHandle, StdioProcess), UpstreamError> {
    let spawn_err = |e: std::io::Error| UpstreamError::Spawn {
        program: config.program.clone(),
        reason: e.to_string(),
    };
    let mut command = crate::launch::command(config).map_err(spawn_err)?;
    let mut child = command.spawn().map_err(spawn_err)?;
    let pid = child.id();
    let missing = || spawn_err(std::io::Error::other("stdio pipe missing"));
    let stdin = child.stdin.take().ok_or_else(missing)?;
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;

    let (write_tx, write_rx) = mpsc::channel(config.write_queue.max(1));
    let shared = Arc::new(Shared {
        program: config.program.clone(),
        pid,
        writer: write_tx,
        pending: Mutex::new(PendingTable::default()),
        ended: std::sync::atomic::AtomicBool::new(false),
        stderr_tail: Mutex::new(std::collections::VecDeque::new()),
    });
    let stop_writer = CancellationToken::new();
    let kill = CancellationToken::new();
    let (exit_tx, exit) = watch::channel(None);
    tokio::spawn(wait_loop(child, kill.clone(), exit_tx));
    tokio::spawn(write_loop(stdin, write_rx, stop_writer.clone()));
    tokio::spawn(read_loop(
        LineReader::new(stdout, config.max_line_bytes),
        shared.clone(),
        sink,
        exit.clone(),
    ));
    tokio::spawn(stderr_loop(stderr, shared.clone()));
    info!(program = %config.program, pid = ?shared.pid, "backend started");
    let handle = StdioHandle::pinned(shared.clone());
    Ok((
        handle,
        StdioProcess {
            stop_writer,
            kill,
            exit,
            shared,
        },
    ))
}

impl StdioHandle {
    fn pinned(shared: Arc<Shared>) -> Self {
        StdioHandle {
            slot: Arc::new(parking_lot::RwLock::new(shared)),
        }
    }

    fn shared(&self) -> Arc<Shared> {
        self.slot.read().clone()
    }

    /// Installs the process behind `standby` (a freshly spawned, already initialized backend)
    /// in this handle's slot: from now on every holder of this handle reaches it.
    pub fn adopt(&self, standby: &StdioHandle) {
        let next = standby.shared();
        *self.slot.write() = next;
    }

    /// The last lines the backend wrote to stderr.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.shared().stderr_tail.lock().iter().cloned().collect()
    }

    /// Sends one request line whose JSON-RPC id is the string `key`, and returns the future of
    /// its one answer. Dropping the future forgets the key, so an abandoned call leaves nothing
    /// behind; a late answer for it is then dropped as unattributable.
    pub async fn call(&self, key: &str, line: Vec<u8>) -> Result<PendingCall, UpstreamError> {
        let (tx, rx) = oneshot::channel();
        // One process for the whole call, even if a restart swaps the slot meanwhile.
        let shared = self.shared();
        let permit = shared.writer.reserve().await.map_err(|_| stdin_closed())?;
        {
            let mut table = shared.pending.lock();
            if let Some(closed) = &table.closed {
                return Err(closed.clone());
            }
            if table.calls.contains_key(key) {
                return Err(UpstreamError::DuplicateKey);
            }
            let seq = table.next_seq();
            table.calls.insert(key.into(), Pending { reply: tx, seq });
            // Queued under the lock, so the line's number is its place in the queue.
            permit.send(Bytes::from(line));
        }
        let withdraw = Withdrawal {
            key: key.into(),
            shared: shared.clone(),
        };
        Ok(PendingCall::new(rx, Withdraw::Stdio(withdraw)))
    }

    /// Writes one line (a notification, or the gateway's answer to a backend request).
    pub async fn send_line(&self, line: Vec<u8>) -> Result<(), UpstreamError> {
        let shared = self.shared();
        let permit = shared.writer.reserve().await.map_err(|_| stdin_closed())?;
        shared.queue(permit, line);
        Ok(())
    }

    /// Like [`send_line`](Self::send_line) but never waits: used from drop paths and the
    /// dispatcher, which must not block on a slow backend.
    pub fn try_send_line(&self, line: Vec<u8>) -> Result<(), UpstreamError> {
        let shared = self.shared();
        let permit = shared.writer.try_reserve().map_err(|e| match e {
            mpsc::error::TrySendError::Full(()) => UpstreamError::Overloaded,
            mpsc::error::TrySendError::Closed(()) => stdin_closed(),
        })?;
        shared.queue(permit, line);
        Ok(())
    }

    /// Number of calls awaiting an answer (for tests and metrics).
    pub fn pending_len(&self) -> usize {
        self.shared().pending.lock().calls.len()
    }

    /// Whether a call under `key` awaits its answer from this process (where a cancellation
    /// of it must go).
    pub fn holds(&self, key: &str) -> bool {
        self.shared().pending.lock().calls.contains_key(key)
    }

    /// Whether the process this handle reaches now has ended (its stdout closed, or it was
    /// shut down): after a restart, the new one's, whatever the old one's reader reports
    /// late. Takes the slot's read lock, no other.
    pub fn is_closed(&self) -> bool {
        (self.slot.read().ended).load(std::sync::atomic::Ordering::Acquire)
    }

    /// The backend's process id.
    pub fn pid(&self) -> Option<u32> {
        self.shared().pid
    }

    /// The backend's program name, for messages.
    pub fn program(&self) -> String {
        self.shared().program.clone()
    }
}

fn stdin_closed() -> UpstreamError {
    UpstreamError::Closed("stdin closed".into())
}

impl Shared {
    /// Queues a line that expects no answer, numbered like every other line.
    fn queue(&self, permit: mpsc::Permit<'_, Bytes>, line: Vec<u8>) {
        let mut table = self.pending.lock();
        table.next_seq();
        permit.send(Bytes::from(line));
    }
}

/// Forgets one abandoned call's key in its process's pending table.
#[derive(Debug)]
pub(crate) struct Withdrawal {
    key: Box<str>,
    shared: Arc<Shared>,
}

impl Withdrawal {
    pub(crate) fn run(self) {
        self.shared.pending.lock().calls.remove(&self.key);
    }
}

impl StdioProcess {
    /// Closes stdin now: the polite request to exit, for a process whose [`shutdown`] may
    /// have to wait its turn. Idempotent.
    ///
    /// [`shutdown`]: Self::shutdown
    pub fn close_stdin(&self) {
        self.stop_writer.cancel();
    }

    /// Closes stdin, waits up to `grace` for the process to exit, then kills it: a stop the
    /// gateway asked for (shutdown, a backend leaving the set), logged as such.
    pub async fn shutdown(mut self, grace: Duration) {
        self.stop_writer.cancel();
        match tokio::time::timeout(grace, self.wait()).await {
            Ok(Ok(exit)) => info!("backend stopped as the gateway asked: {exit}"),
            Ok(Err(e)) => warn!(error = %e, "waiting for backend failed"),
            Err(_) => {
                warn!(
                    ?grace,
                    "backend did not exit after stdin closed; killing it"
                );
                self.kill.cancel();
                // Bounded: a kill is reaped at once, but this path must end regardless.
                let _ = tokio::time::timeout(Duration::from_secs(1), self.wait()).await;
            }
        }
        close_pending(
            &self.shared,
            UpstreamError::Closed("gateway shut down".into()),
        );
    }

    /// How the process ended, if it has.
    pub fn ended(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    /// Resolves when the process has ended, with how it ended.
    pub async fn wait(&mut self) -> std::io::Result<Exit> {
        match self.exit.wait_for(Option::is_some).await {
            Ok(exit) => (*exit).ok_or_else(|| std::io::Error::other("no exit status")),
            Err(_) => Err(std::io::Error::other("waiting for the backend failed")),
        }
    }
}

/// Reaps the child (and kills it first when told to), then publishes how it ended. Dropped
/// with the runtime, the `Child` is killed (`kill_on_drop`).
async fn wait_loop(mut child: Child, kill: CancellationToken, exit: watch::Sender<Option<Exit>>) {
    let leader = child.id();
    let status = tokio::select! {
        status = child.wait() => status,
        () = kill.cancelled() => match child.kill().await {
            Ok(()) => child.wait().await,
            Err(e) => Err(e),
        },
    };
    // The whole backend goes with its process: what it started would otherwise outlive it.
    if let Some(leader) = leader {
        crate::orphan::kill_group(leader);
    }
    match status {
        Ok(status) => {
            exit.send_replace(Some(Exit(status)));
        }
        Err(e) => warn!(error = %e, "waiting for backend failed"),
    }
}

async fn write_loop(stdin: ChildStdin, mut rx: mpsc::Receiver<Bytes>, stop: CancellationToken) {
    let mut out = BufWriter::with_capacity(64 * 1024, stdin);
    loop {
        let line = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            line = rx.recv() => match line { Some(l) => l, None => break },
        };
        if let Err(e) = write_line(&mut out, &line).await {
            warn!(error = %e, "writing to backend stdin failed");
            return;
        }
        // Under load, requests arrive from many connection tasks at once. Yielding once lets
        // the ones already runnable queue their lines, so a single write carries the batch:
        // fewer syscalls here, and far fewer reads (and wake-ups) in the backend. Idle, the
        // yield returns at once.
        if rx.is_empty() {
            tokio::task::yield_now().await;
        }
        while let Ok(line) = rx.try_recv() {
            if let Err(e) = write_line(&mut out, &line).await {
                warn!(error = %e, "writing to backend stdin failed");
                return;
            }
        }
        if let Err(e) = out.flush().await {
            warn!(error = %e, "flushing backend stdin failed");
            return;
        }
    }
    // Dropping the writer closes stdin: the polite way to ask a stdio server to exit.
    let _ = out.shutdown().await;
}

async fn write_line(out: &mut BufWriter<ChildStdin>, line: &[u8]) -> std::io::Result<()> {
    out.write_all(line).await?;
    out.write_all(b"\n").await
}

async fn read_loop(
    mut lines: LineReader<ChildStdout>,
    shared: Arc<Shared>,
    sink: Arc<dyn InboundSink>,
    mut exit: watch::Receiver<Option<Exit>>,
) {
    // Pinned to this process: answers to its requests must go to it, not to a successor.
    let handle = Upstream::Stdio(StdioHandle::pinned(shared.clone()));
    let reason = loop {
        match lines.next().await {
            Ok(Some(Frame::Line(line))) => route_line(&handle, &shared, sink.as_ref(), line),
            Ok(Some(Frame::TooLong(n))) => {
                warn!(bytes = n, "backend wrote a line over the limit; skipped")
            }
            Ok(None) => break "backend closed stdout".to_owned(),
            Err(e) => break format!("reading backend stdout failed: {e}"),
        }
    };
    // Stdout ending usually means the process is ending: wait (bounded) for how, so the
    // pending calls, the log and the session's end can say it.
    let ended = tokio::time::timeout(EXIT_STATUS_WAIT, exit.wait_for(Option::is_some)).await;
    let error = match ended.ok().and_then(|r| r.ok().and_then(|e| *e)) {
        Some(exit) => UpstreamError::Exited(exit),
        None => UpstreamError::Closed(reason),
    };
    let reason = error.to_string();
    info!(program = %shared.program, pid = ?shared.pid, "{reason}");
    close_pending(&shared, error);
    sink.closed(&reason);
}

fn route_line(handle: &Upstream, shared: &Shared, sink: &dyn InboundSink, line: Bytes) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let msg = match Message::parse(&line) {
        Ok(m) => m,
        Err(e) => {
            // One with a call's id (a malformed answer, or one holding a key the gateway does
            // not read): that call gets an error now rather than at its deadline.
            let key = e.id.as_ref().and_then(|id| id.as_str());
            if let Some(reply) = key.and_then(|k| shared.pending.lock().answer(k.as_str())) {
                warn!(error = ?e.error.message, "backend answered with a message that is not read; the call gets an error");
                answer_unreadable(reply);
                return;
            }
            match switchboard_wire::null_id_error(&line) {
                Some(error) => route_unparsed(shared, &line, error),
                None => warn!(
                    error = ?e.error.message,
                    "backend wrote a line that is not JSON-RPC; skipped"
                ),
            }
            return;
        }
    };
    if msg.kind != MessageKind::Response {
        crate::handle::deliver_contained(sink, &line, &msg, handle);
        return;
    }
    let Some(key) = msg.id.as_ref().and_then(|id| id.as_str()) else {
        debug!(id = ?msg.id, "backend response with a non-string id; dropped");
        return;
    };
    let Some(reply) = shared.pending.lock().answer(key.as_str()) else {
        debug!(%key, "backend response for no pending call; dropped");
        return;
    };
    let (payload, is_error) = match (msg.result, msg.error) {
        (Some(r), _) => (r, false),
        (None, Some(e)) => (e, true),
        (None, None) => return,
    };
    resolve(reply, &line, payload, is_error);
}

fn resolve(reply: Reply, line: &Bytes, payload: &RawValue, is_error: bool) {
    let start = payload.get().as_ptr() as usize - line.as_ptr() as usize;
    let response = BackendResponse::new(line.clone(), start..start + payload.get().len(), is_error);
    // The caller may have gone; its answer then goes nowhere, by design.
    let _ = reply.send(Ok(response));
}

/// What the one certain call gets when the backend could not parse its line.
/// (`"id": 0`, a placeholder: the payload is what is used, and the line must parse to find
/// it; `null` did not, so the backend's own error went out instead.)
const UNPARSED_ANSWER: &str = r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32700,"message":"Parse error: the backend could not parse the request"}}"#;

/// What a call gets when its answer could not be read (the gateway's words only).
const UNREADABLE_ANSWER: &str = r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"Internal error: the backend's answer could not be read"}}"#;

fn answer_unreadable(reply: Reply) {
    let own = Bytes::from_static(UNREADABLE_ANSWER.as_bytes());
    match own_error(&own) {
        Some(payload) => resolve(reply, &own, payload, true),
        // Unreachable (the constant parses); the call still gets an answer.
        None => {
            let _ = reply.send(Err(UpstreamError::Closed("unreadable answer".into())));
        }
    }
}

/// The `error` member of [`UNPARSED_ANSWER`], borrowed from `line`.
fn own_error(line: &Bytes) -> Option<&RawValue> {
    let msg = switchboard_wire::Message::parse(line).ok()?;
    msg.error
}

/// A backend's error with `"id": null`: it could not parse a line. The call whose line that
/// certainly was gets the error as its answer (see [`PendingTable::sole_candidate`]); when
/// it could be any of several lines, it goes to nobody and those calls keep their deadlines.
fn route_unparsed(shared: &Shared, line: &Bytes, error: &RawValue) {
    let reply = {
        let mut table = shared.pending.lock();
        table.sole_candidate().and_then(|key| table.answer(&key))
    };
    match reply {
        // The gateway's own words, not the backend's: its message or data might quote a line
        // that, were the ordering assumption ever wrong, is another caller's.
        Some(reply) => {
            let own = Bytes::from_static(UNPARSED_ANSWER.as_bytes());
            let payload = own_error(&own);
            match payload {
                Some(payload) => resolve(reply, &own, payload, true),
                None => resolve(reply, line, error, true),
            }
        }
        None => warn!(
            // Only the code: the message may quote the line, which may be anyone's.
            code = ?switchboard_wire::object_member(error, "code").map(RawValue::get),
            "backend could not parse a line and the line is not certainly one call's; \
             the calls in flight keep their deadlines"
        ),
    }
}

fn close_pending(shared: &Shared, error: UpstreamError) {
    let (calls, error) = {
        let mut table = shared.pending.lock();
        let error = table.closed.get_or_insert(error).clone();
        (shared.ended).store(true, std::sync::atomic::Ordering::Release);
        (std::mem::take(&mut table.calls), error)
    };
    for (_, call) in calls {
        let _ = call.reply.send(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests;
