//! Sandboxed stdio backends (issue 35) through the real binary: `serve --config` with a
//! hostile backend (`backends/hostile.py`) in a bubblewrap sandbox beside the fixture, real
//! processes, loopback, port 0. Each hostile tool answers with what happened; the tests
//! assert that every attempt failed the way the sandbox makes it fail (not merely because the
//! backend runs as another user: what it tries to read is world-readable, where it tries to
//! write is world-writable), and that the gateway and the other backend keep serving.
//!
//! With the sandbox off these tests fail (checked once by turning it off: the sentinels are
//! read, the writes land, the fork bomb and the allocation succeed).
//!
//! bubblewrap missing: skipped with a loud line, unless `SWITCHBOARD_SANDBOX_TESTS` is set
//! (CI sets it, after `scripts/install-bwrap.sh`), which makes it a failure.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{tool_text, TestGateway};

mod bounds;
mod egress;
mod homes;
mod listed;
mod neighbours;
mod servers;
mod serving;

const SB: &str = env!("CARGO_BIN_EXE_switchboard");
const HOSTILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/integration/backends/hostile.py"
);
/// Makes a missing bubblewrap a failure rather than a skip.
const REQUIRE: &str = "SWITCHBOARD_SANDBOX_TESTS";

/// Set in the gateway's environment; no backend may see it.
const ENV_SENTINEL: &str = "sb-it-env-sentinel-7c1f";
/// In the gateway's `~/.ssh/id_ed25519`.
const SSH_SENTINEL: &str = "sb-it-ssh-sentinel-93ad";
/// In a comment of the gateway's config file.
const CONFIG_SENTINEL: &str = "sb-it-config-sentinel-51e0";
/// In the gateway's secrets file.
const SECRET_SENTINEL: &str = "sb-it-secret-sentinel-2b77";

/// Whether bubblewrap is here; absent, a loud skip, or a failure under [`REQUIRE`].
fn ready(test: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("bwrap").is_file()));
    if !found {
        assert!(
            std::env::var_os(REQUIRE).is_none(),
            "bwrap is missing: install bubblewrap (scripts/install-bwrap.sh); {REQUIRE} \
             requires the sandbox tests to run"
        );
        eprintln!(
            "*** SANDBOX TEST {test} SKIPPED: bwrap is not installed (apt-get install \
             bubblewrap; set {REQUIRE}=1 to require it) ***"
        );
    }
    found
}

