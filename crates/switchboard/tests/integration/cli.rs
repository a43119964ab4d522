//! The CLI's help for a new user, through the real binary: `init` from the files editors
//! write (JSONC, mixed-case names kept), `validate`'s host checks and suggestions, and
//! `doctor`'s live start of each backend.

use reqwest::StatusCode;
use serde_json::json;

use crate::common::TestGateway;
use crate::config_file::{switchboard, text, Dir, SWITCHBOARD};

/// The tool names a gateway lists, sorted.
async fn tool_names(gw: &TestGateway) -> Vec<String> {
    let sid = gw.session().await;
    let r = gw
        .post(
            Some(&sid),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let mut names: Vec<String> = r.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// `init` on `file`, then `serve` of what it wrote: returns the gateway and init's output.
async fn init_and_serve(dir: &Dir, file: &str) -> (TestGateway, String, String) {
    let out = switchboard(
        &["init", "--from-mcp-json", file, "--out", "sb.yaml"],
        &[],
        &dir.0,
    )
    .await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let config = dir.0.join("sb.yaml");
    let mut cmd = tokio::process::Command::new(SWITCHBOARD);
    cmd.args(["serve", "--config", config.to_str().unwrap(), "--port", "0"])
        .current_dir(&dir.0);
    (TestGateway::start_command(cmd).await, stdout, stderr)
}

/// VS Code's `mcp.json` is JSONC under `servers`: comments (with comment-like text inside
/// strings) and trailing commas. Its names are kept as written, case included, so the
/// prefixed tool names are the ones the user's clients already knew.
#[tokio::test]
async fn init_reads_a_vs_code_jsonc_file_and_keeps_its_names() {
    let dir = Dir::new("init-jsonc");
    let file = dir.write(
        "mcp.json",
        &format!(
            r#"{{
  // Workspace servers (VS Code writes this file with comments)
  "inputs": [],
  "servers": {{
    /* the fixture, twice, so every tool name collides and is prefixed */
    "remA": {{
      "type": "stdio",
      "command": "{SWITCHBOARD}",
      "args": ["fixture", ],
      "env": {{"IT_NOTE": "http://not/a // comment"}},
    }},
    "Fixture Two": {{"command": "{SWITCHBOARD}", "args": ["fixture"]}}, // trailing
  }},
}}
"#
        ),
    );
    let (gw, stdout, stderr) = init_and_serve(&dir, file.to_str().unwrap()).await;
    assert!(stdout.contains("\"remA\" -> backend remA"), "{stdout}");
    assert!(
        stderr.contains("server \"Fixture Two\" is backend \"Fixture-Two\""),
        "{stderr}"
    );
    assert!(!stderr.contains("\"remA\" is backend"), "{stderr}");
    let names = tool_names(&gw).await;
    assert!(names.contains(&"remA_echo".to_owned()), "{names:?}");
    assert!(names.contains(&"Fixture-Two_echo".to_owned()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("rema_")), "{names:?}");
}

/// Claude Desktop's `mcpServers` with mixed-case names: `remA` stays `remA`, and so does
/// every prefixed tool name.
#[tokio::test]
async fn init_keeps_mixed_case_claude_names_and_tool_prefixes() {
    let dir = Dir::new("init-case");
    let doc = json!({"mcpServers": {
        "remA": {"command": SWITCHBOARD, "args": ["fixture"]},
        "RemoteB": {"command": SWITCHBOARD, "args": ["fixture"]},
    }});
    let file = dir.write("claude_desktop_config.json", &doc.to_string());
    let (gw, stdout, stderr) = init_and_serve(&dir, file.to_str().unwrap()).await;
    assert!(stdout.contains("\"remA\" -> backend remA"), "{stdout}");
    assert!(
        stdout.contains("\"RemoteB\" -> backend RemoteB"),
        "{stdout}"
    );
    assert!(
        !stderr.contains(" is backend "),
        "nothing renamed: {stderr}"
    );
    let yaml = std::fs::read_to_string(dir.0.join("sb.yaml")).unwrap();
    assert!(
        yaml.contains("name: remA") && yaml.contains("name: RemoteB"),
        "{yaml}"
    );
    let names = tool_names(&gw).await;
    for want in ["remA_echo", "RemoteB_echo"] {
        assert!(names.contains(&want.to_owned()), "{want} not in {names:?}");
    }
    let lower: Vec<&String> = names.iter().filter(|n| n.starts_with("rema_")).collect();
    assert!(lower.is_empty(), "{lower:?}");
}

