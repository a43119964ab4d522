//! Sandboxed stdio backends: the command runs inside bubblewrap (`bwrap`), in its own mount,
//! PID, IPC, UTS, user, cgroup and network namespaces (loopback only), with the host's root
//! read-only and the places where people keep secrets masked, its environment cleared, and
//! its resources bounded with `setrlimit` (through util-linux `prlimit`, so no code of ours
//! runs between `fork` and `exec`).
//!
//! What one sandboxed backend's argv looks like, in order (later mounts win):
//!
//! ```text
//! [setpriv --reuid=65534 --regid=65534 --clear-groups --]     only when the gateway is root
//! bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --new-session --cap-drop ALL
//!       --ro-bind / / --dev /dev --size S --tmpfs /dev/shm --remount-ro /dev --proc /proc
//!       --size N --tmpfs /home --size N --tmpfs /root ... /run /tmp /var/tmp   (masks)
//!       --size N --tmpfs <the gateway's HOME, the backend's home, other masked directories>
//!       --ro-bind R R ...     (filesystem.read)
//!       --bind W W ...        (filesystem.write)
//!       --bind <home> /home/switchboard                        the shared process
//!       --size S --tmpfs /home/switchboard                     a process serving one caller
//!         --ro-bind <home> /run/switchboard/seed
//!       --tmpfs D, D's entries bound back, the mounts under D again   (each directory
//!                             holding a file of the gateway's: config, secrets, state, audit log;
//!                             or another backend's home: [`Homes`], the default homes' directory)
//!       --ro-bind <gateway binary> /run/switchboard/bridge         with an allow list
//!         --ro-bind <proxy socket> /run/switchboard/egress.sock   (crate::egress)
//!       --chdir <cwd, else the sandbox's home>
//!       -- [/run/switchboard/bridge sandbox-bridge --socket /run/switchboard/egress.sock --]
//!          prlimit --as=M --nproc=P --nofile=F --core=0 -- PROGRAM ARGS...
//!       -- prlimit … -- sh -c '<copy the seed into the home, then exec>' sh cp PROGRAM ARGS...
//! ```
//!
//! `/dev` is bubblewrap's own tmpfs with the few device nodes bound in: read-only, so it
//! cannot be filled, with a bounded `/dev/shm` of its own. `S` and `N`: the shares of one
//! budget, the backend's `memory`, that its writable tmpfs hold together ([`Scratch`]).
//!
//! A process that serves one caller (a Legacy session's own, a Modern partition's, one the
//! MRTR bridge starts), and a per-session backend's shared process (which serves callers
//! whose processes start from the seed: [`crate::StdioConfig::private_home`]) gets a home that exists only
//! inside its sandbox: a tmpfs of at most its share of the budget, into which its first command copies the
//! backend's home (bound read-only), so warm `npx`/`uvx` caches still work offline (npm
//! refuses a read-only cache). Nothing of it is on the host: there is nothing for the gateway
//! to create, own, clean up or follow a link in, and it is gone with the sandbox.
//!
//! Why root drops to `nobody`: the kernel never applies `RLIMIT_NPROC` to uid 0, so a root
//! gateway's backends could fork without bound; as any other user, the count is kept per
//! user namespace, so each sandbox gets a budget of its own. It is also simply safer: a
//! third-party server never runs as the host's root.
//!
//! The environment travels as the process's environment, never as `--setenv` arguments: the
//! sandbox's PID 1 is bwrap itself, and its command line is readable inside.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::egress::{BRIDGE, BRIDGE_COMMAND, SOCKET};

/// Where the backend's own writable home (and with it the npm/uv caches) appears inside.
pub const SANDBOX_HOME: &str = "/home/switchboard";
/// Where a process with a private home sees the backend's home (read-only), which it copies
/// into its own before the program starts.
pub const SEED: &str = "/run/switchboard/seed";
/// What the scratch tmpfs (`/tmp`, `/var/tmp`, `/dev/shm`, a private home) hold together
/// when the sandbox has no `memory` limit ([`Scratch`]).
pub const SCRATCH_DEFAULT: u64 = 1 << 30;
/// The `PATH` a sandboxed backend gets unless its configuration passes one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Host directories a backend never sees (an empty tmpfs over each that exists): homes, the
/// runtime directory (sockets of daemons: a Unix socket on a read-only mount still accepts
/// connections) and the shared temporary directories (the backend gets private ones).
pub const MASKED: [&str; 5] = ["/home", "/root", "/run", "/tmp", "/var/tmp"];
/// The unprivileged user a root gateway's backends run as.
pub const NOBODY: (u32, u32) = (65534, 65534);

