//! Real third-party clients through `switchboard serve` with four backends: fixtures `alpha`
//! and `beta` on stdio, `gamma` a remote `fixture --http`, and `growy` (a long paginated
//! list, so the merged list spans two of the gateway's pages and every client must follow its
//! cursor). rmcp (both eras), the Python SDK 1.x (Legacy) and 2.3.0 (2026-07-28), and the
//! TypeScript SDK each see the merged list the gateway serves, and each exposed name reaches
//! the one backend that owns it, under its original name. Then a backend dies under a
//! connected client: it leaves the list, its calls fail fast naming it, the others answer,
//! and it comes back under the same names.
//!
//! The Python clients install from PyPI on first use, like the other Python-client tests; the
//! TypeScript one is opt-in like every npm-fetching test (`SWITCHBOARD_NPX_TESTS=1`, which
//! scripts/test.sh sets).

use std::time::{Duration, Instant};

use serde_json::json;

use super::driver::{Client, Failed};
use super::{growy, list_all, remote, serve, stdio, Era, Served, BETA};
use crate::fixture_http::FixtureHttp;

/// The environment variable each stdio fixture is given its own backend name in (the
/// fixture's `env` tool reads it back; the remote fixture, not started by the gateway, has
/// it unset).
const WHO: &str = "SB_CLIENTS_WHO";
/// Growy's tools: with the fixtures' ~110 more, past the gateway's 500-item page.
const GROWN: usize = 520;
/// A failure this fast is "fast": far below the 30 s request timeout and the scripts' 10 s.
const FAST: Duration = Duration::from_secs(5);

/// The four-backend set. Lists are fetched again after 250 ms, so a dead backend leaves
/// (and a revived one rejoins) the list within a bounded poll, not after the default 5 s.
async fn quartet(name: &str) -> Served {
    let gamma = FixtureHttp::start(&[]).await;
    let alpha = format!("    env: {{{WHO}: alpha}}\n");
    let beta = format!("    env: {{{WHO}: beta}}\n{BETA}");
    let yaml = format!(
        "timeouts: {{request: 30s}}\naggregation: {{listCacheTtl: 250ms}}\nbackends:\n{}{}{}{}",
        stdio("alpha", &alpha),
        stdio("beta", &beta),
        remote("gamma", &gamma.url),
        growy("growy", GROWN, 100)
    );
    serve(name, &yaml, Some(gamma)).await
}

/// The parent process id of `pid` (from /proc): who spawned the process that answered.
fn parent_of(pid: &str) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("process {pid}: {e}"));
    // `pid (comm) state ppid ...`; comm may hold spaces, so split after its `)`.
    let rest = stat.rsplit_once(") ").unwrap().1;
    rest.split(' ').nth(1).unwrap().parse().unwrap()
}

/// `call`, which must succeed.
async fn ok(client: &mut Client, tool: &str, args: serde_json::Value) -> String {
    match client.call(tool, args).await {
        Ok(text) => text,
        Err(e) => panic!("{tool}: {e:?}"),
    }
}

/// The client's merged list is the gateway's (same names, same order, same page count as a
/// raw walk), with colliding names prefixed and unique ones bare.
async fn sees_the_merged_list(client: &mut Client, served: &Served, label: &str) -> Vec<String> {
    let gw = &served.gw;
    let sid = gw.session().await;
    let (raw, raw_pages) = list_all(gw, Era::Legacy, Some(&sid), "tools/list", "tools").await;
    let listed = client
        .list()
        .await
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(
        listed.tools,
        super::names(&raw),
        "{label}: not the gateway's list"
    );
    assert_eq!(listed.pages, raw_pages, "{label}");
    assert!(
        listed.pages >= 2,
        "{label}: one page only, no cursor followed"
    );
    let has = |n: &str| listed.tools.iter().any(|t| t == n);
    for base in ["echo", "pid", "env", "instance"] {
        for backend in ["alpha", "beta", "gamma"] {
            assert!(
                has(&format!("{backend}_{base}")),
                "{label}: {backend}_{base}"
            );
        }
        assert!(!has(base), "{label}: {base} collides, yet is bare");
    }
    // Unique names stay bare; beta's filtered `exit` and its renamed `slow` do not exist.
    assert!(has("beta_only_slow") && has("g0000") && has("g0519") && has("grow"));
    assert!(!has("beta_exit") && !has("beta_slow") && !has("growy_g0000"));
    listed.tools
}