/// A command that is not installed is reported at its key (with the nearest program on PATH
/// when one is close), as a warning, and as an error with `--strict`; a file that is fine
/// gets no warning.
#[tokio::test]
async fn validate_reports_a_command_that_is_not_installed() {
    let dir = Dir::new("validate-missing");
    let bin = dir.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("it-mcp-tool");
    std::fs::write(&tool, "#!/bin/sh\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = dir.write(
        "sb.yaml",
        &format!(
            "backends:\n  - name: here\n    command: {SWITCHBOARD}\n    args: [fixture]\n  - name: gone\n    command: it-mcp-tol\n  - name: remote\n    url: \"http://exa mple/mcp\"\n"
        ),
    );
    let path = bin.to_str().unwrap();
    let args = ["validate", "--config", config.to_str().unwrap()];
    let out = switchboard(&args, &[("PATH", path)], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains(
            "warning: backends[1].command: \"it-mcp-tol\" is not installed (not found on PATH); did you mean \"it-mcp-tool\"?"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: backends[2].url: not a URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("backends[0]"), "{stderr}");
    let strict = ["validate", "--strict", "--config", config.to_str().unwrap()];
    let out = switchboard(&strict, &[("PATH", path)], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("backends[1].command: \"it-mcp-tol\" is not installed"),
        "{stderr}"
    );
    // Installed, it is found.
    std::fs::rename(&tool, bin.join("it-mcp-tol")).unwrap();
    let out = switchboard(&strict[..], &[("PATH", path)], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stderr.contains("backends[1]"), "{stderr}");
}

/// A misspelt key gets the nearest key the schema allows at that place; a misspelt backend
/// name the nearest backend's.
#[tokio::test]
async fn validate_suggests_the_key_or_name_meant() {
    let dir = Dir::new("validate-typo");
    let config = dir.write(
        "sb.yaml",
        "aggregation: {priority: [remb]}\nbackends:\n  - name: remA\n    comand: x\n  - name: remB\n    url: http://127.0.0.1:9/mcp\n    hedaers: {X: y}\n",
    );
    let args = ["validate", "--config", config.to_str().unwrap()];
    let out = switchboard(&args, &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    for line in [
        "backends[0].comand: unknown key; did you mean \"command\"?",
        "backends[1].hedaers: unknown key; did you mean \"headers\"?",
        "aggregation.priority[0]: no backend is named \"remb\"; did you mean \"remB\"?",
    ] {
        assert!(stderr.contains(line), "{line} not in {stderr}");
    }
}

/// Files that hold secrets must exist and be private; `validate` says which is not.
#[cfg(unix)]
#[tokio::test]
async fn validate_checks_the_files_the_config_names() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("validate-files");
    let headers = dir.write("h.txt", "X-Key: v\n");
    std::fs::set_permissions(&headers, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = dir.write(
        "sb.yaml",
        "policy: {file: nowhere.cedar}\nbackends:\n  - name: r\n    url: http://127.0.0.1:9/mcp\n    headersFile: h.txt\n",
    );
    let args = ["validate", "--config", config.to_str().unwrap()];
    let out = switchboard(&args, &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains("warning: backends[0].headersFile: ")
            && stderr.contains("group or others may read it (mode 644)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: policy.file: cannot read ") && stderr.contains("nowhere.cedar"),
        "{stderr}"
    );
    assert!(!stderr.contains("X-Key: v") && !stdout.contains(": v\n"));
}

/// `doctor` starts each backend through the gateway's own startup and prints one row per
/// backend: the fixture with its handshake time and era, a missing command as failed (and
/// as a host problem); exit 1 when anything failed, 0 when all started.
#[tokio::test]
async fn doctor_starts_each_backend_and_prints_a_table() {
    let dir = Dir::new("doctor");
    let config = dir.write(
        "sb.yaml",
        &format!(
            "backends:\n  - name: fixture\n    command: {SWITCHBOARD}\n    args: [fixture]\n  - name: gone\n    command: it-no-such-program\n"
        ),
    );
    let out = switchboard(&["doctor", config.to_str().unwrap()], &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let header = stdout
        .lines()
        .find(|l| l.starts_with("BACKEND"))
        .unwrap_or_else(|| panic!("no table in {stdout}"));
    for column in ["KIND", "HANDSHAKE", "ERA", "RESULT"] {
        assert!(header.contains(column), "{header}");
    }
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name} in {stdout}"))
            .to_owned()
    };
    let fixture = row("fixture");
    assert!(
        fixture.contains("stdio") && fixture.contains(" ms") && fixture.contains("dual"),
        "{fixture}"
    );
    assert!(fixture.contains("ok: "), "{fixture}");
    let gone = row("gone");
    assert!(
        gone.contains("FAILED") && gone.contains("it-no-such-program"),
        "{gone}"
    );
    assert!(
        stdout.contains("problem: backends[1].command: \"it-no-such-program\" is not installed"),
        "{stdout}"
    );
    assert!(stderr.contains("1 backend(s) did not start"), "{stderr}");

    let good = dir.write(
        "good.yaml",
        &format!("backends:\n  - name: fixture\n    command: {SWITCHBOARD}\n    args: [fixture]\n"),
    );
    let out = switchboard(&["doctor", good.to_str().unwrap()], &[], &dir.0).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("all 1 backend(s) started"), "{stdout}");
}
