//! The command that starts a stdio backend: the program itself, or the program inside its
//! sandbox ([`crate::sandbox`]). Every start goes through here (the shared process, its
//! restarts, per-session processes, Modern partitions and MRTR processes), so a sandboxed
//! backend is sandboxed on every path.

use std::process::Stdio;

use tokio::process::Command;

use crate::sandbox::{Sandbox, DEFAULT_PATH, SANDBOX_HOME};
use crate::StdioConfig;

/// The command for `config`, its pipes set up, killed with the gateway and in a process group
/// of its own.
pub(crate) fn command(config: &StdioConfig) -> std::io::Result<Command> {
    let mut command = match &config.sandbox {
        None => plain(config),
        Some(sandbox) => sandboxed(config, sandbox)?,
    };
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    crate::orphan::die_with_parent(&mut command);
    crate::orphan::own_group(&mut command);
    crate::orphan::only_stdio(&mut command);
    Ok(command)
}

/// The program in the gateway's environment (less what it withholds) and directory.
fn plain(config: &StdioConfig) -> Command {
    let mut command = Command::new(&config.program);
    command
        .args(&config.args)
        .envs(config.env.iter().map(|(k, v)| (k, v)));
    for name in &config.withheld {
        if !config.env.iter().any(|(k, _)| k == name) {
            command.env_remove(name);
        }
    }
    if let Some(dir) = &config.cwd {
        command.current_dir(dir);
    }
    command
}

/// bwrap around the program, with nothing of the gateway's environment: a minimal `PATH`,
/// the sandbox's `HOME`, `LANG`, and what the configuration passes.
fn sandboxed(config: &StdioConfig, sandbox: &Sandbox) -> std::io::Result<Command> {
    sandbox.prepare()?;
    let owner = sandbox.host.run_as.as_ref().map(|r| (r.uid, r.gid));
    let socket = match &sandbox.egress {
        Some(egress) => Some(egress.socket(owner).map_err(std::io::Error::other)?),
        None => None,
    };
    let launch = sandbox.launch(
        &config.program,
        &config.args,
        config.cwd.as_deref(),
        config.private_home,
        &config.homes.others(&sandbox.home),
        socket.as_deref(),
    );
    let mut command = Command::new(launch.program);
    command.args(launch.args).env_clear().current_dir("/");
    for (key, value) in sandbox_env(&config.env) {
        command.env(key, value);
    }
    Ok(command)
}

/// The sandbox's environment: the basics, then `given` (which may replace them). A sandbox
/// has no network, which npm and uv are told, so `npx -y PKG` and `uvx PKG` start from the
/// home's cache at once instead of retrying the registry until the startup timeout.
pub(crate) fn sandbox_env(given: &[(String, String)]) -> Vec<(String, String)> {
    let lang = std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".to_owned());
    let mut env: Vec<(String, String)> = [
        ("PATH", DEFAULT_PATH),
        ("HOME", SANDBOX_HOME),
        ("LANG", &lang),
        ("npm_config_offline", "true"),
        ("UV_OFFLINE", "1"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .into();
    for (key, value) in given {
        env.retain(|(k, _)| k != key);
        env.push((key.clone(), value.clone()));
    }
    env
}