/// Each exposed name reaches its own backend: the stdio fixtures are the gateway's children
/// and say their own backend name; gamma is the test's child and has no name; growy answers
/// for itself; renamed and bare names arrive under the backend's original name.
async fn reaches_each_backend(client: &mut Client, served: &Served, label: &str) {
    let gw_pid = served.gw.pid();
    let mut pids = Vec::new();
    for (backend, parent) in [
        ("alpha", gw_pid),
        ("beta", gw_pid),
        ("gamma", std::process::id()),
    ] {
        let who = ok(client, &format!("{backend}_env"), json!({"name": WHO})).await;
        let expected = if backend == "gamma" { "" } else { backend };
        assert_eq!(
            who, expected,
            "{label}: {backend}_env reached another backend"
        );
        let pid = ok(client, &format!("{backend}_pid"), json!({})).await;
        assert_eq!(
            parent_of(&pid),
            parent,
            "{label}: {backend}_pid answered by {pid}"
        );
        pids.push(pid);
    }
    assert!(
        pids[0] != pids[1] && pids[1] != pids[2],
        "{label}: {pids:?}"
    );
    // `beta_only_slow` is beta's `slow`: the fixture knows only its own name.
    assert_eq!(
        ok(client, "beta_only_slow", json!({"ms": 1})).await,
        "slept 1"
    );
    let text = format!("{label} to gamma");
    assert_eq!(ok(client, "gamma_echo", json!({"text": text})).await, text);
    assert_eq!(ok(client, "g0007", json!({})).await, "g0007 from growy");
    // Beta's filtered tool is refused (as an unknown one), by neither name reaching beta.
    for refused in ["beta_exit", "exit"] {
        let r = client.call(refused, json!({})).await;
        let e = r.expect_err(&format!("{label}: {refused} was callable"));
        assert!(e.elapsed < FAST, "{label}: {refused} refused slowly: {e:?}");
    }
    assert_eq!(ok(client, "beta_pid", json!({})).await, pids[1], "{label}");
}

/// The whole routing check for one client.
async fn routes(mut client: Client, served: &Served, label: &str) {
    sees_the_merged_list(&mut client, served, label).await;
    reaches_each_backend(&mut client, served, label).await;
}

#[tokio::test]
async fn rmcp_legacy_client_reaches_each_backend_under_its_original_name() {
    let served = quartet("rmcp-legacy").await;
    let client = Client::rmcp(&served.gw.url, false).await;
    assert_eq!(client.hello()["server"], "switchboard");
    routes(client, &served, "rmcp Legacy").await;
}

#[tokio::test]
async fn rmcp_modern_client_reaches_each_backend_under_its_original_name() {
    let served = quartet("rmcp-modern").await;
    let client = Client::rmcp(&served.gw.url, true).await;
    assert_eq!(client.hello()["protocolVersion"], super::V);
    routes(client, &served, "rmcp Modern").await;
}

#[tokio::test]
async fn python_sdk_legacy_client_reaches_each_backend_under_its_original_name() {
    let served = quartet("py-legacy").await;
    let client = Client::python_legacy(&served.gw.url).await;
    let hello = client.hello();
    assert_eq!(hello["server"], "switchboard", "{hello}");
    assert_eq!(hello["protocolVersion"], "2025-11-25", "{hello}");
    routes(client, &served, "Python SDK 1.x").await;
}

#[tokio::test]
async fn python_sdk_modern_client_reaches_each_backend_under_its_original_name() {
    let served = quartet("py-modern").await;
    let client = Client::python_modern(&served.gw.url).await;
    // Pinned to a version, the SDK skips `server/discover` (it synthesizes one), so it never
    // learns a `serverInfo`; the rmcp Modern test covers the gateway's discover answer.
    let hello = client.hello();
    assert_eq!(hello["protocolVersion"], super::V, "{hello}");
    routes(client, &served, "Python SDK 2.3.0").await;
}

/// Whether the npm-fetching tests run (as in everything.rs and real_remotes.rs).
fn npx_enabled() -> bool {
    let on = std::env::var_os("SWITCHBOARD_NPX_TESTS").is_some();
    if !on {
        eprintln!(
            "TypeScript SDK test not enabled (set SWITCHBOARD_NPX_TESTS=1; scripts/test.sh does)"
        );
    }
    on
}

#[tokio::test]
async fn typescript_sdk_client_reaches_each_backend_under_its_original_name() {
    if !npx_enabled() {
        return;
    }
    let served = quartet("ts").await;
    let client = Client::typescript(&served.gw.url).await;
    let hello = client.hello();
    assert_eq!(hello["server"], "switchboard", "{hello}");
    assert_eq!(hello["protocolVersion"], "2025-11-25", "{hello}");
    routes(client, &served, "TypeScript SDK").await;
}

