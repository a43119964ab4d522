//! From the file as written to what it means: `${VAR}` references expanded (from the
//! environment, then `secretsFile`), relative paths taken from the file's directory, header
//! names checked, backend names made `BackendId`s. Errors carry the path of the key and the
//! reference text, never an expanded value.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use switchboard_core::BackendId;

use super::model::{BackendEntry, ConfigFile, IsolationKey, Transport};
use super::secrets::{ExpandError, Secrets};
use super::spec::{BackendKind, BackendSpec, RemoteSpec, StdioSpec};
use super::ConfigError;
use crate::cli::Isolation;
use crate::remote::TransportArg;

/// What the file resolves to. Holds secrets: never printed.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The directory relative paths are taken from.
    pub(crate) base: PathBuf,
    pub(crate) backends: Vec<BackendSpec>,
    /// `auth.apiKeys`, expanded.
    pub(crate) api_keys: Vec<(String, String)>,
    /// `tokenStore.encryptionKeyFile`, from the file's directory (checked readable, private,
    /// 32 bytes).
    pub(crate) token_key_file: Option<PathBuf>,
}

impl Resolved {
    /// `path`, taken from the config file's directory when relative.
    pub(crate) fn path(&self, path: &Path) -> PathBuf {
        self.base.join(path)
    }
}

pub(crate) fn resolve(
    file: &ConfigFile,
    base: &Path,
    carried: HashMap<String, String>,
) -> Result<Resolved, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let mut secrets = Secrets::with_values(carried);
    if let Some(path) = &file.secrets_file {
        if let Err(e) = secrets.add_file(&base.join(path)) {
            // Without its values every reference below would be reported as unset too.
            return Err(vec![ConfigError::new("secretsFile", e.to_string())]);
        }
    }
    let ctx = Ctx {
        secrets,
        base,
        sandbox: file.sandbox.as_ref(),
        host: super::sandbox::HostCheck::default(),
    };
    let default_isolation = file.isolation;
    let mut backends = Vec::new();
    for (i, entry) in file.backends.iter().enumerate() {
        match ctx.backend(entry, &format!("backends[{i}]"), default_isolation) {
            Ok(b) => backends.push(b),
            Err(mut e) => errors.append(&mut e),
        }
    }
    let mut api_keys = Vec::new();
    if let Some(auth) = &file.auth {
        for (i, k) in auth.api_keys.iter().enumerate() {
            match ctx.expand(&k.key, &format!("auth.apiKeys[{i}].key")) {
                Ok(key) => api_keys.push((k.name.clone(), key)),
                Err(e) => errors.push(e),
            }
        }
    }
    if let Some(limits) = &file.limits {
        rates(limits, &mut errors);
    }
    let token_key_file = file
        .token_store
        .as_ref()
        .map(|t| base.join(&t.encryption_key_file));
    if let Some(path) = &token_key_file {
        use switchboard_upstream::outgoing_auth::VaultKeyMaterial;
        if let Err(e) = VaultKeyMaterial::from_file(path) {
            errors.push(ConfigError::new(
                "tokenStore.encryptionKeyFile",
                e.to_string(),
            ));
        }
    }
    // The top level's settings are checked for each backend that takes them: said once.
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.to_string()));
    if errors.is_empty() {
        Ok(Resolved {
            base: base.to_path_buf(),
            backends,
            api_keys,
            token_key_file,
        })
    } else {
        Err(errors)
    }
}

fn rates(limits: &super::model::Limits, errors: &mut Vec<ConfigError>) {
    use switchboard_core::ratelimit::Rate;
    if let Some(r) = &limits.rate_limit {
        if let Err(e) = r.parse::<Rate>() {
            errors.push(ConfigError::new("limits.rateLimit", e));
        }
    }
    for (tool, r) in &limits.tool_rate_limits {
        if let Err(e) = r.parse::<Rate>() {
            let at = super::schema::join_key("limits.toolRateLimits", tool);
            errors.push(ConfigError::new(&at, e));
        }
    }
}

