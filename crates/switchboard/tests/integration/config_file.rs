//! The config file through the real binary: `validate` (every error with its path, exit
//! codes, no secret printed), `init --from-mcp-json` on a realistic Claude Desktop config,
//! and `serve --config` / `serve --mcp-json` in front of the fixture.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::common::TestGateway;

pub(crate) const SWITCHBOARD: &str = env!("CARGO_BIN_EXE_switchboard");
const CLAUDE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/claude_desktop_config.json"
);
/// The literal credentials in the Claude fixture: none may appear in a config or any output.
const CLAUDE_SECRETS: [&str; 3] = [
    "ghp_FAKEfixtureTOKEN0123456789abcdefABCD",
    "BSA-fixture-secret-9f8e7d6c",
    "acme-fixture-bearer-55aa",
];

/// A fresh directory for one test, removed on drop.
pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    pub(crate) fn new(name: &str) -> Dir {
        let path = std::env::temp_dir().join(format!("sb-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `switchboard ARGS` to completion (bounded: a hang fails the test).
pub(crate) async fn switchboard(args: &[&str], env: &[(&str, &str)], cwd: &Path) -> Output {
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .kill_on_drop(true);
    tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .expect("switchboard did not finish within 30s")
        .unwrap()
}

pub(crate) fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn validate_prints_a_summary_and_never_a_secret() {
    let dir = Dir::new("validate-good");
    let config = dir.write(
        "sb.yaml",
        &format!(
            "backends:\n  - name: fixture\n    command: {SWITCHBOARD}\n    args: [fixture]\n    env: {{TOKEN: \"${{IT_TOKEN}}\"}}\n  - name: remote\n    url: http://127.0.0.1:9/mcp?key=${{IT_TOKEN}}\n    headers: {{Authorization: \"Bearer ${{IT_TOKEN}}\"}}\n"
        ),
    );
    let out = switchboard(
        &["validate", "--config", config.to_str().unwrap()],
        &[("IT_TOKEN", "it-secret-value-1234")],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("sb.yaml: valid"), "{stdout}");
    assert!(stdout.contains("2 backend(s)"), "{stdout}");
    assert!(
        stdout.contains("fixture") && stdout.contains("command"),
        "{stdout}"
    );
    assert!(
        stdout.contains("remote") && stdout.contains("url"),
        "{stdout}"
    );
    // Neither the reference's value nor the query it sits in is shown.
    assert!(stdout.contains("http://127.0.0.1:9/mcp?…"), "{stdout}");
    assert!(!stdout.contains("it-secret-value") && !stderr.contains("it-secret-value"));
}

/// A remote's URL written with credentials in it (user info, a query key) is shown without
/// them by `validate` and by `serve`, on the first start and on every retry of a remote that
/// did not start (review: both printed the URL as written).
#[tokio::test]
async fn a_remote_url_is_never_printed_with_its_credentials() {
    const SECRETS: [&str; 2] = ["hunter2pass", "SECRETQUERYKEY-77"];
    let dir = Dir::new("url-secrets");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let config = dir.write(
        "sb.yaml",
        &format!(
            "backends:\n  - name: fixture\n    command: {SWITCHBOARD}\n    args: [fixture]\n  - name: remote\n    url: http://bob:hunter2pass@127.0.0.1:{port}/mcp?api_key=SECRETQUERYKEY-77\n"
        ),
    );
    let out = switchboard(
        &["validate", "--config", config.to_str().unwrap()],
        &[],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let shown = format!("http://…@127.0.0.1:{port}/mcp?…");
    assert!(stdout.contains(&shown), "{stdout}");
    for secret in SECRETS {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{stdout}{stderr}"
        );
    }

    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"]);
    let mut gw = TestGateway::start_command(cmd).await;
    // The remote is retried in the background, each retry printing its URL again: one
    // retry's line (after the first start's, in the startup lines) is searched too.
    let retry = gw.stdout.wait(
        "switchboard: connecting to remote:",
        Duration::from_secs(20),
    );
    assert!(retry.await.is_some(), "the remote was not retried");
    assert!(gw
        .startup
        .iter()
        .any(|l| l.contains("connecting to remote")));
    let evidence = crate::leaks::Evidence::collect(&mut gw, None, None).await;
    assert!(
        evidence
            .of("stdout")
            .contains(&format!("connecting to remote: {shown}")),
        "{}",
        evidence.of("stdout")
    );
    evidence.assert_free_of(&SECRETS);
}

/// A JWT issuer spelled like the gateway's own principal issuers (`api-key` for API keys,
/// `anonymous` for callers without a credential) would make a token's subject the same
/// principal as a key's name: refused by `validate` and at startup, naming the field.
#[tokio::test]
async fn a_jwt_issuer_named_like_a_gateway_issuer_is_refused() {
    let dir = Dir::new("reserved-issuer");
    for issuer in ["api-key", "anonymous"] {
        let config = dir.write(
            "sb.yaml",
            &format!(
                "auth:\n  jwt: {{issuer: {issuer}, jwksUrl: \"http://127.0.0.1:9/jwks\"}}\nbackends:\n  - name: fixture\n    command: {SWITCHBOARD}\n    args: [fixture]\n"
            ),
        );
        let path = config.to_str().unwrap();
        for args in [
            &["validate", "--config", path][..],
            &["serve", "--config", path, "--port", "0"][..],
        ] {
            // Bounded: a `serve` that starts anyway fails the test after 30 s.
            let out = switchboard(args, &[], &dir.0).await;
            let (stdout, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
            assert!(
                stderr.contains("auth.jwt.issuer") && stderr.contains(issuer),
                "{args:?}: {stderr}"
            );
        }
    }
}

#[tokio::test]
async fn validate_reports_every_error_with_its_path_and_exits_1() {
    let dir = Dir::new("validate-bad");
    let config = dir.write(
        "bad.yaml",
        "listen: {port: 99999}\nbackends:\n  - name: one\n    command: x\n    env: {A: \"${IT_SET}\", B: \"${IT_UNSET_VAR}\"}\n  - name: two\n    args: [y]\n  - name: one\n    url: https://h/mcp\n    headers: {Mcp-Session-Id: fixed}\n",
    );
    let out = switchboard(
        &["validate", "--config", config.to_str().unwrap()],
        &[("IT_SET", "it-secret-value-5678")],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    // The schema's and the cross-entry checks' errors, together.
    assert_eq!(
        lines,
        [
            &format!("switchboard: {}: 3 error(s)", config.display()) as &str,
            "listen.port: must be at most 65535",
            "backends[1].command: required (or url, for a remote server; or openapi, for a REST API)",
            "backends[2].name: \"one\" is already the name of backends[0]",
        ],
        "{stderr}"
    );
    // Once those are fixed, the next stage: references and header names, each with its path.
    let config = dir.write(
        "bad2.yaml",
        "backends:\n  - name: one\n    command: x\n    env: {A: \"${IT_SET}\", B: \"${IT_UNSET_VAR}\"}\n  - name: two\n    url: https://h/mcp\n    headers: {Mcp-Session-Id: fixed, X-Key: \"${IT_SET}\"}\n",
    );
    let out = switchboard(
        &["validate", "--config", config.to_str().unwrap()],
        &[("IT_SET", "it-secret-value-5678")],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let lines: Vec<&str> = stderr.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "backends[0].env.B: ${IT_UNSET_VAR} is not set (in the environment or the secrets file)",
            "backends[1].headers.Mcp-Session-Id: mcp-session-id: the gateway sets this header itself",
        ],
        "{stderr}"
    );
    assert!(!stdout.contains("it-secret-value") && !stderr.contains("it-secret-value"));
}

#[cfg(unix)]
#[tokio::test]
async fn a_secrets_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("secrets-mode");
    let secrets = dir.write("s.env", "IT_FILE_TOKEN=it-file-secret\n");
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = dir.write(
        "sb.yaml",
        "secretsFile: s.env\nbackends: [{name: a, command: x, env: {T: \"${IT_FILE_TOKEN}\"}}]\n",
    );
    let args = ["validate", "--config", config.to_str().unwrap()];
    let out = switchboard(&args, &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("secretsFile: ") && stderr.contains("chmod 600"),
        "{stderr}"
    );
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = switchboard(&args, &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("it-file-secret") && !stderr.contains("it-file-secret"));
}

#[tokio::test]
async fn init_converts_a_claude_desktop_config() {
    let dir = Dir::new("init");
    let out = switchboard(
        &["init", "--from-mcp-json", CLAUDE, "--out", "sb.yaml"],
        &[],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    // The mapping, in the file's order; names kept as written where they can be (case
    // too), the others made backend names, with a line on stderr for each of those.
    for line in [
        "\"filesystem\" -> backend filesystem",
        "\"GitHub\" -> backend GitHub",
        "\"brave-search\" -> backend brave-search",
        "\"Linear (remote)\" -> backend Linear-remote",
        "\"acme tools\" -> backend acme-tools",
        "\"github\" -> backend github",
    ] {
        assert!(stdout.contains(line), "{line} not in {stdout}");
    }
    for renamed in [
        "server \"Linear (remote)\" is backend \"Linear-remote\"",
        "server \"acme tools\" is backend \"acme-tools\"",
    ] {
        assert!(stderr.contains(renamed), "{renamed} not in {stderr}");
    }
    assert_eq!(stderr.matches(" is backend ").count(), 2, "{stderr}");
    assert!(
        stdout.contains("skipped \"puppeteer\": disabled"),
        "{stdout}"
    );
    assert!(stdout.contains("sb.secrets.env (mode 0600)"), "{stdout}");
    let yaml = std::fs::read_to_string(dir.0.join("sb.yaml")).unwrap();
    let secrets_path = dir.0.join("sb.secrets.env");
    let secrets = std::fs::read_to_string(&secrets_path).unwrap();
    for s in CLAUDE_SECRETS {
        assert!(!yaml.contains(s), "{s} copied into the YAML:\n{yaml}");
        assert!(!stdout.contains(s) && !stderr.contains(s));
        assert!(secrets.contains(s), "{s} not in the secrets file");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secrets_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let names: Vec<String> = serde_yaml_names(&yaml);
    assert_eq!(
        names,
        [
            "filesystem",
            "GitHub",
            "brave-search",
            "Linear-remote",
            "acme-tools",
            "github"
        ]
    );
    // What init wrote validates (the one reference it kept needs its variable).
    let validate = ["validate", "--config", "sb.yaml"];
    let out = switchboard(&validate, &[("BRAVE_LOG_LEVEL", "debug")], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("6 backend(s)"), "{stdout}");
    for s in CLAUDE_SECRETS {
        assert!(!stdout.contains(s) && !stderr.contains(s));
    }
    // A second run does not overwrite the user's files.
    let again = ["init", "--from-mcp-json", CLAUDE, "--out", "sb.yaml"];
    let out = switchboard(&again, &[], &dir.0).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("--force"), "{:?}", text(&out));
}

/// The `name:` values of a converted config, in order (the YAML is block style).
fn serde_yaml_names(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|l| l.strip_prefix("- name: "))
        .map(str::to_owned)
        .collect()
}

/// `serve --config` with one backend is `run`: the fixture answers `tools/list`. The file's
/// port is taken (a listener the test holds); `--port 0` on the command line overrides it.
#[tokio::test]
async fn serve_config_fronts_one_backend_and_flags_override_the_file() {
    let dir = Dir::new("serve");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let config = dir.write(
        "sb.yaml",
        &format!(
            "listen: {{host: 127.0.0.1, port: {port}}}\ntimeouts: {{request: 20s}}\nbackends:\n  - name: fixture\n    command: {SWITCHBOARD}\n    args: [fixture]\n"
        ),
    );
    // Without the override the file's (busy) port is used: the gateway says so and exits.
    let out = switchboard(
        &["serve", "--config", config.to_str().unwrap()],
        &[],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{stderr}"
    );

    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    assert_tools_list(&gw).await;
    drop(busy);
}

/// Every variable the configuration reads is the gateway's, not a stdio backend's: an API key
/// named by `keyEnv` (in the auth-config file) or by a `${VAR}` reference (in `auth.apiKeys`,
/// a backend's `env`) is not inherited; what a backend's `env` gives it, it gets, and a
/// variable the configuration never names is inherited as before.
#[tokio::test]
async fn variables_the_config_reads_are_not_inherited_by_stdio_backends() {
    const ALICE: &str = "it-alice-key-0123456789";
    let dir = Dir::new("withheld-env");
    dir.write(
        "auth.json",
        r#"{"apiKeys": [{"name": "alice", "keyEnv": "IT_ALICE_KEY"}]}"#,
    );
    let config = dir.write(
        "sb.yaml",
        &format!(
            "auth:\n  configFile: auth.json\n  apiKeys: [{{name: bob, key: \"${{IT_BOB_KEY}}\"}}]\nbackends:\n  - name: fixture\n    command: {SWITCHBOARD}\n    args: [fixture]\n    env: {{GIVEN: \"${{IT_GIVEN}}\"}}\n"
        ),
    );
    let env = [
        ("IT_ALICE_KEY", ALICE),
        ("IT_BOB_KEY", "it-bob-key-0123456789ab"),
        ("IT_GIVEN", "it-given-value"),
        ("IT_UNNAMED", "it-unnamed-value"),
    ];
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"])
        .envs(env)
        .current_dir(&dir.0);
    let gw = TestGateway::start_command(cmd).await;
    let backend_env = |name: &'static str| {
        let gw = &gw;
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "env", "arguments": {"name": name}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}}}});
            let auth = format!("Bearer {ALICE}");
            let headers = [
                ("authorization", auth.as_str()),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "env"),
            ];
            let r = gw.post_raw(None, body.to_string(), &headers).await;
            assert_eq!(r.status, StatusCode::OK, "{name}: {}", r.text);
            crate::common::tool_text(&r.json()).to_owned()
        }
    };
    assert_eq!(backend_env("GIVEN").await, "it-given-value");
    assert_eq!(backend_env("IT_UNNAMED").await, "it-unnamed-value");
    for withheld in ["IT_ALICE_KEY", "IT_BOB_KEY", "IT_GIVEN"] {
        assert_eq!(backend_env(withheld).await, "", "{withheld} was inherited");
    }
}

