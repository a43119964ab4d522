//! Driving a stdio MCP server directly: one process, one pipe each way, every request
//! multiplexed by its id. This is what a gateway's shared backend does too, minus HTTP, so it is
//! the throughput a gateway in front of the same server can at best approach.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

use switchboard_wire::{Message, MessageKind};

use super::payload::Era;

/// Lines queued for the writer. The workers bound the real number in flight; this only lets
/// the writer batch several lines into one write.
const WRITE_QUEUE: usize = 1024;

type Pending = Arc<Mutex<HashMap<u64, Slot>>>;

/// A request id the reader may see an answer for.
#[derive(Debug)]
enum Slot {
    Waiting(oneshot::Sender<Bytes>),
    /// The caller timed out; its late answer is expected and is not a wrong answer.
    Abandoned,
}

#[derive(Debug)]
pub(crate) struct StdioTarget {
    lines: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    /// Responses whose id no request is waiting for: answers to nobody, counted as wrong.
    stray: Arc<AtomicU64>,
    child: Child,
    pid: Option<u32>,
}

/// Removes a call's pending entry if the caller gives up (timeout), so the table stays bounded
/// by the number of workers.
struct Withdraw<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        // Still present means nobody answered before the caller gave up.
        if let Some(slot) = lock(self.pending).get_mut(&self.id) {
            *slot = Slot::Abandoned;
        }
    }
}

fn lock(p: &Pending) -> parking_lot::MutexGuard<'_, HashMap<u64, Slot>> {
    p.lock()
}

impl StdioTarget {
    /// Spawns `command` and, for Legacy, performs the handshake once.
    pub(crate) async fn spawn(
        command: &[String],
        era: Era,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let (program, args) = command.split_first().context("--stdio needs a command")?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawning {program}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("the child's pipes are missing");
        };
        let (lines, rx) = mpsc::channel(WRITE_QUEUE);
        let pending: Pending = Arc::default();
        let stray = Arc::new(AtomicU64::new(0));
        tokio::spawn(write_loop(stdin, rx));
        tokio::spawn(read_loop(stdout, pending.clone(), stray.clone()));
        let target = StdioTarget {
            lines,
            pending,
            stray,
            pid: child.id(),
            child,
        };
        if era == Era::Legacy {
            let init = format!(
                r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{}","capabilities":{{}},"clientInfo":{{"name":"switchboard-bench","version":"{}"}}}}}}"#,
                era.version(),
                env!("CARGO_PKG_VERSION")
            );
            let answer = tokio::time::timeout(timeout, target.call(0, init.into_bytes()))
                .await
                .context("initialize timed out")?
                .map_err(|kind| anyhow::anyhow!("initialize failed: {kind}"))?;
            let ok = Message::parse(&answer).is_ok_and(|m| m.result.is_some());
            if !ok {
                bail!("initialize failed: {}", String::from_utf8_lossy(&answer));
            }
            let done = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec();
            target
                .lines
                .send(done)
                .await
                .map_err(|_| anyhow::anyhow!("the server closed its stdin"))?;
        }
        Ok(target)
    }

    /// The server's process id (for CPU accounting).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Answers that matched no waiting request so far.
    pub(crate) fn stray(&self) -> u64 {
        self.stray.load(Ordering::Relaxed)
    }

    /// Sends `body` (whose id is `id`) and waits for the response carrying that id.
    pub(crate) async fn call(&self, id: u64, body: Vec<u8>) -> Result<Bytes, String> {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, Slot::Waiting(tx));
        let _withdraw = Withdraw {
            pending: &self.pending,
            id,
        };
        if self.lines.send(body).await.is_err() {
            return Err("backend_closed".into());
        }
        rx.await.map_err(|_| "backend_closed".to_owned())
    }

    /// Closes the server's stdin (the spec's shutdown signal), then kills it if it lingers.
    pub(crate) async fn shutdown(self) {
        let StdioTarget {
            lines, mut child, ..
        } = self;
        drop(lines);
        if tokio::time::timeout(Duration::from_secs(2), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }
}

async fn write_loop(stdin: ChildStdin, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut out = BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(mut line) = rx.recv().await {
        line.push(b'\n');
        if out.write_all(&line).await.is_err() {
            return;
        }
        // Flush only when nothing else is queued: under load many lines share one write(2).
        if rx.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.shutdown().await;
}

async fn read_loop(stdout: ChildStdout, pending: Pending, stray: Arc<AtomicU64>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::with_capacity(1024);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(msg) = Message::parse(&line) else {
            continue;
        };
        if msg.kind != MessageKind::Response {
            // Notifications are not answers; a server request (ping, sampling) gets nothing
            // from a load driver, which is what a client without those capabilities does.
            continue;
        }
        let id = msg
            .id
            .as_ref()
            .and_then(|i| i.as_json().parse::<u64>().ok());
        let waiter = id.and_then(|id| lock(&pending).remove(&id));
        match waiter {
            Some(Slot::Abandoned) => {}
            Some(Slot::Waiting(tx)) => {
                let end = line.len() - usize::from(line.ends_with(b"\n"));
                let _ = tx.send(Bytes::copy_from_slice(&line[..end]));
            }
            None => {
                stray.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    // The server is gone: every waiter gets "backend_closed" instead of hanging.
    lock(&pending).clear();
}