struct Ctx<'a> {
    secrets: Secrets,
    base: &'a Path,
    /// The top level's `sandbox`.
    sandbox: Option<&'a super::sandbox::SandboxKey>,
    /// This host's sandbox tools, checked once for every backend that needs them.
    host: super::sandbox::HostCheck,
}

impl Ctx<'_> {
    fn expand(&self, value: &str, at: &str) -> Result<String, ConfigError> {
        self.secrets.expand(value).map_err(|e| match e {
            ExpandError::Unclosed => ConfigError::new(at, "an unclosed `${`"),
            ExpandError::Unset(var) => ConfigError::new(
                at,
                format!("${{{var}}} is not set (in the environment or the secrets file)"),
            ),
        })
    }

    fn backend(
        &self,
        e: &BackendEntry,
        at: &str,
        default_isolation: Option<IsolationKey>,
    ) -> Result<BackendSpec, Vec<ConfigError>> {
        let name: BackendId = e
            .name
            .parse()
            .map_err(|err| vec![ConfigError::new(&format!("{at}.name"), format!("{err}"))])?;
        let kind = match (&e.command, &e.url, &e.openapi) {
            (Some(command), None, None) => self.stdio(e, command, at, default_isolation)?,
            (None, Some(url), None) => self.remote(e, url, at)?,
            (None, None, Some(key)) => self.openapi(e, key, at)?,
            // Refused by the checks before this stage.
            _ => {
                return Err(vec![ConfigError::new(
                    at,
                    "give one of command, url or openapi",
                )])
            }
        };
        Ok(BackendSpec {
            name,
            kind,
            timeout: e.timeout.map(|d| d.0),
            tools: e.tools.clone(),
            prompts: e.prompts.clone(),
            guardrails: e.guardrails.clone(),
        })
    }

    fn stdio(
        &self,
        e: &BackendEntry,
        command: &str,
        at: &str,
        default_isolation: Option<IsolationKey>,
    ) -> Result<BackendKind, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let mut env = Vec::new();
        for (key, value) in &e.env {
            let path = super::schema::join_key(&format!("{at}.env"), key);
            match self.expand(value, &path) {
                Ok(v) => env.push((key.clone(), v)),
                Err(err) => errors.push(err),
            }
        }
        let cwd = e.cwd.as_ref().map(|d| self.base.join(d));
        if let Some(dir) = &cwd {
            // Checked here: a spawn error would only say "No such file or directory".
            if !dir.is_dir() {
                errors.push(ConfigError::new(&format!("{at}.cwd"), "not a directory"));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let isolation = match e.isolation.or(default_isolation) {
            Some(IsolationKey::PerSession) => Isolation::PerSession,
            Some(IsolationKey::Shared) | None => Isolation::Shared,
        };
        let replicas = replicas(e, isolation, at)?;
        let sandbox = self.sandbox(e, command, at, &env, cwd.as_deref())?;
        Ok(BackendKind::Stdio(StdioSpec {
            program: command.to_owned(),
            args: e.args.clone(),
            env,
            cwd,
            isolation,
            replicas,
            sandbox,
        }))
    }

    /// The backend's sandbox: its own `sandbox` over the top level's (off when neither says).
    fn sandbox(
        &self,
        e: &BackendEntry,
        command: &str,
        at: &str,
        env: &[(String, String)],
        cwd: Option<&Path>,
    ) -> Result<Option<std::sync::Arc<switchboard_upstream::sandbox::Sandbox>>, Vec<ConfigError>>
    {
        use super::sandbox as sb;
        let Some(settings) = sb::effective(self.sandbox, e.sandbox.as_ref()) else {
            return Ok(None);
        };
        let backend = sb::Backend {
            at,
            switched_at: match e.sandbox {
                Some(_) => format!("{at}.sandbox"),
                None => "sandbox".to_owned(),
            },
            name: &e.name,
            program: command,
            env,
            cwd,
        };
        sb::resolve(&settings, &backend, self.base, &self.host)
            .map(|s| Some(std::sync::Arc::new(s)))
    }

    fn remote(
        &self,
        e: &BackendEntry,
        url: &str,
        at: &str,
    ) -> Result<BackendKind, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let expanded = self.expand(url, &format!("{at}.url"));
        let headers = self.headers(e, at, &mut errors);
        let passthrough = super::model::BackendAuth {
            kind: super::model::AuthType::Passthrough,
            token_endpoint: None,
            client_id: None,
            client_secret_file: None,
            audience: None,
            scopes: Vec::new(),
            resource: None,
            client_metadata_url: None,
            token_endpoint_auth: None,
            authorization_server: None,
        };
        let (auth, auth_at) = match (&e.auth, e.forward_caller_token) {
            (Some(a), _) => (Some(a), format!("{at}.auth")),
            (None, true) => (Some(&passthrough), format!("{at}.forwardCallerToken")),
            (None, false) => (None, String::new()),
        };
        // The gateway sets Authorization itself: a static one beside it would be sent for
        // every request the gateway makes without a caller's token (its own, or a path that
        // cannot carry one), acting as the gateway where the caller was meant.
        if auth.is_some()
            && headers
                .iter()
                .any(|(n, _)| *n == hyper::header::AUTHORIZATION)
        {
            errors.push(ConfigError::new(
                &auth_at,
                "cannot be combined with a static Authorization header".to_owned(),
            ));
        }
        let name = |key: &str| match e.auth {
            Some(_) => format!("{auth_at}.{key}"),
            None => auth_at.clone(),
        };
        let auth = match auth {
            None => None,
            Some(a) => match super::outgoing::resolve(
                a,
                &e.name,
                expanded.as_deref().unwrap_or(url),
                self.base,
                &name,
            ) {
                Ok(r) => Some(r),
                Err(mut e) => {
                    errors.append(&mut e);
                    None
                }
            },
        };
        let expanded = match expanded {
            Ok(u) if errors.is_empty() => u,
            Ok(_) => return Err(errors),
            Err(err) => {
                errors.push(err);
                return Err(errors);
            }
        };
        Ok(BackendKind::Remote(RemoteSpec {
            url: expanded,
            // As written (a reference, never its value), without user info or a query: a
            // literal credential there must not reach the logs either.
            shown_url: super::spec::shown(url),
            label: format!("{at}.url"),
            transport: match e.transport {
                None | Some(Transport::Auto) => TransportArg::Auto,
                Some(Transport::Streamable) => TransportArg::Streamable,
                Some(Transport::Sse) => TransportArg::Sse,
            },
            headers,
            auth_fingerprint: auth
                .as_ref()
                .map(|a| a.fingerprint.clone())
                .unwrap_or_default(),
            auth: auth.map(|a| a.auth).unwrap_or_default(),
        }))
    }
}

