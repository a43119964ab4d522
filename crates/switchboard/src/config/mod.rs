//! The config file (`serve --config`, `validate`), and the `mcpServers` JSON users already
//! have (`init --from-mcp-json`, `serve --mcp-json`).
//!
//! Loading is one pipeline whatever the source: YAML → JSON value → the shipped JSON Schema
//! (every error, with its path) → checks across entries (names, command/url, priority) →
//! the serde model → `${VAR}` expansion and per-backend settings. Each stage reports every
//! error it finds; the next stage runs only on a file the previous one accepted.

mod check;
pub(crate) mod composite;
pub(crate) mod host;
mod init;
mod mcp_json;
pub(crate) mod merge;
pub(crate) mod model;
pub(crate) mod outgoing;
mod resolve;
pub(crate) mod sandbox;
mod schema;
pub(crate) mod secrets;
pub(crate) mod spec;
mod suggest;
#[cfg(test)]
mod tests;
pub(crate) mod trust;
mod validate;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub(crate) use init::init;
pub(crate) use resolve::Resolved;
pub(crate) use spec::ServeSpec;
pub(crate) use validate::validate;

/// One problem, at a place in the file (`backends[2].command`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigError {
    pub(crate) path: String,
    pub(crate) message: String,
}

impl ConfigError {
    pub(crate) fn new(path: &str, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found, one per line.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {} error(s)\n{}", errors.len(), lines(errors))]
pub(crate) struct ConfigErrors {
    pub(crate) source_name: String,
    pub(crate) errors: Vec<ConfigError>,
}

fn lines(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A file accepted by every stage.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// What it was read from, for messages.
    pub(crate) source_name: String,
    /// The file as written (references not expanded: safe to show).
    pub(crate) file: model::ConfigFile,
    /// What it resolves to (references expanded: never show).
    pub(crate) resolved: Resolved,
}

/// Where a config comes from.
struct Source {
    name: String,
    /// The directory relative paths are taken from.
    base: PathBuf,
    doc: serde_json::Value,
    /// Values for `${VAR}` that the source itself carries (an `mcpServers` file's literals).
    secrets: HashMap<String, String>,
    /// The file itself.
    path: PathBuf,
}

/// Reads and checks a YAML (or JSON: YAML is a superset) config file.
pub(crate) fn load(path: &Path) -> Result<Loaded, ConfigErrors> {
    let source_name = path.display().to_string();
    let fail = |message: String| ConfigErrors {
        source_name: source_name.clone(),
        errors: vec![ConfigError::new("", message)],
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let doc: serde_json::Value = serde_yaml_ng::from_str(&text)
        .map_err(|e| fail(format!("not valid YAML: {}", yaml_error(&e))))?;
    load_source(Source {
        base: base_dir(path),
        name: source_name.clone(),
        doc,
        secrets: HashMap::new(),
        path: path.to_path_buf(),
    })
}

/// Reads an `mcpServers` JSON file as a config of its servers, in the file's order.
pub(crate) fn load_mcp_json(path: &Path) -> Result<Loaded, ConfigErrors> {
    let source_name = path.display().to_string();
    let converted = mcp_json::convert_file(path).map_err(|e| ConfigErrors {
        source_name: source_name.clone(),
        errors: vec![ConfigError::new("", format!("{e:#}"))],
    })?;
    for note in &converted.notes {
        println!("switchboard: {note}");
    }
    for line in converted.rename_lines() {
        eprintln!("switchboard: {line}");
    }
    load_source(Source {
        base: base_dir(path),
        name: source_name,
        doc: converted.doc,
        secrets: converted.secrets.into_iter().collect(),
        path: path.to_path_buf(),
    })
}

fn load_source(source: Source) -> Result<Loaded, ConfigErrors> {
    let errors = |errors: Vec<ConfigError>| ConfigErrors {
        source_name: source.name.clone(),
        errors,
    };
    let file = checked(&source.doc).map_err(errors)?;
    let resolved = resolve::resolve(&file, &source.base, source.secrets.clone()).map_err(errors)?;
    let found = listed(&file, &resolved, &source.path);
    if !found.is_empty() {
        return Err(errors(found));
    }
    Ok(Loaded {
        source_name: source.name.clone(),
        file,
        resolved,
    })
}

/// The schema's errors and the checks across entries; then the serde model.
fn checked(doc: &serde_json::Value) -> Result<model::ConfigFile, Vec<ConfigError>> {
    let mut found = schema::check(doc);
    found.extend(check::across(doc));
    if !found.is_empty() {
        return Err(found);
    }
    let file: model::ConfigFile = serde_json::from_value(doc.clone()).map_err(|e| {
        // The schema accepted what the model refuses: a disagreement the unit tests are
        // meant to catch; still reported rather than ignored.
        vec![ConfigError::new("", e.to_string())]
    })?;
    composite::plans(&file)?;
    Ok(file)
}

fn base_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A YAML error's message with its line and column; serde_yaml_ng's messages name keys and
/// types, never values.
fn yaml_error(e: &serde_yaml_ng::Error) -> String {
    match e.location() {
        Some(at) => format!("line {}, column {}: {e}", at.line(), at.column()),
        None => e.to_string(),
    }
}

/// `serve`'s spec: the file (`--config`, or `--mcp-json`), then the flags given on the
/// command line over it.
pub(crate) fn serve_spec(
    args: crate::cli::ServeArgs,
    given: &dyn Fn(&str) -> bool,
) -> anyhow::Result<ServeSpec> {
    // Stamped before it is read: an edit while the gateway starts is reloaded, not missed.
    let watched = (args.config.clone())
        .or_else(|| args.mcp_json.clone())
        .map(crate::reload::Watched::before_reading);
    let loaded = match (&args.config, &args.mcp_json) {
        (Some(path), _) => load(path)?,
        (None, Some(path)) => load_mcp_json(path)?,
        (None, None) => anyhow::bail!("serve needs --config FILE or --mcp-json FILE"),
    };
    println!(
        "switchboard: {}: {} backend(s): {}",
        loaded.source_name,
        loaded.resolved.backends.len(),
        loaded
            .resolved
            .backends
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let source = args.config.as_ref().or(args.mcp_json.as_ref());
    let trust =
        source.map(|path| trust::resolve(loaded.file.trust.as_ref(), &args.gateway.trust, path));
    let files = own_files(&loaded, watched.as_ref().map(|w| w.path.as_path()));
    let mut spec = merge::serve_spec(loaded, args.gateway, given)?;
    spec.trust = trust.unwrap_or_default();
    spec.watched = watched;
    sandbox::hide(&mut spec, &files)?;
    Ok(spec)
}

/// The files the config names that only the gateway may read (besides those its flags name
/// too, which [`sandbox::hide`] reads from the merged flags): the config itself, its secrets
/// file, the token store's key file, and the remotes' header and client secret files.
fn own_files(loaded: &Loaded, source: Option<&Path>) -> Vec<PathBuf> {
    config_files(&loaded.file, &loaded.resolved, source)
}

fn config_files(file: &model::ConfigFile, r: &Resolved, source: Option<&Path>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = source.map(Path::to_path_buf).into_iter().collect();
    files.extend(file.secrets_file.as_ref().map(|p| r.path(p)));
    files.extend(r.token_key_file.clone());
    for b in &file.backends {
        files.extend(b.headers_file.as_ref().map(|p| r.path(p)));
        let secret = b.auth.as_ref().and_then(|a| a.client_secret_file.as_ref());
        files.extend(secret.map(|p| r.path(p)));
    }
    files
}

/// The gateway's files the config itself names besides [`own_files`]: its policy, audit log,
/// identity files, store secrets and trust state (from the file, before any flag).
fn named_files(file: &model::ConfigFile, r: &Resolved, source: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    files.extend(file.policy.as_ref().map(|p| r.path(&p.file)));
    let audit = file.audit.as_ref().filter(|a| a.log != "-");
    files.extend(audit.map(|a| r.path(Path::new(&a.log))));
    if let Some(auth) = &file.auth {
        files.extend(auth.config_file.as_ref().map(|p| r.path(p)));
        files.extend(auth.api_keys_file.as_ref().map(|p| r.path(p)));
    }
    if let Some(store) = &file.session_store {
        files.extend(store.password_file.as_ref().map(|p| r.path(p)));
        files.extend(store.replica_secret_file.as_ref().map(|p| r.path(p)));
    }
    let trust = file.trust.as_ref().and_then(|t| t.state_file.as_ref());
    files.push(trust.map_or_else(|| trust::default_state_file(source), |p| r.path(p)));
    files
}

/// The sandboxes' listed paths that name a gateway's file or a backend's home
/// ([`sandbox::listed`]), each at its key.
fn listed(file: &model::ConfigFile, r: &Resolved, source: &Path) -> Vec<ConfigError> {
    use sandbox::{listed, SandboxKey};
    let mut backends = Vec::new();
    for (i, (entry, b)) in file.backends.iter().zip(&r.backends).enumerate() {
        let spec::BackendKind::Stdio(s) = &b.kind else {
            continue;
        };
        let Some(sandbox) = &s.sandbox else { continue };
        let at = match &entry.sandbox {
            Some(SandboxKey::Settings(own)) if own.filesystem.is_some() => {
                format!("backends[{i}].sandbox.filesystem")
            }
            _ => "sandbox.filesystem".to_owned(),
        };
        backends.push(listed::Listed {
            name: &entry.name,
            at,
            sandbox,
        });
    }
    let mut files: Vec<PathBuf> = config_files(file, r, Some(source))
        .into_iter()
        .chain(named_files(file, r, source))
        .map(|p| sandbox::canonical(&p))
        .collect();
    files.sort();
    files.dedup();
    listed::check(&backends, &files)
}
