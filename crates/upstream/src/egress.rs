//! The egress proxy of a sandboxed backend with a `sandbox.network.allow` list.
//!
//! A sandbox has its own network namespace: loopback only, no DNS. A backend that may reach
//! some `host:port`s gets, besides its sandbox:
//!
//! - **on the host**, a proxy of its own ([`proxy`]): HTTP CONNECT and plain absolute-form
//!   HTTP on a Unix socket in a private directory, enforcing the allow list, resolving
//!   names itself, refusing everything else with `403` and a log line. Started on the
//!   backend's first spawn, shared by all its processes (the shared one, per-session ones,
//!   partitions), stopped with every task it runs and its socket removed when the last
//!   configuration holding it is dropped (the backend removed or replaced).
//! - **inside the sandbox**, the socket bound read-only at [`SOCKET`] and the gateway's own
//!   binary at [`BRIDGE`], which runs first ([`bridge`]): it listens on `127.0.0.1:PORT`,
//!   starts the program as its child with `HTTP_PROXY`, `HTTPS_PROXY`, `http_proxy`,
//!   `https_proxy` set to `http://127.0.0.1:PORT` (and `NO_PROXY` removed), forwards each
//!   connection to the socket, and exits with the program's status.
//!
//! What this contains: a client that honours the proxy variables reaches the listed
//! targets and nothing else. What it does not: anything that ignores them simply has no
//! network (no route, no DNS), so nothing is reached around the proxy either.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::{CancellationToken, DropGuard};

pub mod allow;
pub mod bridge;
mod idle;
mod proxy;
#[cfg(test)]
mod tests;

pub use allow::{AllowList, Host, Target};
pub use proxy::Limits;

/// Where the proxy's socket appears inside the sandbox.
pub const SOCKET: &str = "/run/switchboard/egress.sock";
/// Where the bridge (the gateway's own binary) appears inside the sandbox.
pub const BRIDGE: &str = "/run/switchboard/bridge";
/// The bridge's subcommand of the gateway binary.
pub const BRIDGE_COMMAND: &str = "sandbox-bridge";

