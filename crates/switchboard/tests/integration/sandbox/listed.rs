//! A sandbox's listed paths are resolved at load (`..` included) and may not name the
//! gateway's own files or a backend's home: `validate` names each offending entry by its
//! key, and `serve` refuses a listed path that holds a file only its flags name.

use super::{ready, Dir, HOSTILE, SB};

fn run(args: &[&str], dir: &std::path::Path) -> (Option<i32>, String) {
    let out = std::process::Command::new("timeout")
        .arg("30")
        .arg(SB)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn listed_paths_that_name_the_gateway_s_files_or_a_home_are_refused() {
    if !ready("listed") {
        return;
    }
    let dir = Dir::new("listed");
    dir.write("sb.secrets.env", "UNUSED=1\n", 0o600);
    dir.open_dir("data/sub");
    dir.open_dir("out");
    dir.open_dir("homes/b");
    let yaml = format!(
        "secretsFile: sb.secrets.env\nbackends:\n\
         \x20 - name: a\n    command: python3\n    args: [{HOSTILE}]\n\
         \x20   sandbox:\n      filesystem:\n\
         \x20       read: [data/sub/../../data/sub/../../sb.secrets.env, data]\n\
         \x20       write: [out, homes/b/../../homes]\n\
         \x20 - name: b\n    command: python3\n    args: [{HOSTILE}]\n\
         \x20   sandbox: {{home: homes/x/../b}}\n"
    );
    let config = dir.write("sb.yaml", &yaml, 0o644);
    let (code, text) = run(&["validate", "--config", config.to_str().unwrap()], &dir.0);
    assert_eq!(code, Some(1), "{text}");
    let real = std::fs::canonicalize(&dir.0).unwrap();
    let secrets = real.join("sb.secrets.env");
    let read0 = format!(
        "backends[0].sandbox.filesystem.read[0]: {} is or contains {}, a file of the gateway's own",
        secrets.display(),
        secrets.display()
    );
    assert!(text.contains(&read0), "{text}");
    let write1 = format!(
        "backends[0].sandbox.filesystem.write[1]: {} overlaps backend b's home ({})",
        real.join("homes").display(),
        real.join("homes/b").display()
    );
    assert!(text.contains(&write1), "{text}");
    assert!(
        !text.contains("read[1]"),
        "data holds nothing of the gateway's: {text}"
    );
    assert!(!text.contains("write[0]"), "{text}");

    // A file only a flag names (the policy) is known at `serve`: refused there.
    let policy = dir.write(
        "data/policy.cedar",
        "permit(principal, action, resource);",
        0o644,
    );
    let yaml = format!(
        "backends:\n\
         \x20 - name: a\n    command: python3\n    args: [{HOSTILE}]\n\
         \x20   sandbox: {{filesystem: {{read: [data]}}}}\n"
    );
    let config = dir.write("ok.yaml", &yaml, 0o644);
    let config = config.to_str().unwrap();
    let (code, text) = run(&["validate", "--config", config], &dir.0);
    assert_eq!(code, Some(0), "{text}");
    let policy = policy.to_str().unwrap();
    let serve = [
        "serve", "--config", config, "--policy", policy, "--port", "0",
    ];
    let (code, text) = run(&serve, &dir.0);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("backend a: sandbox.filesystem.read[0]: ")
            && text.contains("policy.cedar, a file of the gateway's own"),
        "{text}"
    );
}

/// A sandboxed backend's `env` setting a dynamic loader variable is refused by `validate`
/// (its launchers run on the host with that environment), naming the key; the same `env`
/// unsandboxed is the backend's own business and passes.
#[test]
fn a_loader_variable_in_a_sandboxed_env_is_refused() {
    if !ready("listed-loader") {
        return;
    }
    let dir = Dir::new("listed-loader");
    let backend = |sandbox: &str| {
        format!(
            "backends:\n\
             \x20 - name: a\n    command: python3\n    args: [{HOSTILE}]\n\
             \x20   env: {{LD_PRELOAD: /srv/out/x.so, LANG: C.UTF-8}}\n{sandbox}"
        )
    };
    let sandboxed = dir.write("sandboxed.yaml", &backend("    sandbox: on\n"), 0o644);
    let (code, text) = run(
        &["validate", "--config", sandboxed.to_str().unwrap()],
        &dir.0,
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("backends[0].env.LD_PRELOAD"), "{text}");
    assert!(!text.contains("env.LANG"), "{text}");
    let plain = dir.write("plain.yaml", &backend(""), 0o644);
    let (code, text) = run(&["validate", "--config", plain.to_str().unwrap()], &dir.0);
    assert_eq!(code, Some(0), "{text}");
}