/// A directory outside /tmp (which every sandbox masks anyway): under cargo's target tmp,
/// visible inside unless the sandbox hides what is in it. Removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sb-sandbox-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    fn write(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    /// A world-writable directory (a root gateway's backends run as nobody).
    fn open_dir(&self, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.0.join(name);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The gateway serving `hostile` (sandboxed) and `fixture` (not), with a fake home holding
/// an SSH key, a secrets file and a config file with sentinels in them.
struct Hostile {
    gw: TestGateway,
    sid: String,
    dir: Dir,
    home: PathBuf,
    config: PathBuf,
}

const HOSTILE_SANDBOX: &str = "memory: 256MiB\n      pids: 32\n      openFiles: 64";

async fn hostile(name: &str) -> Hostile {
    hostile_with(name, |_| Vec::new()).await
}

/// [`hostile`], with more `serve` arguments (made from its directory).
async fn hostile_with(name: &str, extra: impl FnOnce(&Path) -> Vec<String>) -> Hostile {
    hostile_sandboxed(name, "", extra).await
}

/// [`hostile_with`], with more lines of the hostile backend's `sandbox` settings (each
/// starting with a newline, indented six spaces).
async fn hostile_sandboxed(
    name: &str,
    more: &str,
    extra: impl FnOnce(&Path) -> Vec<String>,
) -> Hostile {
    hostile_sandboxed_in(name, more, extra, |_| Vec::new()).await
}

/// [`hostile_sandboxed`], the gateway's environment given `env(dir)` besides.
async fn hostile_sandboxed_in(
    name: &str,
    more: &str,
    extra: impl FnOnce(&Path) -> Vec<String>,
    env: impl FnOnce(&Path) -> Vec<(&'static str, std::path::PathBuf)>,
) -> Hostile {
    let dir = Dir::new(name);
    let home = dir.0.join("home");
    dir.write(
        "home/.ssh/id_ed25519",
        &format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{SSH_SENTINEL}\n"),
        0o644,
    );
    dir.write(
        "sb.secrets.env",
        &format!("UNUSED_TOKEN={SECRET_SENTINEL}\n"),
        0o600,
    );
    // A guardrail webhook's key, world-readable beside the config (the webhook covers no
    // tool: it is never called).
    dir.write("hook.key", &format!("{SECRET_SENTINEL}\n"), 0o644);
    let out = dir.open_dir("out");
    dir.open_dir("elsewhere");
    let yaml = format!(
        "# {CONFIG_SENTINEL}\nsecretsFile: sb.secrets.env\n\
         guardrails:\n  - name: corp\n    tools: [no_such_tool]\n\
         \x20   webhook: {{url: \"http://127.0.0.1:9/check\", secretFile: hook.key}}\n\
         aggregation: {{conflictResolution: prefix}}\nbackends:\n\
         \x20 - name: hostile\n    command: python3\n    args: [{HOSTILE}]\n\
         \x20   sandbox:\n      filesystem: {{write: [{}]}}\n      {HOSTILE_SANDBOX}{more}\n\
         \x20 - name: fixture\n    command: {SB}\n    args: [fixture]\n",
        out.display()
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(extra(&dir.0))
        .env("HOME", &home)
        .env("SB_IT_SECRET", ENV_SENTINEL)
        .envs(env(&dir.0))
        .current_dir(&dir.0);
    let gw = TestGateway::start_command(cmd).await;
    let sid = gw.session().await;
    Hostile {
        gw,
        sid,
        dir,
        home,
        config,
    }
}

impl Hostile {
    /// A hostile tool's answer text.
    async fn tool(&self, name: &str, args: Value) -> String {
        let r = self
            .gw
            .call_tool(
                Some(&self.sid),
                json!(name),
                &format!("hostile_{name}"),
                args,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        let v = r.json();
        assert!(v.get("error").is_none(), "{name}: {v}");
        let text = tool_text(&v).to_owned();
        for sentinel in [ENV_SENTINEL, SSH_SENTINEL, CONFIG_SENTINEL, SECRET_SENTINEL] {
            assert!(!text.contains(sentinel), "{name} got {sentinel}: {text}");
        }
        text
    }

    /// The other backend still answers.
    async fn fixture_serves(&self) {
        let r = self
            .gw
            .call_tool(
                Some(&self.sid),
                json!("echo"),
                "fixture_echo",
                json!({"text": "still here"}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(tool_text(&r.json()), "still here");
    }
}

/// The gateway's home (an SSH key), config file, secrets file, a guardrail webhook's key and
/// environment (its own
/// variables, PID 1's and the parent's `/proc/*/environ`, the gateway's own by its host pid)
/// are out of reach; the backend's own world is its sandbox home and a cleared environment.
#[tokio::test]
async fn the_gateway_s_secrets_homes_and_environment_are_out_of_reach() {
    if !ready("secrets") {
        return;
    }
    let h = hostile("secrets").await;
    let key = h.home.join(".ssh/id_ed25519");
    let read = h.tool("read", json!({"path": key})).await;
    assert!(read.starts_with("error: FileNotFoundError"), "{read}");
    let listed = h.tool("read", json!({"path": h.home})).await;
    assert_eq!(listed, "ok: []", "the gateway's home is an empty mask");
    // The config and secrets files are in a visible directory, and world-readable (the
    // secrets file aside): the sandbox puts /dev/null over each, on a nodev mount, so
    // opening one is refused.
    let config = h.tool("read", json!({"path": h.config})).await;
    assert!(config.starts_with("error: FileNotFoundError"), "{config}");
    let secrets = h.dir.0.join("sb.secrets.env");
    let secrets = h.tool("read", json!({"path": secrets})).await;
    assert!(secrets.starts_with("error: FileNotFoundError"), "{secrets}");
    // So is a guardrail webhook's key: a backend that read it could sign what the webhook
    // trusts (review).
    let hook_key = h
        .tool("read", json!({"path": h.dir.0.join("hook.key")}))
        .await;
    assert!(
        hook_key.starts_with("error: FileNotFoundError"),
        "{hook_key}"
    );
    let env: Value = serde_json::from_str(&h.tool("env", json!({})).await).unwrap();
    assert_eq!(env["HOME"], "/home/switchboard", "{env}");
    assert!(env.get("SB_IT_SECRET").is_none(), "{env}");
    for which in [json!("self"), json!("1"), json!("parent")] {
        h.tool("environ", json!({"which": which})).await;
    }
    let theirs = h
        .tool("environ", json!({"which": h.gw.pid().to_string()}))
        .await;
    assert!(theirs.starts_with("error: "), "{theirs}");
    let me: Value = serde_json::from_str(&h.tool("whoami", json!({})).await).unwrap();
    assert_ne!(me["pid"], json!(h.gw.pid()), "a PID namespace of its own");
    assert_eq!(h.tool("read", json!({"path": "/root"})).await, "ok: []");
    h.fixture_serves().await;
}

/// An audit log that does not exist when the gateway starts (named by `--audit-log`, or by
/// `auditLog` in the `--auth-config` file) is created private (0600) and out of the
/// backend's sight once it holds lines, as is the auth-config file itself; the directory
/// they are in still shows the backend everything else in it.
#[tokio::test]
async fn an_audit_log_created_after_the_start_is_out_of_reach() {
    if !ready("audit") {
        return;
    }
    for via_file in [false, true] {
        let name = if via_file { "audit-file" } else { "audit-flag" };
        let h = hostile_with(name, |dir| {
            let log = dir.join("audit.log").display().to_string();
            if !via_file {
                return vec!["--audit-log".into(), log];
            }
            let auth = dir.join("auth.json");
            std::fs::write(&auth, json!({"auditLog": log}).to_string()).unwrap();
            vec!["--auth-config".into(), auth.display().to_string()]
        })
        .await;
        let log = h.dir.0.join("audit.log");
        h.tool("whoami", json!({})).await;
        h.fixture_serves().await;
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
        let read = h.tool("read", json!({"path": log})).await;
        assert!(
            read.starts_with("error: FileNotFoundError"),
            "{name}: {read}"
        );
        let listed = h.tool("read", json!({"path": h.dir.0})).await;
        assert!(!listed.contains("audit.log"), "{name}: {listed}");
        assert!(!listed.contains("auth.json"), "{name}: {listed}");
        assert!(listed.contains("elsewhere"), "{name}: {listed}");
        if via_file {
            let auth = h
                .tool("read", json!({"path": h.dir.0.join("auth.json")}))
                .await;
            assert!(auth.starts_with("error: FileNotFoundError"), "{auth}");
        }
    }
}

/// Writes land only in the listed paths, the backend's home and its private /tmp: a
/// world-writable directory outside them is read-only, and nothing written to /tmp inside
/// appears in the host's /tmp.
#[tokio::test]
async fn writes_land_only_in_the_listed_paths() {
    if !ready("writes") {
        return;
    }
    let h = hostile("writes").await;
    let outside = h.dir.0.join("elsewhere/planted.txt");
    let w = h.tool("write", json!({"path": outside})).await;
    assert!(w.contains("Read-only file system"), "{w}");
    assert!(!outside.exists());
    let beside_config = h.dir.0.join("planted.txt");
    let w = h.tool("write", json!({"path": beside_config})).await;
    assert!(w.starts_with("error: "), "{w}");
    assert!(!beside_config.exists());
    let allowed = h.dir.0.join("out/result.txt");
    assert_eq!(
        h.tool("write", json!({"path": allowed})).await,
        "ok: written"
    );
    assert!(allowed.exists(), "the listed path is the host's");
    let tmp = format!("/tmp/sb-sandbox-planted-{}", std::process::id());
    assert_eq!(h.tool("write", json!({"path": tmp})).await, "ok: written");
    assert!(!Path::new(&tmp).exists(), "/tmp inside is private");
    let w = h
        .tool("write", json!({"path": "/home/switchboard/probe"}))
        .await;
    assert_eq!(w, "ok: written", "its own home is writable");
    h.fixture_serves().await;
}

/// Its own network namespace: a port the test listens on over loopback (and the gateway's
/// own) refuse it, and the listener never sees a connection.
#[tokio::test]
async fn the_network_is_its_own_loopback_only() {
    if !ready("network") {
        return;
    }
    let h = hostile("network").await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let c = h.tool("connect", json!({"port": port})).await;
    assert!(c.starts_with("error: ConnectionRefusedError"), "{c}");
    assert!(listener.accept().is_err(), "nothing reached the listener");
    let gw_port = reqwest::Url::parse(&h.gw.url).unwrap().port().unwrap();
    let c = h.tool("connect", json!({"port": gw_port})).await;
    assert!(c.starts_with("error: ConnectionRefusedError"), "{c}");
    h.fixture_serves().await;
}

/// A fork bomb stops at the process limit (EAGAIN) and an allocation past the memory limit
/// fails (MemoryError); the backend itself lives on, as do the gateway and the fixture.
#[tokio::test]
async fn fork_bombs_and_allocations_stop_at_the_limits() {
    if !ready("limits") {
        return;
    }
    let h = hostile("limits").await;
    let bomb: Value =
        serde_json::from_str(&h.tool("fork_bomb", json!({"max": 500})).await).unwrap();
    let forked = bomb["forked"].as_u64().unwrap();
    assert!(forked < 32, "{bomb}");
    let error = bomb["error"].as_str().unwrap_or_default();
    assert!(error.contains("Resource temporarily unavailable"), "{bomb}");
    h.fixture_serves().await;
    let a = h.tool("allocate", json!({"mib": 512})).await;
    assert!(a.starts_with("error: MemoryError"), "{a}");
    assert_eq!(
        h.tool("allocate", json!({"mib": 16})).await,
        "ok: allocated 16777216 bytes"
    );
    h.fixture_serves().await;
}

/// A backend that dies of its limit (it aborts when an allocation fails, as node does) is a
/// crash like any other: the call fails naming how it ended, the supervisor restarts it, and
/// the fixture never stops answering.
#[tokio::test]
async fn a_backend_killed_by_its_limit_is_reported_like_any_crash() {
    if !ready("crash") {
        return;
    }
    let h = hostile("crash").await;
    let r =
        h.gw.call_tool(
            Some(&h.sid),
            json!("die"),
            "hostile_die_allocating",
            json!({"mib": 512}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("exited with status 134"), "{v}");
    h.fixture_serves().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r =
            h.gw.call_tool(Some(&h.sid), json!("w"), "hostile_whoami", json!({}))
                .await;
        if r.json().get("result").is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not restarted: {}",
            r.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = h.gw.stderr.lock().clone();
    assert!(
        logs.contains("exited with status 134; restarting"),
        "{logs}"
    );
}