/// How to sandbox one stdio backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Sandbox {
    /// Host paths the backend may read (bound read-only over the masks).
    pub read: Vec<PathBuf>,
    /// Host paths the backend may write.
    pub write: Vec<PathBuf>,
    /// Directories masked besides [`MASKED`] (the gateway's own `HOME`).
    pub masked: Vec<PathBuf>,
    /// Files the backend cannot see, whether or not they exist yet: the gateway's config,
    /// secrets, state and audit log (and the directory of the default homes, see
    /// [`Homes`]). Each one's directory is covered at spawn
    /// ([`cover`](Sandbox::cover)), so a file created there later (an audit log opened after
    /// the backend started, trust state renamed into place) stays out of sight too.
    pub hidden: Vec<PathBuf>,
    /// The host directory that is the shared process's `HOME` inside ([`SANDBOX_HOME`]),
    /// and what a private home starts from ([`SEED`]); created at spawn, so package caches
    /// survive restarts.
    pub home: PathBuf,
    /// Resource limits.
    pub limits: Limits,
    /// The tools found on this host.
    pub host: Host,
    /// What it may reach through the egress proxy (`sandbox.network.allow`); `None`: no
    /// network at all.
    pub egress: Option<std::sync::Arc<crate::egress::Egress>>,
}

/// The homes of every sandboxed backend the gateway serves or has served since it started,
/// shared by all their configurations: a root gateway runs every sandbox as the same
/// `nobody`, so each hides the others' homes ([`Sandbox::launch`]'s `others`). Kept apart
/// from [`Sandbox`] (whose settings decide whether a reload restarts a backend): adding a
/// backend adds its home here, and the processes started after that hide it, without
/// restarting anyone. Never shrinks: a removed backend's home stays on the host, with what
/// it wrote.
#[derive(Debug, Clone, Default)]
pub struct Homes(std::sync::Arc<std::sync::RwLock<Vec<PathBuf>>>);

impl Homes {
    /// Adds homes (each once).
    pub fn add(&self, homes: impl IntoIterator<Item = PathBuf>) {
        let mut all = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for home in homes {
            if !all.contains(&home) {
                all.push(home);
            }
        }
    }

    /// Every home but `own`.
    pub fn others(&self, own: &Path) -> Vec<PathBuf> {
        let all = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        all.iter().filter(|h| h.as_path() != own).cloned().collect()
    }
}

/// Resource limits, applied with `setrlimit` in the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Limits {
    /// Address space per process, in bytes (`RLIMIT_AS`).
    pub memory: Option<u64>,
    /// Processes and threads of the sandbox (`RLIMIT_NPROC`, counted per user namespace).
    pub pids: Option<u64>,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// CPU cores: enforceable only with cgroup v2, which this version does not use yet.
    pub cpu: Option<f64>,
}

/// The programs the sandbox is built with, as found on this host.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    /// bubblewrap.
    pub bwrap: PathBuf,
    /// util-linux `prlimit`, run inside the sandbox.
    pub prlimit: PathBuf,
    /// A POSIX shell and coreutils `cp`, run inside the sandbox to seed a private home.
    pub sh: PathBuf,
    /// See [`sh`](Host::sh).
    pub cp: PathBuf,
    /// How a root gateway drops to an unprivileged user first.
    pub run_as: Option<RunAs>,
}

/// `setpriv` to an unprivileged uid and gid before bwrap starts.
#[derive(Debug, Clone, PartialEq)]
pub struct RunAs {
    /// util-linux `setpriv`.
    pub setpriv: PathBuf,
    /// The uid.
    pub uid: u32,
    /// The gid.
    pub gid: u32,
}

