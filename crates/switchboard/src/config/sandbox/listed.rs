//! What a sandbox's `filesystem` lists may not name: the gateway's own files (a `read` or
//! `write` path that is one, or a directory holding one, would put it back in the sandbox
//! over the cover that hides it), the backend's own home for `write` (a writable host view
//! of the home every process serving one caller starts from), and another backend's home
//! (which only that backend may see: a root gateway runs every sandbox as the same
//! `nobody`). Paths are compared resolved ([`super::canonical`]), so `..` and links do not
//! slip past.

use std::path::{Path, PathBuf};

use switchboard_upstream::sandbox::Sandbox;

use super::super::ConfigError;

/// One sandboxed backend, for the checks across backends.
pub(crate) struct Listed<'a> {
    pub(crate) name: &'a str,
    /// Where its lists are: `backends[0].sandbox.filesystem`, or the top level's
    /// `sandbox.filesystem`.
    pub(crate) at: String,
    pub(crate) sandbox: &'a Sandbox,
}

/// Every listed path of `backends` that names a gateway's file (`files`, resolved), its own
/// home (`write` only), or another backend's home; each error at the list entry's key.
pub(crate) fn check(backends: &[Listed<'_>], files: &[PathBuf]) -> Vec<ConfigError> {
    let mut errors: Vec<ConfigError> = Vec::new();
    for b in backends {
        for (kind, list) in [("read", &b.sandbox.read), ("write", &b.sandbox.write)] {
            for (j, path) in list.iter().enumerate() {
                let key = format!("{}.{kind}[{j}]", b.at);
                let mut found = gateway_file(path, files).into_iter().collect::<Vec<_>>();
                if kind == "write" && overlap(path, &b.sandbox.home) {
                    found.push(format!(
                        "{} overlaps this backend's own home ({}): the backend has its home \
                         at /home/switchboard, and a process serving one caller must not \
                         write the home the others start from",
                        path.display(),
                        b.sandbox.home.display()
                    ));
                }
                let others = backends.iter().filter(|o| o.name != b.name);
                for o in others.filter(|o| overlap(path, &o.sandbox.home)) {
                    found.push(format!(
                        "{} overlaps backend {}'s home ({}), which only that backend may see",
                        path.display(),
                        o.name,
                        o.sandbox.home.display()
                    ));
                }
                for message in found {
                    let e = ConfigError::new(&key, message);
                    if !errors.contains(&e) {
                        errors.push(e);
                    }
                }
            }
        }
    }
    errors
}

/// Why `path` may not be listed, when it is or holds one of the gateway's `files`.
pub(crate) fn gateway_file(path: &Path, files: &[PathBuf]) -> Option<String> {
    let file = files.iter().find(|f| f.starts_with(path))?;
    Some(format!(
        "{} is or contains {}, a file of the gateway's own (config, secrets, keys, policy, \
         audit log, trust state) that no backend may see: list the paths beside it instead",
        path.display(),
        file.display()
    ))
}

/// Whether one of `a` and `b` is or holds the other.
fn overlap(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

#[cfg(test)]
mod tests;