/// What went wrong with an allow-list entry, a proxied request, or the proxy's start.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// A host (or `host:port`) that is not one.
    #[error("{0}")]
    Host(&'static str),
    /// A request the proxy cannot serve as asked.
    #[error("{0}")]
    Request(&'static str),
    /// The proxy's socket could not be set up.
    #[error("the egress proxy's socket {path}: {source}")]
    Socket {
        /// The socket or its directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One backend's egress: its allow list, and its proxy once started.
pub struct Egress {
    backend: String,
    allow: AllowList,
    limits: Limits,
    /// The program bound in at [`BRIDGE`]: the gateway's own executable.
    bridge: PathBuf,
    running: Mutex<Option<Running>>,
}

/// A started proxy: its socket, removed (with its directory) and every task stopped when
/// dropped.
struct Running {
    dir: PathBuf,
    socket: PathBuf,
    _stop: DropGuard,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("backend", &self.backend)
            .field("allow", &self.allow)
            .field("limits", &self.limits)
            .field("bridge", &self.bridge)
            .finish_non_exhaustive()
    }
}

/// Two egresses are the same configuration when they allow the same for the same backend
/// with the same bridge (whether either has started does not matter). Its `Debug` says the
/// same and no more: a reload restarts a backend when its configuration's `Debug` changes.
impl PartialEq for Egress {
    fn eq(&self, other: &Self) -> bool {
        (&self.backend, &self.allow, &self.limits, &self.bridge)
            == (&other.backend, &other.allow, &other.limits, &other.bridge)
    }
}

impl Egress {
    /// The egress of `backend`; `bridge` is the gateway's own executable.
    pub fn new(backend: &str, allow: AllowList, limits: Limits, bridge: PathBuf) -> Egress {
        Egress {
            backend: backend.to_owned(),
            allow,
            limits,
            bridge,
            running: Mutex::new(None),
        }
    }

    /// The allow list.
    pub fn allow(&self) -> &AllowList {
        &self.allow
    }

    /// The executable bound in as the bridge.
    pub fn bridge(&self) -> &Path {
        &self.bridge
    }

    /// The proxy's socket on the host, the proxy started first if it has not been (inside
    /// a tokio runtime). `owner`: the uid and gid the sandboxes run as when the gateway is
    /// root (they must reach and connect to the socket); otherwise they are the gateway's.
    pub fn socket(&self, owner: Option<(u32, u32)>) -> Result<PathBuf, EgressError> {
        let mut running = self.running.lock();
        if let Some(r) = running.as_ref() {
            return Ok(r.socket.clone());
        }
        let (dir, socket, listener) = bind(&self.backend, owner)?;
        let stop = CancellationToken::new();
        let proxy = Arc::new(proxy::Proxy::new(
            &self.backend,
            self.allow.clone(),
            self.limits,
        ));
        tokio::spawn(proxy.serve(listener, stop.clone()));
        *running = Some(Running {
            dir,
            socket: socket.clone(),
            _stop: stop.drop_guard(),
        });
        Ok(socket)
    }
}

/// The directory every egress socket of this process lives under (one directory per backend
/// inside). Every sandbox hides it ([`crate::sandbox::Sandbox`]'s launch), so a backend that
/// may read the temporary directory (`read: [/tmp]`, or a `TMPDIR` outside the masks) cannot
/// reach another backend's proxy, and with it that backend's allow list.
pub fn parent() -> &'static Path {
    static PARENT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PARENT.get_or_init(|| std::env::temp_dir().join(format!("sb-egress-{}", std::process::id())))
}

/// [`parent`], made by this process (0700, or 0711 for a root gateway whose sandboxes run
/// as another user); one that exists already must be a directory of this user, not a link.
fn make_parent(mode: u32) -> std::io::Result<&'static Path> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let dir = parent();
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => Ok(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir)?;
            // This process's effective uid owns its `/proc/self`.
            let me = std::fs::metadata("/proc/self")?.uid();
            if meta.is_dir() && meta.uid() == me {
                Ok(dir)
            } else {
                Err(std::io::Error::other(
                    "exists and is not this user's directory",
                ))
            }
        }
        Err(e) => Err(e),
    }
}

/// A fresh private directory under [`parent`], and the listening socket in it: the directory
/// is created (never reused: a name someone else made fails), mode 0700, or 0711 with the
/// socket owned by the sandboxes' user when the gateway is root.
fn bind(
    backend: &str,
    owner: Option<(u32, u32)>,
) -> Result<(PathBuf, PathBuf, tokio::net::UnixListener), EgressError> {
    use std::os::unix::fs::DirBuilderExt;
    let fail = |path: &Path| {
        let path = path.to_path_buf();
        move |source| EgressError::Socket { path, source }
    };
    let mut random = [0u8; 8];
    getrandom::fill(&mut random)
        .map_err(|e| std::io::Error::other(e.to_string()))
        .map_err(fail(parent()))?;
    let tag: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let mode = if owner.is_some() { 0o711 } else { 0o700 };
    let dir = make_parent(mode).map_err(fail(parent()))?.join(tag);
    std::fs::DirBuilder::new()
        .mode(mode)
        .create(&dir)
        .map_err(fail(&dir))?;
    let socket = dir.join("sock");
    let listening = listen(&socket, owner).map_err(fail(&socket));
    match listening {
        Ok(listener) => {
            tracing::debug!(backend, socket = %socket.display(), "sandbox egress proxy listening");
            Ok((dir, socket, listener))
        }
        Err(e) => {
            let _ = std::fs::remove_file(&socket);
            let _ = std::fs::remove_dir(&dir);
            Err(e)
        }
    }
}

/// The listening socket at `path`: mode 0600, owned by `owner` when given.
fn listen(path: &Path, owner: Option<(u32, u32)>) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    listener.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(listener)
}
