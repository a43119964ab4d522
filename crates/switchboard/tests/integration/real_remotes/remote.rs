//! A real remote MCP server as a child process: started in its own process group (npx runs the
//! server as a grandchild, so killing the direct child alone would leak it), ready once its TCP
//! port accepts connections, and stopped by killing the whole group.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

/// How long a remote may take to start: npx may first fetch the package from the registry.
const STARTUP_BOUND: Duration = Duration::from_secs(120);

/// The transport a remote serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP at `/mcp`.
    Streamable,
    /// The 2024-11-05 HTTP+SSE transport: `GET /sse`, then POSTs to the endpoint it names.
    Sse,
}

/// A running remote server. Its process group is killed on drop; `stop` also proves it gone.
pub struct Remote {
    child: Child,
    pgid: Pid,
    /// The endpoint a client uses: `…/mcp` (Streamable HTTP) or `…/sse` (HTTP+SSE).
    pub url: String,
    /// From spawn to the port accepting connections.
    pub startup: Duration,
    log: Arc<Mutex<String>>,
}

impl Remote {
    /// `npx -y @modelcontextprotocol/server-everything <streamableHttp|sse>` on a free port
    /// (it takes the port from `PORT` only, so the port is found free, released and passed).
    pub async fn everything(transport: Transport) -> Remote {
        let port = free_port();
        let (mode, path) = match transport {
            Transport::Streamable => ("streamableHttp", "mcp"),
            Transport::Sse => ("sse", "sse"),
        };
        let mut cmd = Command::new("npx");
        cmd.args(["-y", crate::common::SERVER_EVERYTHING, mode])
            .env("PORT", port.to_string());
        let started = Instant::now();
        let (mut remote, stdout) = Remote::spawn(cmd);
        // Drained, not closed: the server logs every request to stdout and a closed pipe
        // would kill it.
        drain(stdout, remote.log.clone());
        remote.url = format!("http://127.0.0.1:{port}/{path}");
        remote.until_accepting(port, started).await;
        remote
    }

    /// `backends/py_http_server.py` with the Python SDK 2.3 venv. It binds port 0 itself and
    /// prints the port, so no other process can take the port between choosing and binding.
    pub async fn python_sdk(python: &str) -> Remote {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/integration/backends/py_http_server.py"
        );
        let mut cmd = Command::new(python);
        cmd.arg(script);
        let started = Instant::now();
        let (mut remote, stdout) = Remote::spawn(cmd);
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(STARTUP_BOUND, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("py_http_server printed no port: {}", remote.log()))
            .unwrap()
            .unwrap_or_else(|| panic!("py_http_server exited: {}", remote.log()));
        let port: u16 = first
            .strip_prefix("listening on ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
        drain(lines.into_inner(), remote.log.clone());
        remote.url = format!("http://127.0.0.1:{port}/mcp");
        remote.until_accepting(port, started).await;
        remote
    }

    /// Spawns `cmd` as the leader of a new process group, its stderr drained into a bounded
    /// log; the caller reads or drains its stdout.
    fn spawn(mut cmd: Command) -> (Remote, tokio::process::ChildStdout) {
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Reaps the direct child; the group kill in `Drop` ends its descendants.
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn remote server");
        let pid = child.id().expect("a running child");
        let pgid = Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        drain(child.stderr.take().unwrap(), log.clone());
        let stdout = child.stdout.take().unwrap();
        let remote = Remote {
            child,
            pgid,
            url: String::new(),
            startup: Duration::ZERO,
            log,
        };
        (remote, stdout)
    }

    /// Polls the port (bounded) until it accepts a connection; fails early if the server exits.
    async fn until_accepting(&mut self, port: u16, started: Instant) {
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                self.startup = started.elapsed();
                eprintln!("remote {} ready in {:?}", self.url, self.startup);
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited ({status}) before listening: {}",
                    self.url,
                    self.log()
                );
            }
            assert!(
                started.elapsed() < STARTUP_BOUND,
                "{} not accepting within {STARTUP_BOUND:?}: {}",
                self.url,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the server wrote to stdout/stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().clone()
    }

    /// Kills the process group and waits (bounded) until no live process is left in it.
    pub async fn stop(self) {
        let pgid = self.pgid;
        let url = self.url.clone();
        drop(self);
        let deadline = Instant::now() + Duration::from_secs(10);
        while group_alive(pgid) {
            assert!(
                Instant::now() < deadline,
                "{url}: its processes outlived the kill"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // ESRCH (already gone) is fine.
        let _ = kill_process_group(self.pgid, Signal::KILL);
    }
}

/// A port that was free on 127.0.0.1 a moment ago (bound to port 0, read, released).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Copies `from` into `log` line by line (bounded) until it closes.
fn drain(from: impl AsyncRead + Unpin + Send + 'static, log: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(from).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = log.lock();
            if log.len() < 1024 * 1024 {
                log.push_str(&line);
                log.push('\n');
            }
        }
    });
}

/// Whether any process of group `pgid` is still alive (zombies count as gone: the container's
/// init may not reap the reparented grandchildren promptly).
fn group_alive(pgid: Pid) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.filter_map(Result::ok).any(|entry| {
        std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                // After "pid (comm) ": state, ppid, pgrp.
                let rest = stat.rsplit_once(") ")?.1.to_owned();
                let mut fields = rest.split(' ');
                let state = fields.next()?.to_owned();
                let pgrp: i32 = fields.nth(1)?.parse().ok()?;
                Some(pgrp == pgid.as_raw_nonzero().get() && state != "Z")
            })
            .unwrap_or(false)
    })
}