impl Ctx<'_> {
    /// `headers` and `headersFile`, checked and expanded (errors go to `errors`).
    fn headers(
        &self,
        e: &BackendEntry,
        at: &str,
        errors: &mut Vec<ConfigError>,
    ) -> Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)> {
        let mut headers = Vec::new();
        let mut lines: Vec<(String, String, String)> = e
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    super::schema::join_key(&format!("{at}.headers"), k),
                    k.clone(),
                    v.clone(),
                )
            })
            .collect();
        if let Some(file) = &e.headers_file {
            let path = self.base.join(file);
            match std::fs::read_to_string(&path) {
                Ok(text) => lines.extend(header_lines(&text, &format!("{at}.headersFile"), errors)),
                Err(err) => errors.push(ConfigError::new(
                    &format!("{at}.headersFile"),
                    format!("cannot read {}: {err}", path.display()),
                )),
            }
        }
        for (path, name, value) in lines {
            let name = match crate::remote::header_name(name.trim()) {
                Ok(n) => n,
                Err(err) => {
                    errors.push(ConfigError::new(&path, err.to_string()));
                    continue;
                }
            };
            let value = match self.expand(value.trim(), &path) {
                Ok(v) => v,
                Err(err) => {
                    errors.push(err);
                    continue;
                }
            };
            match crate::remote::header_value(&value) {
                Ok(v) => headers.push((name, v)),
                Err(err) => errors.push(ConfigError::new(&path, err.to_string())),
            }
        }
        headers
    }

    /// An `openapi` backend: its base URL checked, its spec (a file) read and converted;
    /// a spec's errors name the place in it (`pets.yaml#/paths/~1pets/get: …`).
    fn openapi(
        &self,
        e: &BackendEntry,
        key: &super::model::OpenApiKey,
        at: &str,
    ) -> Result<BackendKind, Vec<ConfigError>> {
        use super::spec::{LoadedSpec, OpenApiSpec, SpecSource};
        let mut errors = Vec::new();
        let headers = self.headers(e, at, &mut errors);
        let base_at = format!("{at}.openapi.baseUrl");
        let base_url = match self.expand(&key.base_url, &base_at) {
            Ok(url) => match switchboard_upstream::openapi::check_base_url(&url) {
                Ok(()) => url,
                Err(err) => {
                    errors.push(ConfigError::new(&base_at, err.to_string()));
                    String::new()
                }
            },
            Err(err) => {
                errors.push(err);
                String::new()
            }
        };
        let spec_at = format!("{at}.openapi.spec");
        let mut shown = key.spec.clone();
        let (source, loaded) = if shown.starts_with("http://") || shown.starts_with("https://") {
            let url = self.expand(&shown, &spec_at);
            // Its query or user info may hold a credential, written in the file.
            shown = super::spec::shown(&shown);
            match url {
                Ok(url) => (SpecSource::Url(url), None),
                Err(err) => return Err([errors, vec![err]].concat()),
            }
        } else {
            let path = self.base.join(&shown);
            let converted = switchboard_upstream::openapi::read_file(&path).and_then(|doc| {
                LoadedSpec::convert(&doc).map_err(switchboard_upstream::openapi::OpenApiError::from)
            });
            match converted {
                Ok(loaded) => (SpecSource::File(path), Some(loaded)),
                Err(err) => {
                    errors.push(ConfigError::new(&spec_at, spec_error(&shown, &err)));
                    (SpecSource::File(path), None)
                }
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(BackendKind::OpenApi(OpenApiSpec {
            source,
            shown_spec: shown,
            base_url,
            url_secrets: self.secrets.in_path_of(&key.base_url),
            headers,
            max_response_bytes: key.max_response_bytes,
            loaded,
        }))
    }
}

/// A spec's error as `validate` shows it: the spec as written, then the JSON pointer.
pub(crate) fn spec_error(shown: &str, err: &switchboard_upstream::openapi::OpenApiError) -> String {
    match err {
        switchboard_upstream::openapi::OpenApiError::Spec(s) => {
            format!("{shown}{}: {}", s.pointer, s.message)
        }
        other => other.to_string(),
    }
}

/// `Name: value` lines (as `--header-file`): `#` comments and blank lines skipped.
fn header_lines(
    text: &str,
    at: &str,
    errors: &mut Vec<ConfigError>,
) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let lines = text
        .lines()
        .enumerate()
        .map(|(n, l)| (n + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    for (n, line) in lines {
        match line.split_once(':') {
            Some((name, value)) => {
                out.push((format!("{at} line {n}"), name.to_owned(), value.to_owned()))
            }
            None => errors.push(ConfigError::new(
                &format!("{at} line {n}"),
                "expected `Name: value`",
            )),
        }
    }
    out
}

/// `replicas`: 1 to 64 processes, and only where every session shares them.
fn replicas(e: &BackendEntry, isolation: Isolation, at: &str) -> Result<usize, Vec<ConfigError>> {
    let max = switchboard_upstream::MAX_REPLICAS;
    let at = format!("{at}.replicas");
    match e.replicas {
        None => Ok(1),
        Some(n) if n == 0 || n as usize > max => Err(vec![ConfigError::new(
            &at,
            format!("{n} is out of range: give 1 to {max} processes"),
        )]),
        Some(n) if n > 1 && isolation == Isolation::PerSession => Err(vec![ConfigError::new(
            &at,
            "replicas share their processes among every session, isolation: per-session gives each session a process of its own: give one or the other",
        )]),
        Some(n) => Ok(n as usize),
    }
}