/// Why this host cannot sandbox a backend; the text names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// A program the sandbox needs is not on the gateway's `PATH`.
    #[error(
        "{program} is not installed (not on PATH): {fix}; or set `sandbox: off` for this backend"
    )]
    Missing {
        /// The program.
        program: &'static str,
        /// How to install it.
        fix: &'static str,
    },
    /// bubblewrap ran but could not build the sandbox.
    #[error(
        "bubblewrap cannot create the sandbox here ({0}): allow unprivileged user namespaces \
         (sysctl kernel.unprivileged_userns_clone=1 on older Debian; on Ubuntu 24.04 \
         sysctl kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap; \
         in a container, a seccomp profile that permits unshare and mount), or set \
         `sandbox: off` for this backend"
    )]
    Refused(String),
}

/// What to execute for one sandboxed backend.
#[derive(Debug)]
pub(crate) struct Launch {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
}

impl Host {
    /// Finds bwrap and prlimit (and setpriv, when this process is root) on `path` (the
    /// gateway's `PATH`).
    pub fn find(path: Option<&OsStr>) -> Result<Host, SandboxError> {
        let bwrap = which("bwrap", path).ok_or(SandboxError::Missing {
            program: "bwrap",
            fix: "install bubblewrap (apt-get install bubblewrap, dnf install bubblewrap)",
        })?;
        let util_linux = "install util-linux (apt-get install util-linux)";
        let prlimit = which("prlimit", path).ok_or(SandboxError::Missing {
            program: "prlimit",
            fix: util_linux,
        })?;
        let sh = which("sh", path).ok_or(SandboxError::Missing {
            program: "sh",
            fix: "install a POSIX shell (apt-get install dash)",
        })?;
        let cp = which("cp", path).ok_or(SandboxError::Missing {
            program: "cp",
            fix: "install coreutils (apt-get install coreutils)",
        })?;
        let run_as = if is_root() {
            let setpriv = which("setpriv", path).ok_or(SandboxError::Missing {
                program: "setpriv",
                fix: util_linux,
            })?;
            Some(RunAs {
                setpriv,
                uid: NOBODY.0,
                gid: NOBODY.1,
            })
        } else {
            None
        };
        Ok(Host {
            bwrap,
            prlimit,
            sh,
            cp,
            run_as,
        })
    }

    /// Builds the smallest sandbox (every namespace, the bounded read-only `/dev`, a bounded
    /// tmpfs, the limits tool) and runs `true` in it: what fails here (an old bubblewrap
    /// without `--size`, say) would fail every backend's start, so it is reported once, with
    /// the fix.
    pub fn probe(&self) -> Result<(), SandboxError> {
        let mut args = self.prefix();
        args.extend(base_mounts(1 << 20));
        args.push("--".into());
        args.push(self.prlimit.clone().into_os_string());
        args.extend(["--nproc=64", "--", "true"].map(OsString::from));
        let (program, rest) = self.program(args);
        let out = std::process::Command::new(program)
            .args(rest)
            .env_clear()
            .env("PATH", DEFAULT_PATH)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| SandboxError::Refused(format!("running bwrap failed: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.lines().next().unwrap_or("no message").trim();
        Err(SandboxError::Refused(format!(
            "{}: {said}",
            crate::Exit(out.status)
        )))
    }

    /// `[setpriv …] bwrap` and the flags every sandbox has, as one argv (program first).
    fn prefix(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        if let Some(r) = &self.run_as {
            args.push(r.setpriv.clone().into_os_string());
            args.push(format!("--reuid={}", r.uid).into());
            args.push(format!("--regid={}", r.gid).into());
            args.push("--clear-groups".into());
            args.push("--".into());
        }
        args.push(self.bwrap.clone().into_os_string());
        args.extend(
            [
                "--unshare-all",
                // No user namespace of its own inside (bubblewrap 0.8): there it could mount
                // tmpfs without bound, and reach kernel code only a namespace's root may.
                "--unshare-user",
                "--disable-userns",
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
            ]
            .map(OsString::from),
        );
        args
    }

    fn program(&self, mut argv: Vec<OsString>) -> (PathBuf, Vec<OsString>) {
        let program = PathBuf::from(argv.remove(0));
        (program, argv)
    }
}

impl Sandbox {
    /// Creates the backend's home (mode 0700, owned by the sandbox's user). Called before
    /// each spawn. The mode and owner are set through a descriptor of the directory itself,
    /// opened without following a link in its place.
    pub(crate) fn prepare(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        if let Some(parent) = self.home.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.home) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&self.home)?;
        dir.set_permissions(std::fs::Permissions::from_mode(0o700))?;
        if let Some(r) = &self.host.run_as {
            std::os::unix::fs::fchown(&dir, Some(r.uid), Some(r.gid))?;
        }
        Ok(())
    }

