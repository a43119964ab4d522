//! `sandbox:` — at the top level (every command backend's default) and per backend: `on`,
//! `off`, or the settings (which turn it on). Off unless configured. What it resolves to is
//! `switchboard_upstream::sandbox::Sandbox`; this host's bubblewrap is found and tried once
//! per load, so `validate`, `serve` and a reload all refuse a sandbox the host cannot build,
//! with the fix.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use std::sync::Arc;

use switchboard_upstream::egress::{AllowList, Egress, Limits as EgressLimits, Target};
use switchboard_upstream::sandbox::{self, Host, Limits, Sandbox, SandboxError};

use super::ConfigError;

/// Defaults of a sandbox whose settings do not say: generous enough for `npx` (node reserves
/// about 1 GiB of address space at start), small enough to stop a runaway.
const DEFAULT_MEMORY: u64 = 4 << 30;
const DEFAULT_PIDS: u64 = 256;
const DEFAULT_OPEN_FILES: u64 = 1024;
/// Less address space than this cannot start an interpreter; refused as a mistake.
const MIN_MEMORY: u64 = 16 << 20;

/// `sandbox:` as written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SandboxKey {
    /// `on`/`off` (or `true`/`false`).
    Switch(bool),
    /// Settings: on, with these.
    Settings(SandboxSettings),
}

impl<'de> Deserialize<'de> for SandboxKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Word(String),
            Settings(SandboxSettings),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(b) => Ok(SandboxKey::Switch(b)),
            Raw::Word(w) if w == "on" => Ok(SandboxKey::Switch(true)),
            Raw::Word(w) if w == "off" => Ok(SandboxKey::Switch(false)),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "expected on, off or the sandbox's settings, found {w:?}"
            ))),
            Raw::Settings(s) => Ok(SandboxKey::Settings(s)),
        }
    }
}

/// The settings; a backend's keys replace the top level's, key by key.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SandboxSettings {
    pub(crate) filesystem: Option<Filesystem>,
    pub(crate) network: Option<Network>,
    /// `512MiB`, `2GiB`, or bytes.
    pub(crate) memory: Option<Size>,
    pub(crate) cpu: Option<f64>,
    pub(crate) pids: Option<u64>,
    pub(crate) open_files: Option<u64>,
    /// The host directory that is the backend's `HOME` (its package caches).
    pub(crate) home: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Filesystem {
    #[serde(default)]
    pub(crate) read: Vec<PathBuf>,
    #[serde(default)]
    pub(crate) write: Vec<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Network {
    /// `host:port` entries.
    #[serde(default)]
    pub(crate) allow: Vec<String>,
}

/// A size as written: bytes, or a number with a unit.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub(crate) enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    fn bytes(&self) -> Result<u64, String> {
        match self {
            Size::Bytes(n) => Ok(*n),
            Size::Text(t) => parse_size(t),
        }
    }
}

/// `512MiB`, `2GiB`, `1.5G`, `800MB`, `1048576`: binary units (`K`, `M`, `G`, `T`, with or
/// without `iB`) and decimal ones (`KB`, `MB`, `GB`, `TB`).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let bad = || format!("`{text}`: expected a size like 512MiB, 2GiB or a number of bytes");
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "K" | "KiB" => 1024.0,
        "M" | "MiB" => 1024.0 * 1024.0,
        "G" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "T" | "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        _ => return Err(bad()),
    };
    let n: f64 = number.parse().map_err(|_| bad())?;
    let bytes = (n * scale).round();
    if !(0.0..=u64::MAX as f64).contains(&bytes) {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// The effective settings of one backend: `None` when it is not sandboxed.
pub(crate) fn effective(
    top: Option<&SandboxKey>,
    own: Option<&SandboxKey>,
) -> Option<SandboxSettings> {
    let top_settings = match top {
        Some(SandboxKey::Settings(s)) => Some(s.clone()),
        Some(SandboxKey::Switch(true)) => Some(SandboxSettings::default()),
        Some(SandboxKey::Switch(false)) | None => None,
    };
    match own {
        None => top_settings,
        Some(SandboxKey::Switch(false)) => None,
        Some(SandboxKey::Switch(true)) => Some(top_settings.unwrap_or_default()),
        Some(SandboxKey::Settings(s)) => {
            let base = top_settings.unwrap_or_default();
            Some(SandboxSettings {
                filesystem: s.filesystem.clone().or(base.filesystem),
                network: s.network.clone().or(base.network),
                memory: s.memory.clone().or(base.memory),
                cpu: s.cpu.or(base.cpu),
                pids: s.pids.or(base.pids),
                open_files: s.open_files.or(base.open_files),
                home: s.home.clone().or(base.home),
            })
        }
    }
}

/// This host's sandbox tools, found and tried at most once per load.
#[derive(Debug, Default)]
pub(crate) struct HostCheck(OnceCell<Result<Host, SandboxError>>);

impl HostCheck {
    fn get(&self) -> Result<Host, SandboxError> {
        self.0
            .get_or_init(|| {
                let host = Host::find(std::env::var_os("PATH").as_deref())?;
                host.probe()?;
                Ok(host)
            })
            .clone()
    }
}

/// One command backend, as far as its sandbox needs it.
pub(crate) struct Backend<'a> {
    /// Where its key is (`backends[2]`).
    pub(crate) at: &'a str,
    /// Where the sandbox was turned on: its own `backends[2].sandbox`, else the top level's
    /// `sandbox`.
    pub(crate) switched_at: String,
    pub(crate) name: &'a str,
    pub(crate) program: &'a str,
    pub(crate) env: &'a [(String, String)],
    pub(crate) cwd: Option<&'a Path>,
}

