//! The trust state file: pins and pending definitions, as JSON. The gateway and the
//! `switchboard trust` command both change it, so every change is a read-modify-write under
//! an exclusive lock on a sibling `.lock` file, written to a temporary file (mode 0600) and
//! renamed over the old one: a reader sees the old state or the new one, never half, and
//! neither writer loses the other's change.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Pins kept at most (and as many pending definitions); beyond it a new tool is served
/// unpinned, with a warning (`state::classify`). With [`MAX_DEFINITION_BYTES`] this bounds the
/// file near 1 GiB in the worst case.
pub const MAX_PINS: usize = 8192;
/// Pins (and, separately, pending definitions) one backend may hold: a backend listing
/// thousands of tools must not take every other backend's room.
pub const MAX_PINS_PER_BACKEND: usize = MAX_PINS / 4;

/// Largest definition kept beside its digest, in bytes of canonical JSON: larger ones keep
/// the digest only (a change is still caught; its diff then names every field).
pub const MAX_DEFINITION_BYTES: usize = 64 * 1024;

/// Largest state file read, in bytes (a file that grew past every bound is refused, not
/// read into memory).
pub const MAX_FILE_BYTES: u64 = 1536 * 1024 * 1024;

/// Why a trust state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("trust state {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("trust state {path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("trust state {0} is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge(PathBuf),
}

/// The file's content. Keys are `BACKEND/TOOL` (a backend name has no `/`, so the first one
/// splits them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustFile {
    #[serde(default = "version")]
    pub version: u32,
    /// Approved definitions.
    #[serde(default)]
    pub pins: BTreeMap<String, Pin>,
    /// Definitions seen but not pinned: a changed pinned tool, or a new one under
    /// `newTools: quarantine`. `approve` moves one to `pins`.
    #[serde(default)]
    pub pending: BTreeMap<String, Pending>,
}

fn version() -> u32 {
    1
}

impl Default for TrustFile {
    fn default() -> Self {
        TrustFile {
            version: version(),
            pins: BTreeMap::new(),
            pending: BTreeMap::new(),
        }
    }
}

/// One approved definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// Hex SHA-256 of the canonical pinned fields.
    pub digest: String,
    /// Those fields, when small enough to keep (for the audit diff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
    pub pinned_at: String,
}

/// One definition waiting for approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
    pub seen_at: String,
    /// `changed` (differs from its pin) or `new` (never pinned).
    pub reason: String,
    /// The pinned fields that differ from the pin.
    #[serde(default)]
    pub changed: Vec<String>,
    /// Hidden and refused until approved (false in `warn` mode: served, only recorded).
    pub quarantined: bool,
}

impl TrustFile {
    /// Moves `key`'s pending definition to its pin. False when nothing is pending for it.
    pub fn approve(&mut self, key: &str, now: &str) -> bool {
        let Some(p) = self.pending.remove(key) else {
            return false;
        };
        self.pins.insert(
            key.to_owned(),
            Pin {
                digest: p.digest,
                definition: p.definition,
                pinned_at: now.to_owned(),
            },
        );
        true
    }

    /// Forgets `key`'s pin and pending definition (it is new at next sight). False when
    /// there was neither.
    pub fn revoke(&mut self, key: &str) -> bool {
        let pin = self.pins.remove(key).is_some();
        self.pending.remove(key).is_some() || pin
    }
}

/// `BACKEND/TOOL`.
pub fn key(backend: &str, tool: &str) -> String {
    format!("{backend}/{tool}")
}

/// The state at `path`: empty when the file does not exist.
pub fn load(path: &Path) -> Result<TrustFile, StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TrustFile::default()),
        Err(e) => return Err(io(e)),
    };
    if file.metadata().map_err(io)?.len() > MAX_FILE_BYTES {
        return Err(StoreError::TooLarge(path.to_owned()));
    }
    serde_json::from_reader(std::io::BufReader::new(file)).map_err(|source| StoreError::Parse {
        path: path.to_owned(),
        source,
    })
}