/// Lists through `client` until `done` holds for the names (bounded: 20 s); returns them.
async fn list_until(
    client: &mut Client,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // A walk can straddle the change: the gateway then refuses the outdated cursor
        // (`-32602`, by design) and the client starts again, as a client should.
        let listed = client.list().await;
        let tools = match listed {
            Ok(listed) => listed.tools,
            Err(e) if e.contains("cursor") => Vec::new(),
            Err(e) => panic!("{what}: {e}"),
        };
        if !tools.is_empty() && done(&tools) {
            return tools;
        }
        assert!(Instant::now() < deadline, "{what} within 20s: {tools:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A call to the dead backend's tool: fails fast, naming the backend.
fn fails_fast_naming(result: Result<String, Failed>, backend: &str, label: &str) {
    let e = result.expect_err(&format!("{label}: the dead backend answered"));
    assert!(e.elapsed < FAST, "{label}: slow failure: {e:?}");
    assert!(
        e.message.contains(backend),
        "{label}: {e:?} does not name {backend}"
    );
}

/// Gamma (the remote fixture) is killed under a connected `client`: its tools leave the list
/// and nobody else's change name; its call fails fast naming it; alpha, beta and growy
/// answer; on the same port again it rejoins under the same names and answers.
async fn survives_a_dead_backend(mut client: Client, mut served: Served, label: &str) {
    let before = sees_the_merged_list(&mut client, &served, label).await;
    let gamma_pid = ok(&mut client, "gamma_pid", json!({})).await;
    let mut gamma = served._remote.take().unwrap();
    let port = gamma.port();
    gamma.kill().await;

    let is_gamma = |n: &String| n.starts_with("gamma_");
    let shrunk = list_until(&mut client, "gamma leaving the list", |t| {
        !t.iter().any(is_gamma)
    })
    .await;
    let others: Vec<String> = before.iter().filter(|n| !is_gamma(n)).cloned().collect();
    assert_eq!(shrunk, others, "{label}: the others' names changed");

    let dead = client.call("gamma_echo", json!({"text": "anyone?"})).await;
    fails_fast_naming(dead, "gamma", label);
    assert_eq!(
        ok(&mut client, "alpha_env", json!({"name": WHO})).await,
        "alpha"
    );
    assert_eq!(
        ok(&mut client, "beta_env", json!({"name": WHO})).await,
        "beta"
    );
    assert_eq!(
        ok(&mut client, "g0001", json!({})).await,
        "g0001 from growy"
    );

    served._remote = Some(FixtureHttp::start_at(port, &[]).await);
    let back = list_until(&mut client, "gamma rejoining the list", |t| {
        t.iter().any(is_gamma)
    })
    .await;
    assert_eq!(back, before, "{label}: not the same list after the revival");
    let echoed = ok(&mut client, "gamma_echo", json!({"text": "back"})).await;
    assert_eq!(echoed, "back", "{label}");
    let revived = ok(&mut client, "gamma_pid", json!({})).await;
    assert_ne!(
        revived, gamma_pid,
        "{label}: the answer came from the dead process"
    );
}

#[tokio::test]
async fn python_sdk_modern_client_sees_a_dead_backend_leave_and_come_back() {
    let served = quartet("py-modern-dead").await;
    let client = Client::python_modern(&served.gw.url).await;
    survives_a_dead_backend(client, served, "Python SDK 2.3.0").await;
}

/// The Python SDK 1.x raises `HTTPStatusError` inside its transport's task group on any
/// non-2xx POST: were a dead backend's call answered 502, the call would never return its
/// error and the whole client (its session, its use of every other backend) would die. So the
/// virtual server answers one backend's failure with HTTP 200 and the JSON-RPC error.
#[tokio::test]
async fn python_sdk_legacy_client_sees_a_dead_backend_leave_and_come_back() {
    let served = quartet("py-legacy-dead").await;
    let client = Client::python_legacy(&served.gw.url).await;
    survives_a_dead_backend(client, served, "Python SDK 1.x").await;
}

#[tokio::test]
async fn rmcp_legacy_client_sees_a_dead_backend_leave_and_come_back() {
    let served = quartet("rmcp-dead").await;
    let client = Client::rmcp(&served.gw.url, false).await;
    survives_a_dead_backend(client, served, "rmcp Legacy").await;
}

#[tokio::test]
async fn typescript_sdk_client_sees_a_dead_backend_leave_and_come_back() {
    if !npx_enabled() {
        return;
    }
    let served = quartet("ts-dead").await;
    let client = Client::typescript(&served.gw.url).await;
    survives_a_dead_backend(client, served, "TypeScript SDK").await;
}
