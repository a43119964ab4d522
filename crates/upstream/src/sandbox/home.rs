//! Private homes: every process of a backend but its one shared process (a Legacy session's
//! own, a Modern partition's, one the MRTR bridge starts) gets a home of its own, so what one
//! caller's process writes to `$HOME` (or to its working directory, which defaults to it)
//! no other caller's process can read.
//!
//! A private home is a fresh directory beside the backend's home (`<home>.sessions/<pid>-<n>`,
//! mode 0700, owned by the sandbox's user), seeded with a copy of the backend's home so warm
//! `npx`/`uvx` caches still work offline (npm refuses to run from a read-only cache, so a
//! read-only bind of the backend's home would not do). The copy runs inside a sandbox of the
//! backend's own (as its user, the gateway's files hidden, no symbolic link followed), so
//! whatever the backend's shared process planted in its home — a link to a file of the
//! gateway's, say — copies nothing the backend could not read itself. The home is removed
//! when its process has ended ([`PrivateHome`]'s owner is the process's waiter), and what a
//! killed gateway left behind is removed at the next start.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::warn;

use super::{Layer, RunAs, Sandbox, SANDBOX_HOME};

/// One process's own home; removed when dropped (off the async runtime: see
/// [`crate::stdio`]'s waiter).
#[derive(Debug)]
pub(crate) struct PrivateHome {
    path: PathBuf,
}

impl PrivateHome {
    /// Where it is on the host.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateHome {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

/// Names private homes uniquely within this process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// The directories of private homes already swept of a dead gateway's leftovers.
static SWEPT: parking_lot::Mutex<Vec<PathBuf>> = parking_lot::Mutex::new(Vec::new());

impl Sandbox {
    /// Where this backend's processes' private homes are: beside its home.
    pub fn sessions_dir(&self) -> PathBuf {
        let mut dir = self.home.clone().into_os_string();
        dir.push(".sessions");
        PathBuf::from(dir)
    }

    /// A new private home, seeded with a copy of the backend's home. Blocking file work:
    /// called on the forking thread, with the spawn.
    pub(crate) fn private_home(&self) -> std::io::Result<PrivateHome> {
        let dir = self.sessions_dir();
        sweep_once(&dir);
        let name = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        // Only a dead gateway with this pid can have left one of this name: stale.
        if path.exists() {
            remove(&path);
        }
        private_dir(&path, self.host.run_as.as_ref(), false)?;
        let home = PrivateHome { path };
        self.seed(home.path());
        Ok(home)
    }

    /// Copies the backend's home into `to`, inside the backend's sandbox (its home bound
    /// read-only at its host path, `to` at [`SANDBOX_HOME`]). A copy that fails (a file the
    /// sandbox's user cannot read) leaves what it copied: the process starts with a colder
    /// cache, never with another's data.
    fn seed(&self, to: &Path) {
        let layers: Vec<Layer> = self
            .mask_layers()
            .chain([
                Layer::Read(self.home.clone()),
                Layer::Home(to.to_path_buf()),
            ])
            .collect();
        let mut from = self.home.clone().into_os_string();
        from.push("/.");
        // Copy-on-write where the filesystem can (btrfs, XFS): then no data is copied.
        let flags = [
            "-R",
            "--no-dereference",
            "--preserve=mode,timestamps,links",
            "--reflink=auto",
        ];
        let args: Vec<OsString> = flags
            .into_iter()
            .map(OsString::from)
            .chain([from, SANDBOX_HOME.into()])
            .collect();
        let launch = self.argv(&layers, None, "cp", &args);
        let ran = std::process::Command::new(&launch.program)
            .args(&launch.args)
            .env_clear()
            .env("PATH", super::DEFAULT_PATH)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .output();
        match ran {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                let said = String::from_utf8_lossy(&out.stderr);
                let said = said
                    .lines()
                    .next()
                    .unwrap_or("no message")
                    .trim()
                    .to_owned();
                warn!(
                    home = %to.display(),
                    "copying the backend's home into a private one: {}: {said}",
                    crate::Exit(out.status)
                );
            }
            Err(e) => warn!(error = %e, "copying the backend's home into a private one failed"),
        }
    }
}

/// Creates `dir`, mode 0700, owned by the sandbox's user when the gateway is root. With
/// `parents`, its missing parents are created too (with the usual mode: the sandbox's user
/// must reach through them) and an existing `dir` is made so; else it must be new.
pub(crate) fn private_dir(
    dir: &Path,
    run_as: Option<&RunAs>,
    parents: bool,
) -> std::io::Result<()> {
    if let Some(parent) = dir.parent().filter(|_| parents) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if !(parents && e.kind() == std::io::ErrorKind::AlreadyExists) => return Err(e),
        _ => {}
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    if let Some(r) = run_as {
        std::os::unix::fs::chown(dir, Some(r.uid), Some(r.gid))?;
    }
    Ok(())
}

/// Once per directory and process: removes the private homes a gateway that is gone (killed,
/// so its processes' waiters never ran) left there.
fn sweep_once(dir: &Path) {
    {
        let mut swept = SWEPT.lock();
        if swept.iter().any(|d| d == dir) {
            return;
        }
        swept.push(dir.to_path_buf());
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if pid != std::process::id() && !alive {
            remove(&entry.path());
        }
    }
}

/// Removes a private home (its process has ended). A directory its process made
/// unwritable is opened up first; what cannot be removed is logged.
fn remove(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    open_up(path);
    if let Err(e) = std::fs::remove_dir_all(path) {
        warn!(home = %path.display(), error = %e, "could not remove a private home");
    }
}

/// Makes every directory under `dir` (links not followed) the owner's to change.
fn open_up(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            open_up(&entry.path());
        }
    }
}