async fn assert_tools_list(gw: &TestGateway) {
    let sid = gw.session().await;
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let tools = r.json()["result"]["tools"].clone();
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "echo"),
        "{tools}"
    );
}

/// `serve --mcp-json` serves an `mcpServers` file as it is; its literal env values reach the
/// backend without being written anywhere or printed.
#[tokio::test]
async fn serve_mcp_json_fronts_its_server() {
    let dir = Dir::new("serve-mcp-json");
    let file = dir.write(
        "mcp.json",
        &json!({"mcpServers": {"The Fixture": {
            "command": SWITCHBOARD, "args": ["fixture"],
            "env": {"IT_FIXTURE_SECRET": "it-literal-secret-42"}
        }}})
        .to_string(),
    );
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--mcp-json", file.to_str().unwrap(), "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;
    assert_tools_list(&gw).await;
    assert!(!gw.stderr.lock().contains("it-literal-secret"));
    let written: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert_eq!(
        written.len(),
        1,
        "serve --mcp-json wrote files: {written:?}"
    );
}

/// A remote's URL may carry a `${VAR}`: what `serve` prints (and the error when the remote
/// is not there) never shows the value, nor the query it sits in.
#[tokio::test]
async fn serve_shows_a_remote_url_without_its_query() {
    let dir = Dir::new("serve-url");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.write(
        "sb.yaml",
        &format!(
            "listen: {{port: 0}}\ntimeouts: {{startup: 5s}}\nbackends:\n  - name: gone\n    url: \"http://127.0.0.1:{port}/mcp?key=${{IT_URL_KEY}}\"\n    headers: {{X-Key: \"${{IT_URL_KEY}}\"}}\n"
        ),
    );
    let args = ["serve", "--config", config.to_str().unwrap()];
    let out = switchboard(&args, &[("IT_URL_KEY", "it-url-secret-77")], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let shown = format!("http://127.0.0.1:{port}/mcp?…");
    assert!(stdout.contains(&shown), "{stdout}");
    assert!(
        !stdout.contains("it-url-secret") && !stderr.contains("it-url-secret"),
        "{stdout}{stderr}"
    );
}

/// `forwardCallerToken` replaces the gateway's credential with the caller's: a static
/// `Authorization` beside it would go out for every caller without a token of its own (the
/// gateway's identity at the remote), so the file is refused, naming the key, never the value.
#[tokio::test]
async fn forwarding_the_callers_token_excludes_a_static_authorization() {
    let dir = Dir::new("validate-forward");
    let config = dir.write(
        "sb.yaml",
        "backends:\n  - name: remote\n    url: http://127.0.0.1:9/mcp\n    forwardCallerToken: true\n    headers: {Authorization: \"Bearer ${IT_TOKEN}\"}\n",
    );
    let out = switchboard(
        &["validate", "--config", config.to_str().unwrap()],
        &[("IT_TOKEN", "it-secret-value-5678")],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains(
            "backends[0].forwardCallerToken: cannot be combined with a static Authorization header"
        ),
        "{all}"
    );
    assert!(!all.contains("it-secret-value"), "{all}");
}

/// A malformed `--header` is refused without quoting it: it is a credential more often than
/// not (review: the first 24 characters were echoed).
#[tokio::test]
async fn a_malformed_header_flag_is_refused_without_its_value() {
    let dir = Dir::new("header-flag");
    let args = [
        "run",
        "--url",
        "http://127.0.0.1:9/mcp",
        "--header",
        "X-Api-Key sk_live_SECRET123456789",
    ];
    let out = switchboard(&args, &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("--header"), "{stderr}");
    assert!(
        !stdout.contains("sk_live") && !stderr.contains("sk_live"),
        "{stderr}"
    );
    // A `:` inside the token: what precedes it is not quoted either.
    let args = [
        "run",
        "--url",
        "http://127.0.0.1:9/mcp",
        "--header",
        "Bearer 123456:ABCdef",
    ];
    let out = switchboard(&args, &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success() && stderr.contains("--header"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("123456") && !stderr.contains("123456"),
        "{stderr}"
    );
    // An OTLP endpoint its exporter will not take is not quoted (its error quotes it).
    let endpoint = "http://otuser:OTLP SECRET-7@127.0.0.1:1/v1/traces?key=a b";
    let args = ["run", "--otlp-endpoint", endpoint];
    let out = switchboard(&args, &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("--otlp-endpoint"), "{stderr}");
    for secret in ["SECRET-7", "otuser", "key=a"] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{stderr}"
        );
    }
}
