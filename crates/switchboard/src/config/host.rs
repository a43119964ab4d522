//! What a valid file needs of the host it runs on: each stdio backend's command resolves on
//! `PATH` (or is an executable file), each remote's URL parses, and the files the file names
//! exist, the secret ones private to their owner. `validate` prints these as warnings (a
//! file may be checked on another machine than the one that serves it; `--strict` makes
//! them errors); `doctor` counts them as failures. Messages name keys and paths, never an
//! expanded value.

use std::path::{Path, PathBuf};

use super::spec::BackendKind;
use super::{ConfigError, Loaded};

/// Every problem of this host for `loaded`, each at its key.
pub(crate) fn findings(loaded: &Loaded) -> Vec<ConfigError> {
    let (f, r) = (&loaded.file, &loaded.resolved);
    let mut out = Vec::new();
    for (i, (entry, spec)) in f.backends.iter().zip(&r.backends).enumerate() {
        let at = format!("backends[{i}]");
        match &spec.kind {
            BackendKind::Stdio(s) => {
                let path = s.env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v);
                if let Err(why) = command(&s.program, path.map(String::as_str)) {
                    out.push(ConfigError::new(&format!("{at}.command"), why));
                }
            }
            BackendKind::Remote(remote) => {
                if let Err(why) = url(&remote.url) {
                    out.push(ConfigError::new(&format!("{at}.url"), why));
                }
            }
            BackendKind::OpenApi(_) => {}
        }
        let client_secret = entry
            .auth
            .as_ref()
            .and_then(|a| a.client_secret_file.as_ref());
        for (key, file) in [
            ("headersFile", entry.headers_file.as_ref()),
            ("auth.clientSecretFile", client_secret),
        ] {
            if let Some(file) = file {
                out.extend(secret_file(&r.path(file), &format!("{at}.{key}")));
            }
        }
    }
    let mut files: Vec<(&str, &PathBuf, bool)> = Vec::new();
    if let Some(auth) = &f.auth {
        files.extend(
            auth.config_file
                .as_ref()
                .map(|p| ("auth.configFile", p, false)),
        );
        files.extend(
            auth.api_keys_file
                .as_ref()
                .map(|p| ("auth.apiKeysFile", p, true)),
        );
    }
    files.extend(f.policy.as_ref().map(|p| ("policy.file", &p.file, false)));
    if let Some(store) = &f.session_store {
        let password = store.password_file.as_ref();
        files.extend(password.map(|p| ("sessionStore.passwordFile", p, true)));
        let replica = store.replica_secret_file.as_ref();
        files.extend(replica.map(|p| ("sessionStore.replicaSecretFile", p, true)));
    }
    for (key, file, secret) in files {
        let path = r.path(file);
        out.extend(if secret {
            secret_file(&path, key)
        } else {
            plain_file(&path, key)
        });
    }
    out
}

/// `program` as the backend's start would find it: a path (with a `/`) must be an
/// executable file; a bare name must be one in a directory of `path` (the backend's own
/// `PATH` when its `env` sets one, else the gateway's).
pub(crate) fn command(program: &str, path: Option<&str>) -> Result<PathBuf, String> {
    if program.contains('/') {
        let file = PathBuf::from(program);
        return match std::fs::metadata(&file) {
            Ok(m) if m.is_file() && executable(&m) => Ok(file),
            Ok(m) if m.is_file() => Err(format!("\"{program}\" is not executable")),
            Ok(_) => Err(format!("\"{program}\" is not a file")),
            Err(e) => Err(format!("\"{program}\": {e}")),
        };
    }
    let dirs: Vec<PathBuf> = match path {
        Some(p) => std::env::split_paths(p).collect(),
        None => std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default(),
    };
    for dir in &dirs {
        let file = dir.join(program);
        if std::fs::metadata(&file).is_ok_and(|m| m.is_file() && executable(&m)) {
            return Ok(file);
        }
    }
    let names = programs(&dirs);
    Err(super::suggest::with_hint(
        format!("\"{program}\" is not installed (not found on PATH)"),
        program,
        names.iter().map(String::as_str),
    ))
}

/// The names of the programs in `dirs` (bounded: a huge `PATH` gives no hint, not a stall).
fn programs(dirs: &[PathBuf]) -> Vec<String> {
    let mut names = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten().take(20_000) {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        if names.len() > 100_000 {
            break;
        }
    }
    names
}

#[cfg(unix)]
fn executable(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn executable(_: &std::fs::Metadata) -> bool {
    true
}

/// A remote's URL (expanded: the message never quotes it) as the client will parse it.
fn url(url: &str) -> Result<(), String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(h)) if !h.is_empty() => Ok(()),
        (Some("http" | "https"), _) => Err("not a URL: it names no host".to_owned()),
        _ => Err("not a URL: the scheme must be http or https".to_owned()),
    }
}

fn plain_file(path: &Path, at: &str) -> Option<ConfigError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => None,
        Ok(_) => Some(ConfigError::new(
            at,
            format!("{} is not a file", path.display()),
        )),
        Err(e) => Some(ConfigError::new(
            at,
            format!("cannot read {}: {e}", path.display()),
        )),
    }
}

/// A file that holds a secret: it must exist, and group and others must not read it.
fn secret_file(path: &Path, at: &str) -> Option<ConfigError> {
    if let Some(e) = plain_file(path, at) {
        return Some(e);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Some(ConfigError::new(
                at,
                format!(
                    "{} holds a secret but group or others may read it (mode {mode:o}): chmod 600 it",
                    path.display()
                ),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_resolve_on_the_path_or_as_files() {
        let dir = std::env::temp_dir().join(format!("sb-host-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = dir.join("my-tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let plain = dir.join("plain.txt");
        std::fs::write(&plain, "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path = dir.to_str().unwrap();
        assert_eq!(command("my-tool", Some(path)).unwrap(), tool);
        assert_eq!(command(tool.to_str().unwrap(), None).unwrap(), tool);
        let missing = command("my-tol", Some(path)).unwrap_err();
        assert_eq!(
            missing,
            "\"my-tol\" is not installed (not found on PATH); did you mean \"my-tool\"?"
        );
        #[cfg(unix)]
        assert!(command(plain.to_str().unwrap(), None)
            .unwrap_err()
            .contains("not executable"));
        assert!(command("/no/such/program", None).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn urls_need_a_scheme_and_a_host() {
        assert!(url("https://h.example/mcp").is_ok());
        assert!(url("http://127.0.0.1:9/mcp?k=v").is_ok());
        assert!(url("http:///mcp").is_err());
        assert!(url("http://exa mple/").is_err());
        assert!(url("ftp://h/").is_err());
    }
}
