//! The bridge, run inside the sandbox as the gateway binary's hidden `sandbox-bridge`
//! subcommand, before the resource limits (so the gateway's binary is not counted against
//! the backend's address space; the program it starts is limited as before): it listens on
//! `127.0.0.1:0` in the sandbox's network namespace, starts the program as its child with
//! the proxy variables pointing there, forwards each connection to the proxy's Unix socket
//! (at most [`MAX_CONNECTIONS`] at once; the proxy bounds idle time), passes `SIGTERM`,
//! `SIGINT` and `SIGHUP` on to the child, and exits with the child's status (a signal's
//! death as 128 + its number, as a shell reports it).
//!
//! It makes itself non-dumpable first: the backend runs as the same user, and must not
//! attach to (and so escape the limits through) a process that has none.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use tokio::net::{TcpListener, UnixStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Semaphore;

/// Connections forwarded at once (the proxy's own cap is per backend).
pub const MAX_CONNECTIONS: usize = 64;

/// The variables the program gets, all set to the bridge's address.
pub const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];
/// The variables removed: nothing bypasses the proxy (there is nothing to reach without it).
pub const NO_PROXY_VARS: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// Runs `program args` behind the bridge to `socket`; returns its exit code.
pub async fn run(socket: &Path, program: &OsString, args: &[OsString]) -> std::io::Result<i32> {
    not_dumpable();
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let url = format!("http://{}", listener.local_addr()?);
    let mut command = tokio::process::Command::new(program);
    command.args(args);
    for var in PROXY_VARS {
        command.env(var, &url);
    }
    for var in NO_PROXY_VARS {
        command.env_remove(var);
    }
    // Listened for before the program starts: a signal sent once it runs (its first output
    // read, say) is passed on, never the bridge's own death leaving the program behind.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut child = command.spawn()?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let forward_signal = tokio::select! {
            status = child.wait() => return Ok(code(status?)),
            accepted = listener.accept() => {
                if let (Ok((tcp, _)), Ok(permit)) = (accepted, permits.clone().try_acquire_owned()) {
                    let socket = socket.to_path_buf();
                    tokio::spawn(async move {
                        let mut tcp = tcp;
                        if let Ok(mut unix) = UnixStream::connect(&socket).await {
                            let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                        }
                        drop(permit);
                    });
                }
                None
            }
            _ = term.recv() => Some(libc::SIGTERM),
            _ = int.recv() => Some(libc::SIGINT),
            _ = hup.recv() => Some(libc::SIGHUP),
        };
        if let (Some(sig), Some(pid)) = (forward_signal, pid) {
            pass_on(pid, sig);
        }
    }
}

/// Nobody of the same user may attach to this process or read its memory.
#[allow(unsafe_code)]
fn not_dumpable() {
    // SAFETY: prctl(PR_SET_DUMPABLE) takes plain integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// Sends `sig` to the child `pid` (not yet reaped: its `wait` has not returned).
#[allow(unsafe_code)]
fn pass_on(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes a pid and a signal number and touches no memory.
    unsafe {
        libc::kill(pid, sig);
    }
}

fn code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}