    /// The argv that runs `program args` sandboxed, starting in `cwd` (else the sandbox's
    /// home): with the backend's home, or with `private` a home of its own that exists only
    /// inside, seeded with a copy of the backend's (the module's text). `others`: the other
    /// backends' homes ([`Homes`]), hidden as the gateway's own files are. `socket`: the
    /// egress proxy's, when the sandbox has an allow list ([`crate::egress`]).
    pub(crate) fn launch(
        &self,
        program: &str,
        args: &[String],
        cwd: Option<&Path>,
        private: bool,
        others: &[PathBuf],
        socket: Option<&Path>,
    ) -> Launch {
        let scratch = self.scratch(private);
        let layers = self.layers(scratch);
        let mut argv = self.host.prefix();
        argv.extend(base_mounts(scratch.shm));
        for layer in &layers {
            layer.push(&mut argv);
        }
        let mut hidden = self.hidden.clone();
        for other in others {
            if *other != self.home && !hidden.contains(other) {
                hidden.push(other.clone());
            }
        }
        // Every backend's egress socket (its own comes in at `SOCKET`).
        hidden.push(crate::egress::parent().to_path_buf());
        self.cover(&layers, &hidden, &mut argv);
        let bridge = self.egress.as_ref().zip(socket);
        if let Some((egress, socket)) = bridge {
            argv.extend(["--ro-bind".into(), egress.bridge().into(), BRIDGE.into()]);
            argv.extend(["--ro-bind".into(), socket.into(), SOCKET.into()]);
        }
        Sandbox::seal_masks(&layers, &mut argv);
        // Relative to the gateway's directory, as an unsandboxed backend's would be.
        let start = cwd.map_or_else(
            || PathBuf::from(SANDBOX_HOME),
            |d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf()),
        );
        argv.push("--chdir".into());
        argv.push(start.into_os_string());
        argv.push("--".into());
        if bridge.is_some() {
            argv.extend([BRIDGE, BRIDGE_COMMAND, "--socket", SOCKET, "--"].map(OsString::from));
        }
        argv.push(self.host.prlimit.clone().into_os_string());
        argv.extend(self.limits.prlimit_args());
        argv.push("--".into());
        if private {
            argv.push(self.host.sh.clone().into_os_string());
            argv.extend(["-c".into(), seed_script().into(), "sh".into()]);
            argv.push(self.host.cp.clone().into_os_string());
        }
        argv.push(program.into());
        argv.extend(args.iter().map(OsString::from));
        let (program, args) = self.host.program(argv);
        Launch { program, args }
    }

    /// The bounds of a process's scratch tmpfs, which share one budget: the backend's
    /// `memory` ([`SCRATCH_DEFAULT`] without one), with `private` a home among them.
    pub fn scratch(&self, private: bool) -> Scratch {
        Scratch::of(self.limits.memory.unwrap_or(SCRATCH_DEFAULT), private)
    }

    /// The directories masked with an empty tmpfs, in mount order (parents first), each
    /// once, only those that exist (a read-only root cannot grow a mount point). The
    /// backend's home is among them: a process sees it at [`SANDBOX_HOME`] (the shared
    /// one) or [`SEED`] (the others) only.
    pub fn masks(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        let all = MASKED
            .iter()
            .map(PathBuf::from)
            .chain(self.masked.clone())
            .chain([self.home.clone()]);
        for dir in all {
            if dir.is_dir() && !out.iter().any(|o| dir.starts_with(o)) {
                out.push(dir);
            }
        }
        out
    }

    /// Whether `path` is visible inside: under a read or write path, or under no mask.
    /// Returns the mask that hides it.
    pub fn hides(&self, path: &Path) -> Option<PathBuf> {
        if self
            .read
            .iter()
            .chain(&self.write)
            .any(|p| path.starts_with(p))
        {
            return None;
        }
        self.masks().into_iter().find(|m| path.starts_with(m))
    }

    /// One line saying what contains this backend and which limits applied (and which did
    /// not), for the startup log.
    pub fn describe(&self) -> String {
        let who = match &self.host.run_as {
            Some(r) => format!(", as uid {} (the gateway runs as root)", r.uid),
            None => String::new(),
        };
        let l = &self.limits;
        let mut applied = Vec::new();
        if let Some(m) = l.memory {
            applied.push(format!("address space {} per process", bytes(m)));
        }
        if let Some(p) = l.pids {
            applied.push(format!("{p} processes"));
        }
        if let Some(f) = l.open_files {
            applied.push(format!("{f} open files"));
        }
        applied.push("no core dumps".to_owned());
        let cpu = match l.cpu {
            Some(c) => format!("; cpu {c} not enforced"),
            None => String::new(),
        };
        let network = match &self.egress {
            None => "no network".to_owned(),
            Some(e) => {
                let allowed: Vec<String> = e
                    .allow()
                    .entries()
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                format!(
                    "network only through the egress proxy, to {}",
                    allowed.join(", ")
                )
            }
        };
        format!(
            "bubblewrap (mount, pid, ipc, uts, user, cgroup and network namespaces; {network}){who}; \
             limits: setrlimit ({}), not cgroup v2 ({}){cpu}",
            applied.join(", "),
            cgroup_v2()
        )
    }
}