/// The sandbox `settings` describe for backend `b`, checked against this host.
pub(crate) fn resolve(
    settings: &SandboxSettings,
    b: &Backend<'_>,
    base: &Path,
    host: &HostCheck,
) -> Result<Sandbox, Vec<ConfigError>> {
    let at = b.switched_at.clone();
    let mut errors = Vec::new();
    errors.extend(loader_env(b));
    let limits = limits(settings, &at, &mut errors);
    let egress = network(settings, &at, b.name, &mut errors);
    let fs = settings.filesystem.clone().unwrap_or_default();
    let read = paths(
        &fs.read,
        base,
        &format!("{at}.filesystem.read"),
        &mut errors,
    );
    let write = paths(
        &fs.write,
        base,
        &format!("{at}.filesystem.write"),
        &mut errors,
    );
    let home = match &settings.home {
        Some(h) => Some(canonical(&base.join(h))),
        None => default_home(b.name).map(|h| canonical(&h)),
    };
    let Some(home) = home else {
        errors.push(ConfigError::new(
            &format!("{at}.home"),
            "required here: neither XDG_CACHE_HOME nor HOME is set",
        ));
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let host = host
        .get()
        .map_err(|e| vec![ConfigError::new(&at, e.to_string())])?;
    if let Some(r) = &host.run_as {
        let bridge = egress.iter().map(|e| e.bridge().to_path_buf());
        let bridge: Vec<PathBuf> = bridge.collect();
        let errors = out_of_reach(r.uid, &at, &home, read.iter().chain(&write).chain(&bridge));
        if !errors.is_empty() {
            return Err(errors);
        }
    }
    let sandbox = Sandbox {
        read,
        write,
        masked: gateway_home().into_iter().collect(),
        hidden: Vec::new(),
        home,
        limits,
        host,
        egress,
    };
    visible(&sandbox, b)?;
    Ok(sandbox)
}

/// Variables the dynamic loader and C library read (glibc's list of those it drops for
/// set-user-ID programs, `TMPDIR` and the `MALLOC_*` tunings aside): `LD_*` and these.
const LOADER: [&str; 12] = [
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
];

/// A sandboxed backend's `env` is the environment its launchers run with too (`setpriv`,
/// as root for a root gateway, and `bwrap`, on the host), not only its program's: a loader
/// variable there would have them load what the backend may write (a `filesystem.write`
/// path) outside the sandbox. Refused; a wrapper inside the sandbox can set one.
fn loader_env(b: &Backend<'_>) -> Vec<ConfigError> {
    let loader = |k: &str| k.starts_with("LD_") || LOADER.contains(&k);
    let mut errors = Vec::new();
    for (k, _) in b.env {
        let why = match k.as_str() {
            // `A=B` as a name would set the variable `A` (with `B=` before its value).
            "" => "an empty variable name",
            k if k.contains('=') || k.contains('\0') => "not a variable name (`=` or NUL in it)",
            k if loader(k) => {
                "a sandboxed backend's environment is its launchers' too, on the host: the \
                 dynamic loader's variables are refused (set it in a wrapper inside the sandbox)"
            }
            _ => continue,
        };
        errors.push(ConfigError::new(&format!("{}.env.{k}", b.at), why));
    }
    errors
}

fn limits(settings: &SandboxSettings, at: &str, errors: &mut Vec<ConfigError>) -> Limits {
    let memory = match settings.memory.as_ref().map(Size::bytes) {
        None => Some(DEFAULT_MEMORY),
        Some(Ok(n)) if n >= MIN_MEMORY => Some(n),
        Some(Ok(_)) => {
            errors.push(ConfigError::new(
                &format!("{at}.memory"),
                "must be at least 16MiB",
            ));
            None
        }
        Some(Err(e)) => {
            errors.push(ConfigError::new(&format!("{at}.memory"), e));
            None
        }
    };
    Limits {
        memory,
        pids: Some(settings.pids.unwrap_or(DEFAULT_PIDS)),
        open_files: Some(settings.open_files.unwrap_or(DEFAULT_OPEN_FILES)),
        cpu: settings.cpu,
    }
}

/// The backend's egress when its allow list is not empty (each entry checked: `host:port`,
/// a DNS name or an IP address, IPv6 in brackets, a port 1–65535, no wildcards): enforced
/// by the proxy `switchboard_upstream::egress` runs, bridged into the sandbox by this very
/// executable.
fn network(
    settings: &SandboxSettings,
    at: &str,
    backend: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<Arc<Egress>> {
    let net = settings.network.as_ref()?;
    let before = errors.len();
    for (i, entry) in net.allow.iter().enumerate() {
        if let Err(e) = host_port(entry) {
            errors.push(ConfigError::new(
                &format!("{at}.network.allow[{i}]"),
                format!("`{entry}`: {e}"),
            ));
        }
    }
    if errors.len() > before {
        return None;
    }
    let allow = AllowList::parse(&net.allow).ok()?;
    if allow.is_empty() {
        return None;
    }
    match std::env::current_exe() {
        Ok(exe) => Some(Arc::new(Egress::new(
            backend,
            allow,
            EgressLimits::default(),
            exe,
        ))),
        Err(e) => {
            errors.push(ConfigError::new(
                &format!("{at}.network.allow"),
                format!(
                    "the gateway's own executable (run in the sandbox as the bridge to the \
                     egress proxy) cannot be found: {e}"
                ),
            ));
            None
        }
    }
}

/// `host:port`: a DNS name or an IP address (IPv6 in brackets), and a port 1–65535.
pub(crate) fn host_port(entry: &str) -> Result<(), String> {
    Target::parse(entry).map(|_| ()).map_err(|e| e.to_string())
}

/// Each path resolved (relative ones from the config file's directory; `..` and links
/// resolved, so what is hidden is compared with what is bound); it must exist, since
/// bubblewrap binds it.
fn paths(list: &[PathBuf], base: &Path, at: &str, errors: &mut Vec<ConfigError>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let path = canonical(&base.join(p));
        if path.exists() {
            out.push(path);
        } else {
            errors.push(ConfigError::new(&format!("{at}[{i}]"), "does not exist"));
        }
    }
    out
}

/// The program and the working directory must be visible inside, or the backend could not
/// start: said here, with the fix, rather than as bwrap's "No such file or directory".
fn visible(sandbox: &Sandbox, b: &Backend<'_>) -> Result<(), Vec<ConfigError>> {
    let mut errors = Vec::new();
    let path = b
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(sandbox::DEFAULT_PATH, |(_, v)| v.as_str());
    let program = if b.program.contains('/') {
        Some(absolute(Path::new(b.program)))
    } else {
        let found = sandbox::which(b.program, Some(std::ffi::OsStr::new(path)));
        if found.is_none() {
            errors.push(ConfigError::new(
                &format!("{}.command", b.at),
                format!(
                    "`{}` is not on the sandbox's PATH ({path}): give its absolute path, or \
                     set PATH in env",
                    b.program
                ),
            ));
        }
        found
    };
    let named = [("command", program), ("cwd", b.cwd.map(absolute))];
    for (key, path) in named {
        let Some(path) = path else { continue };
        if let Some(mask) = sandbox.hides(&path) {
            errors.push(ConfigError::new(
                &format!("{}.{key}", b.at),
                format!(
                    "{} is hidden in the sandbox (under {}): list it in \
                     sandbox.filesystem.read, or set `sandbox: off`",
                    path.display(),
                    mask.display()
                ),
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// The home and listed paths a root gateway's backends (running as `uid`) could not reach.
fn out_of_reach<'a>(
    uid: u32,
    at: &str,
    home: &'a Path,
    listed: impl Iterator<Item = &'a PathBuf>,
) -> Vec<ConfigError> {
    let home_at = format!("{at}.home");
    let all = std::iter::once((home_at.as_str(), home)).chain(listed.map(|p| (at, p.as_path())));
    let mut errors = Vec::new();
    for (key, path) in all {
        if let Some(closed) = unreachable(path) {
            errors.push(ConfigError::new(
                key,
                format!(
                    "{} is out of reach of uid {uid} (the gateway runs as root, its sandboxed \
                     backends as nobody): {} is not searchable by others (chmod o+x)",
                    path.display(),
                    closed.display()
                ),
            ));
        }
    }
    errors
}

/// The first directory on the way to `path` (those that exist) that others may not search:
/// bwrap, run as nobody, could not reach `path` through it.
fn unreachable(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let mut dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    dirs.reverse();
    dirs.into_iter().find_map(|d| match std::fs::metadata(d) {
        Ok(m) if m.permissions().mode() & 0o001 == 0 => Some(d.to_path_buf()),
        _ => None,
    })
}

/// `path` with its links and `..` resolved as far as it exists (a file not created yet:
/// its existing directory resolved, the rest as written, less its `..`), component by
/// component: a `..` after a link leaves the link's target, as the kernel would.
pub(crate) fn canonical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::from("/");
    for part in absolute(path).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                if let Ok(real) = std::fs::canonicalize(&out) {
                    out = real;
                }
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Where a backend's home lives on the host: a root gateway's backends run as nobody, who
/// cannot reach root's home, so theirs are under /var/cache; else the user's cache directory.
fn default_home(backend: &str) -> Option<PathBuf> {
    Some(default_homes()?.join(backend))
}

/// The directory of the backends' default homes (`…/switchboard/sandbox`).
fn default_homes() -> Option<PathBuf> {
    let tail = Path::new("switchboard").join("sandbox");
    if sandbox::is_root() {
        return Some(Path::new("/var/cache").join(tail));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join(tail))
}

/// The gateway's own home, masked wherever it is (not only under /home or /root); a home at
/// the top of the tree (`/`, `/srv`) is not masked, as that would hide what the backend runs.
fn gateway_home() -> Option<PathBuf> {
    let home = absolute(Path::new(&std::env::var_os("HOME")?));
    let depth = home
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count();
    (depth >= 2 && home.is_dir()).then_some(home)
}

/// The gateway's own files (config, secrets, keys, state, audit log, guardrail webhooks'
/// secret files, and the policy and audit log its auth-config file names), by path whether
/// or not they exist yet: no
/// sandboxed backend can see them, nor files created beside them later. Fails when a
/// backend's `read` or `write` path is or holds one of them (those its flags name are known
/// only here; the file's own were refused when it was loaded).
pub(crate) fn hide(spec: &mut super::ServeSpec, files: &[PathBuf]) -> anyhow::Result<()> {
    let args = &spec.options;
    let mut all: Vec<PathBuf> = files.to_vec();
    all.extend(args.auth.auth_config.clone());
    all.extend(args.auth.api_keys_file.clone());
    all.extend(args.auth.policy.clone());
    all.extend(args.auth.audit_log.as_ref().map(PathBuf::from));
    all.extend(args.auth.file_paths());
    all.extend(args.session_store_password_file.clone());
    all.extend(args.replica_secret_file.clone());
    all.extend(args.token_store_key_file.clone());
    all.extend(spec.trust.config.state_file.clone());
    // A webhook's key signs what the guardrails send it: no backend may forge those.
    let webhooks = crate::guardrails::secret_files(&spec.guardrails, &spec.backends);
    all.extend(webhooks.map(|(_, path)| path.clone()));
    let mut found: Vec<PathBuf> = all
        .iter()
        .filter(|p| p.as_os_str() != "-")
        .map(|p| canonical(p))
        .collect();
    refuse_listed(spec, &found)?;
    // Every backend's default home, now and later (a backend a reload adds, one an earlier
    // run left behind), whatever user the sandboxes share; each process still gets its
    // own at its sandbox's home.
    found.extend(default_homes().map(|d| canonical(&d)));
    found.sort();
    found.dedup();
    for b in &mut spec.backends {
        if let super::spec::BackendKind::Stdio(s) = &mut b.kind {
            if let Some(sandbox) = &mut s.sandbox {
                std::sync::Arc::make_mut(sandbox).hidden.clone_from(&found);
            }
        }
    }
    Ok(())
}

/// A backend whose `read` or `write` path is or holds one of the gateway's `files`.
fn refuse_listed(spec: &super::ServeSpec, files: &[PathBuf]) -> anyhow::Result<()> {
    for b in &spec.backends {
        let super::spec::BackendKind::Stdio(s) = &b.kind else {
            continue;
        };
        let Some(sandbox) = &s.sandbox else { continue };
        for (kind, list) in [("read", &sandbox.read), ("write", &sandbox.write)] {
            for (j, path) in list.iter().enumerate() {
                if let Some(why) = listed::gateway_file(path, files) {
                    anyhow::bail!("backend {}: sandbox.filesystem.{kind}[{j}]: {why}", b.name);
                }
            }
        }
    }
    Ok(())
}

pub(crate) mod listed;

#[cfg(test)]
mod tests;
