//! Hiding the gateway's own files by their directories. A `/dev/null` bound over a file
//! hides only the file that exists at spawn: one created later (the audit log, opened after
//! the backend started; trust state, renamed into place on every write) would show through
//! the read-only root. So each hidden file's directory (the nearest one that exists) is
//! covered with a tmpfs at spawn, its other entries bound back as they are then, and the
//! sandbox's own mounts under it (masks, listed paths, home) laid again on top, and the
//! tmpfs made read-only: inside, the directory looks as before, less the gateway's files, now and later.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{Sandbox, Scratch, SANDBOX_HOME, SEED};
/// Bound of every other mask: room for the mount points bubblewrap makes there.
pub(crate) const MASK_SIZE: u64 = 16 << 20;

/// One mount of the sandbox's own, in order.
#[derive(Debug, Clone)]
pub(crate) enum Layer {
    /// An empty tmpfs (a mask), of at most this many bytes.
    Tmpfs(PathBuf, u64),
    /// A host path bound read-only at the same place.
    Read(PathBuf),
    /// A host path bound writable at the same place.
    Write(PathBuf),
    /// The backend's home, bound writable at [`SANDBOX_HOME`] (the shared process's).
    Home(PathBuf),
    /// A process's private home: an empty tmpfs of at most this many bytes at
    /// [`SANDBOX_HOME`].
    OwnHome(u64),
    /// The backend's home, bound read-only at [`SEED`]: what a private home starts from.
    Seed(PathBuf),
}

impl Layer {
    /// Where it appears inside.
    fn at(&self) -> &Path {
        match self {
            Layer::Tmpfs(p, _) | Layer::Read(p) | Layer::Write(p) => p,
            Layer::Home(_) | Layer::OwnHome(_) => Path::new(SANDBOX_HOME),
            Layer::Seed(_) => Path::new(SEED),
        }
    }

    pub(crate) fn push(&self, argv: &mut Vec<OsString>) {
        let (flag, from) = match self {
            Layer::Tmpfs(p, size) => {
                // `--size` applies to the next `--tmpfs` (bubblewrap 0.8).
                argv.extend(["--size".into(), size.to_string().into()]);
                argv.extend(["--tmpfs".into(), p.clone().into_os_string()]);
                return;
            }
            Layer::OwnHome(size) => {
                argv.extend(["--size".into(), size.to_string().into()]);
                argv.extend(["--tmpfs".into(), SANDBOX_HOME.into()]);
                return;
            }
            Layer::Read(p) | Layer::Seed(p) => ("--ro-bind", p),
            Layer::Write(p) => ("--bind", p),
            Layer::Home(p) => ("--bind", p),
        };
        argv.extend([
            flag.into(),
            from.clone().into_os_string(),
            self.at().as_os_str().to_owned(),
        ]);
    }
}

impl Sandbox {
    /// The sandbox's own mounts in order: masks, read paths, write paths, then the home:
    /// the backend's (the shared process's), or with `private` a bounded tmpfs of the
    /// process's own and the backend's home read-only at [`SEED`] (nothing of it on the
    /// host).
    pub(crate) fn layers(&self, scratch: Scratch) -> Vec<Layer> {
        let masks = self.mask_layers(scratch);
        let read = self.read.iter().cloned().map(Layer::Read);
        let write = self.write.iter().cloned().map(Layer::Write);
        let home = match scratch.home {
            0 => vec![Layer::Home(self.home.clone())],
            size => vec![Layer::OwnHome(size), Layer::Seed(self.home.clone())],
        };
        masks.chain(read).chain(write).chain(home).collect()
    }

    /// The masks, each bounded: a backend cannot fill the host's memory through them. The
    /// scratch directories (`/tmp`, `/var/tmp`) hold their shares of the budget
    /// ([`Scratch`]); the others, meant to stay empty, [`MASK_SIZE`].
    pub(crate) fn mask_layers(&self, scratch: Scratch) -> impl Iterator<Item = Layer> {
        self.masks().into_iter().map(move |m| {
            let size = if m == Path::new("/tmp") {
                scratch.tmp
            } else if m == Path::new("/var/tmp") {
                scratch.var_tmp
            } else {
                MASK_SIZE
            };
            Layer::Tmpfs(m, size)
        })
    }

    /// Makes the masks that are meant to stay empty (all but `/tmp` and `/var/tmp`)
    /// read-only, once everything mounted under them is: the mount points bubblewrap made
    /// there stay, and nothing more can be written (16 MiB each, outside the budget). A
    /// mask a listed path is bound exactly over is left alone: `--remount-ro` acts on the
    /// topmost mount at its path, which is then that path's.
    pub(crate) fn seal_masks(layers: &[Layer], argv: &mut Vec<OsString>) {
        for layer in layers {
            let Layer::Tmpfs(p, _) = layer else {
                continue;
            };
            let scratch = p == Path::new("/tmp") || p == Path::new("/var/tmp");
            let covered = layers
                .iter()
                .any(|l| !matches!(l, Layer::Tmpfs(..)) && l.at() == p);
            if !scratch && !covered {
                argv.extend(["--remount-ro".into(), p.clone().into_os_string()]);
            }
        }
    }

    /// The directories to cover: each hidden file's nearest existing one, when the backend
    /// would see into it (not inside another hidden path), parents first. `/` cannot be covered; a file there gets
    /// `/dev/null` (when it exists).
    fn covered(&self, hidden: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut files = Vec::new();
        for f in hidden {
            // Inside another hidden path (a home in the hidden directory of default homes):
            // hidden with it.
            if hidden.iter().any(|h| h != f && f.starts_with(h)) {
                continue;
            }
            let Some(dir) = f.ancestors().skip(1).find(|d| d.is_dir()) else {
                continue;
            };
            if self.hides(dir).is_some() {
                continue;
            }
            if dir.parent().is_none() {
                files.extend(f.is_file().then(|| f.clone()));
            } else if !dirs.iter().any(|d| d == dir) {
                dirs.push(dir.to_path_buf());
            }
        }
        dirs.sort_by_key(|d| d.components().count());
        (dirs, files)
    }

    /// Covers the directories of the `hidden` files (the sandbox's own, and the other
    /// backends' homes; see the module's text).
    pub(crate) fn cover(&self, layers: &[Layer], hidden: &[PathBuf], argv: &mut Vec<OsString>) {
        let (dirs, files) = self.covered(hidden);
        for dir in dirs {
            argv.extend(["--tmpfs".into(), dir.clone().into_os_string()]);
            let writable = self.write.iter().any(|w| dir.starts_with(w));
            for entry in entries(&dir) {
                if hidden.contains(&entry) {
                    continue;
                }
                if let Ok(target) = std::fs::read_link(&entry) {
                    argv.extend(["--symlink".into(), target.into_os_string()]);
                } else {
                    argv.push(if writable { "--bind" } else { "--ro-bind" }.into());
                    argv.push(entry.clone().into_os_string());
                }
                argv.push(entry.into_os_string());
            }
            for layer in layers
                .iter()
                .filter(|l| l.at() != dir && l.at().starts_with(&dir))
            {
                layer.push(argv);
            }
            // Nothing new can be written there, as on the read-only root it replaces.
            argv.extend(["--remount-ro".into(), dir.into_os_string()]);
        }
        for f in files {
            argv.extend(["--ro-bind".into(), "/dev/null".into(), f.into_os_string()]);
        }
    }
}

/// A directory's entries as they are now, sorted (an unreadable one: none).
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    out.sort();
    out
}