/// What tells one version of the file from another: modification time, inode and length.
/// The time alone is not enough: Linux stamps files from a coarse clock (a few ms), so two
/// writes in a row may share it; every write here is a new file (rename), so a new inode.
pub type Stamp = (std::time::SystemTime, u64, u64);

/// `path`'s [`Stamp`] (`None`: it does not exist or cannot be read).
pub fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some((meta.modified().ok()?, inode, meta.len()))
}

/// Reads `path` under its lock, lets `change` edit it, and writes it back when `change`
/// says it changed. Returns `change`'s answer, the state as written (or read) and its stamp.
pub fn update<R>(
    path: &Path,
    change: impl FnOnce(&mut TrustFile) -> (bool, R),
) -> Result<(R, TrustFile, Option<Stamp>), StoreError> {
    let io = |source| StoreError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(sibling(path, "lock"))
        .map_err(io)?;
    // Held until `lock` is dropped at the end of this function.
    lock.lock().map_err(io)?;
    let mut state = load(path)?;
    let (changed, answer) = change(&mut state);
    if changed {
        write_atomic(path, &state).map_err(io)?;
    }
    // Taken under the lock: no other writer's version can be mistaken for this one.
    Ok((answer, state, stamp(path)))
}

fn write_atomic(path: &Path, state: &TrustFile) -> std::io::Result<()> {
    let tmp = sibling(path, "tmp");
    let mut text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    text.push(b'\n');
    // A fresh file, never an existing one: `create_new` (O_EXCL) refuses a symlink planted at
    // the temporary name, which truncating would follow. Writers hold the lock, so a
    // leftover can only be a crashed writer's (or a planted link): removed first.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = open_private(&tmp)?;
    file.write_all(&text)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

#[cfg(unix)]
fn open_private(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn open_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create_new(true).write(true).open(path)
}

/// `path` with `.EXT` appended to its file name.
fn sibling(path: &Path, ext: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(ext);
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sb-trust-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("trust.json")
    }

    #[test]
    fn updates_round_trip_privately_and_approve_moves_pending() {
        let path = temp("store");
        assert_eq!(load(&path).unwrap(), TrustFile::default());
        let pending = Pending {
            digest: "d1".into(),
            definition: None,
            seen_at: "t".into(),
            reason: "new".into(),
            changed: vec![],
            quarantined: true,
        };
        update(&path, |s| {
            s.pending.insert(key("a", "echo"), pending.clone());
            (true, ())
        })
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (approved, state, _) = update(&path, |s| {
            let ok = s.approve("a/echo", "now");
            (ok, ok)
        })
        .unwrap();
        assert!(approved);
        assert!(state.pending.is_empty());
        assert_eq!(load(&path).unwrap().pins["a/echo"].digest, "d1");
        let (again, _, _) = update(&path, |s| {
            let ok = s.approve("a/echo", "now");
            (ok, ok)
        })
        .unwrap();
        assert!(!again, "nothing pending any more");
        let (revoked, state, _) = update(&path, |s| {
            let ok = s.revoke("a/echo");
            (ok, ok)
        })
        .unwrap();
        assert!(revoked && state.pins.is_empty());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    /// A symlink planted at the temporary name is replaced, never written through.
    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_at_the_temporary_name_is_not_followed() {
        let path = temp("symlink");
        let dir = path.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let victim = dir.join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, sibling(&path, "tmp")).unwrap();
        update(&path, |s| {
            s.pins.insert(
                key("a", "echo"),
                Pin {
                    digest: "d".into(),
                    definition: None,
                    pinned_at: "t".into(),
                },
            );
            (true, ())
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(load(&path).unwrap().pins["a/echo"].digest, "d");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_broken_file_is_an_error_not_an_empty_state() {
        let path = temp("broken");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(load(&path), Err(StoreError::Parse { .. })));
        assert!(update(&path, |_| (true, ())).is_err());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