impl Limits {
    fn prlimit_args(&self) -> Vec<OsString> {
        let mut out = Vec::new();
        if let Some(m) = self.memory {
            out.push(format!("--as={m}").into());
        }
        if let Some(p) = self.pids {
            out.push(format!("--nproc={p}").into());
        }
        if let Some(f) = self.open_files {
            out.push(format!("--nofile={f}").into());
        }
        // A crashing backend's memory image must not land anywhere (a core pattern may pipe
        // it to a host daemon).
        out.push("--core=0".into());
        out
    }
}

/// The root, read-only; `/dev` bubblewrap's (device nodes bound in), read-only, with a
/// `/dev/shm` of at most `shm` bytes; `/proc`.
fn base_mounts(shm: u64) -> Vec<OsString> {
    let mut out: Vec<OsString> = ["--ro-bind", "/", "/", "--dev", "/dev", "--size"]
        .map(OsString::from)
        .into();
    out.push(shm.to_string().into());
    out.extend(
        [
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--proc",
            "/proc",
        ]
        .map(OsString::from),
    );
    out
}

/// What a process with a private home runs first, as `sh -c SCRIPT sh CP PROGRAM ARGS…`:
/// copies the backend's home ([`SEED`], read-only) into its own ([`SANDBOX_HOME`]; links as
/// links, never followed), then becomes the program. A copy that fails (a file the
/// sandbox's user cannot read, a home larger than the bound) says so on stderr and the
/// process ends before the program starts: its start fails, as any backend's that exits.
fn seed_script() -> String {
    format!(
        "\"$1\" -R --no-dereference --preserve=mode,timestamps,links {SEED}/. {SANDBOX_HOME}/ \
         || {{ echo \"switchboard: copying the backend's home ({SEED}) into this process's own \
         home failed; the backend does not start\" >&2; exit 70; }}; shift; exec \"$@\""
    )
}

/// Why cgroup v2 limits (the only way to bound CPU) are not applied on this host.
pub fn cgroup_v2() -> &'static str {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let v2_root = mounts.lines().any(|l| {
        let mut f = l.split_whitespace();
        (f.next(), f.next(), f.next()) == (Some("cgroup2"), Some("/sys/fs/cgroup"), Some("cgroup2"))
    });
    if v2_root {
        "cgroup v2 is mounted here, but this version does not use it yet"
    } else {
        "this host has no cgroup v2 hierarchy at /sys/fs/cgroup"
    }
}

fn bytes(n: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if n.is_multiple_of(GIB) {
        format!("{} GiB", n / GIB)
    } else if n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

/// Whether this process runs as root (its `/proc/self` belongs to its effective uid).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The first executable `name` on `path`.
pub fn which(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = path?;
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

mod cover;
mod scratch;
pub use scratch::Scratch;
#[cfg(test)]
mod tests;
