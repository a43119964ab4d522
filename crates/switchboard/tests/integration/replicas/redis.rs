//! A real `redis-server` (Debian's package) that the test starts on a free loopback port and
//! owns: tests never touch a Redis they did not start. Nothing is persisted (`--save ""
//! --appendonly no`), so a restart comes back empty, as a crashed cache without persistence
//! would.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

pub const REDIS_SERVER: &str = "/usr/bin/redis-server";

/// Makes a missing `redis-server` a failure, not a skip (for CI, which installs it; the same
/// policy as `SWITCHBOARD_UI_TESTS` for the status page).
const REQUIRE: &str = "SWITCHBOARD_REDIS_TESTS";

/// How long a fresh `redis-server` may take to answer PING.
const READY: Duration = Duration::from_secs(10);

pub struct Redis {
    /// None while killed.
    child: Option<Child>,
    port: u16,
}

impl Redis {
    /// A started Redis, or None (after a loud skip line) when `redis-server` is absent and
    /// `SWITCHBOARD_REDIS_TESTS` is unset. With the variable set, absence fails the test.
    pub async fn start_or_skip(test: &str) -> Option<Self> {
        if !Path::new(REDIS_SERVER).exists() && std::env::var_os(REQUIRE).is_none() {
            eprintln!(
                "*** REDIS TEST {test} SKIPPED: {REDIS_SERVER} is not installed \
                 (apt-get install redis-server; set {REQUIRE}=1 to require it) ***"
            );
            return None;
        }
        Some(Self::start().await)
    }

    /// Starts `redis-server` on a free port; fails the test if it is not installed.
    pub async fn start() -> Self {
        assert!(
            Path::new(REDIS_SERVER).exists(),
            "{REDIS_SERVER} is missing: install Debian's redis-server package \
             (apt-get install redis-server); {REQUIRE} requires these tests to run"
        );
        // The port is free when probed but another process may take it before Redis binds:
        // Redis then exits, and a few fresh ports make that race harmless.
        for _ in 0..5 {
            let port = free_port();
            if let Some(child) = spawn(port).await {
                return Redis {
                    child: Some(child),
                    port,
                };
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGKILL (no shutdown, no goodbye to clients) and reap.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.expect("kill redis-server");
        }
    }

    /// Kills it if running and starts a fresh one on the same port.
    pub async fn restart(&mut self) {
        self.kill().await;
        let child = spawn(self.port).await;
        self.child = Some(
            child.unwrap_or_else(|| panic!("redis-server did not come back on port {}", self.port)),
        );
    }

    /// Whether it answers PING now (one bounded attempt).
    pub async fn ping(&self) -> bool {
        command(self.port, "*1\r\n$4\r\nPING\r\n")
            .await
            .is_some_and(|r| r.starts_with("+PONG"))
    }

    /// How many keys it holds (`DBSIZE`); panics if it does not answer.
    pub async fn dbsize(&self) -> u64 {
        let r = command(self.port, "*1\r\n$6\r\nDBSIZE\r\n")
            .await
            .expect("redis answers DBSIZE");
        r.strip_prefix(':')
            .and_then(|n| n.trim_end().parse().ok())
            .unwrap_or_else(|| panic!("DBSIZE answered {r:?}"))
    }

    /// Every key matching `pattern` with its value as stored (read with `redis-cli`, which
    /// comes with `redis-server`; `--raw`, so a value ends with one newline).
    pub async fn values(&self, pattern: &str) -> Vec<(String, Vec<u8>)> {
        let keys = cli(self.port, &["KEYS", pattern]).await;
        let mut values = Vec::new();
        for key in String::from_utf8(keys).unwrap().lines() {
            if !key.is_empty() {
                values.push((key.to_owned(), cli(self.port, &["GET", key]).await));
            }
        }
        values
    }

    /// The keys matching `pattern`.
    pub async fn keys(&self, pattern: &str) -> Vec<String> {
        let keys = cli(self.port, &["KEYS", pattern]).await;
        let keys = String::from_utf8(keys).unwrap();
        keys.lines()
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// `HGET key field` (its text, without the newline `--raw` adds).
    pub async fn hget(&self, key: &str, field: &str) -> String {
        let value = String::from_utf8(cli(self.port, &["HGET", key, field]).await).unwrap();
        value.strip_suffix('\n').unwrap_or(&value).to_owned()
    }

    /// `HSET key field value`, as whoever can write to Redis may.
    pub async fn hset(&self, key: &str, field: &str, value: &str) {
        cli(self.port, &["HSET", key, field, value]).await;
    }

    /// `SET key value` (for the harness's own test).
    pub async fn set(&self, key: &str, value: &str) {
        let cmd = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
            key.len(),
            value.len()
        );
        let r = command(self.port, &cmd).await;
        assert_eq!(r.as_deref(), Some("+OK\r\n"));
    }
}

/// `redis-cli -p PORT --raw ARGS`: its stdout.
async fn cli(port: u16, args: &[&str]) -> Vec<u8> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "--raw"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("redis-cli (installed with redis-server)");
    assert!(out.status.success(), "redis-cli {args:?} failed");
    out.stdout
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Starts `redis-server` on `port`; None if it exits (port taken) or stays deaf to PING.
async fn spawn(port: u16) -> Option<Child> {
    let mut child = Command::new(REDIS_SERVER)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn redis-server");
    let deadline = tokio::time::Instant::now() + READY;
    while tokio::time::Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return None;
        }
        let pong = command(port, "*1\r\n$4\r\nPING\r\n").await;
        if pong.is_some_and(|r| r.starts_with("+PONG")) {
            return Some(child);
        }
        // Polling a process that is starting: there is nothing to wait on but its socket.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill().await;
    None
}

/// Sends one raw RESP command and returns the first reply chunk (None: no connection or no
/// answer within 2 s).
async fn command(port: u16, resp: &str) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(2), async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(resp.as_bytes()).await.ok()?;
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).await.ok()?;
        (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
    })
    .await
    .ok()
    .flatten()
}

#[tokio::test]
async fn redis_harness_starts_kills_and_restarts_on_the_same_port() {
    let Some(mut redis) = Redis::start_or_skip("redis_harness").await else {
        return;
    };
    assert!(redis.ping().await);
    assert!(redis.url().ends_with(&format!(":{}", redis.port())));
    redis.set("switchboard-harness", "1").await;
    assert_eq!(redis.dbsize().await, 1);
    redis.kill().await;
    assert!(!redis.ping().await, "killed, it must not answer");
    let port = redis.port();
    redis.restart().await;
    assert_eq!(redis.port(), port);
    assert!(redis.ping().await);
    assert_eq!(
        redis.dbsize().await,
        0,
        "nothing persisted across a restart"
    );
}
