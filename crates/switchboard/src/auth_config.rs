//! `switchboard run`'s identity, policy, audit and rate-limit options: flags, and the same
//! settings from a JSON file (`--auth-config`). Flags add to (and for single values override)
//! the file.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use serde::Deserialize;

use switchboard_core::audit::AuditLog;
use switchboard_core::ratelimit::{Rate, RateLimiter};
use switchboard_core::Access;
use switchboard_http::{parse_algorithm, Authenticator, JwtConfig};

use crate::reload::policy::ReloadablePolicy;

#[derive(Debug, Args, Default)]
pub(crate) struct AuthArgs {
    /// JSON file with any of the settings below (`apiKeys`, `jwt`, `publicUrl`, `policy`,
    /// `auditLog`, `auditBodies`, `rateLimit`, `toolRateLimits`); see the README.
    #[arg(long, value_name = "FILE")]
    pub(crate) auth_config: Option<PathBuf>,
    /// Static API keys, one `name:key` per line (`#` comments). Callers send
    /// `Authorization: Bearer <key>`.
    #[arg(long, value_name = "FILE")]
    pub(crate) api_keys_file: Option<PathBuf>,
    /// Accept OAuth bearer JWTs from this issuer (exact `iss`).
    #[arg(long, value_name = "URL")]
    pub(crate) jwt_issuer: Option<String>,
    /// Accepted `aud` values (comma-separated). Default: the public URL and `<public URL>/mcp`.
    #[arg(long, value_delimiter = ',')]
    pub(crate) jwt_audience: Vec<String>,
    /// The issuer's JWKS URL.
    #[arg(long, value_name = "URL")]
    pub(crate) jwks_url: Option<String>,
    /// Accepted JWT algorithms (comma-separated; asymmetric only). Default: RS*, PS*, ES256,
    /// ES384, EdDSA.
    #[arg(long, value_delimiter = ',')]
    pub(crate) jwt_algorithms: Vec<String>,
    /// Seconds of clock skew tolerated on `exp`/`nbf`.
    #[arg(long)]
    pub(crate) jwt_leeway: Option<f64>,
    /// Least seconds between JWKS refetches caused by unknown `kid`s.
    #[arg(long)]
    pub(crate) jwks_refresh_cooldown: Option<f64>,
    /// The gateway's public base URL (for the OAuth protected-resource metadata and default
    /// audiences). Default: `http://<listen address>`.
    #[arg(long, value_name = "URL")]
    pub(crate) public_url: Option<String>,
    /// Serve anonymous callers on a non-loopback address (no authentication configured).
    #[arg(long)]
    pub(crate) allow_anonymous_non_loopback: bool,
    /// Cedar policy file: every operation must be permitted; lists are filtered.
    #[arg(long, value_name = "FILE")]
    pub(crate) policy: Option<PathBuf>,
    /// Audit log: one JSON line per MCP operation, appended to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    pub(crate) audit_log: Option<String>,
    /// Include request params and responses in audit lines, truncated to N bytes (default
    /// 4096).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "4096")]
    pub(crate) audit_bodies: Option<usize>,
    /// Per-principal rate limit over all requests: `N/s`, `N/m` or `N/h` (burst N).
    #[arg(long, value_name = "RATE")]
    pub(crate) rate_limit: Option<Rate>,
    /// Per-principal limit for one tool's calls: `NAME=RATE` (`*` for every tool without its
    /// own), comma-separated or repeated.
    #[arg(long, value_name = "NAME=RATE", value_delimiter = ',')]
    pub(crate) tool_rate_limit: Vec<String>,
    /// API keys given inline (`serve`'s config file, `auth.apiKeys`), already expanded.
    #[arg(skip)]
    pub(crate) inline_keys: Vec<(String, String)>,
}

/// The `--auth-config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    api_keys: Vec<FileKey>,
    jwt: Option<FileJwt>,
    public_url: Option<String>,
    #[serde(default)]
    allow_anonymous_non_loopback: bool,
    policy: Option<PathBuf>,
    audit_log: Option<String>,
    audit_bodies: Option<usize>,
    rate_limit: Option<String>,
    #[serde(default)]
    tool_rate_limits: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileKey {
    name: String,
    /// The key itself, or…
    key: Option<String>,
    /// …the environment variable holding it.
    key_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileJwt {
    issuer: String,
    jwks_url: String,
    #[serde(default)]
    audiences: Vec<String>,
    #[serde(default)]
    algorithms: Vec<String>,
    leeway_seconds: Option<f64>,
    jwks_refresh_cooldown_seconds: Option<f64>,
}

/// Everything the options resolve to.
pub(crate) struct Resolved {
    file: FileConfig,
    /// Every API key (inline, `--api-keys-file`, the auth-config file's), expanded.
    args_keys: Vec<(String, String)>,
}

fn secs(v: f64) -> Duration {
    Duration::try_from_secs_f64(v.max(0.0)).unwrap_or(Duration::from_secs(3600))
}

impl AuthArgs {
    /// The files the `--auth-config` file names (its policy and audit log), read without
    /// checking the rest: a file that cannot be read names none (the start then fails on it).
    pub(crate) fn file_paths(&self) -> Vec<PathBuf> {
        let Some(path) = &self.auth_config else {
            return Vec::new();
        };
        let file: Option<FileConfig> = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok());
        let Some(file) = file else { return Vec::new() };
        let log = file.audit_log.filter(|l| l != "-").map(PathBuf::from);
        file.policy.into_iter().chain(log).collect()
    }

    /// Reads the files. Fails on anything malformed: a gateway must not start with less
    /// protection than its operator asked for.
    pub(crate) fn resolve(&self) -> anyhow::Result<Resolved> {
        let file: FileConfig = match &self.auth_config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                serde_json::from_str(&text)
                    .with_context(|| format!("invalid auth config {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let mut args_keys = self.inline_keys.clone();
        if let Some(path) = &self.api_keys_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let Some((name, key)) = line.split_once(':') else {
                    bail!("{}:{}: expected name:key", path.display(), n + 1);
                };
                args_keys.push((name.trim().to_owned(), key.trim().to_owned()));
            }
        }
        // Read here, before any backend starts: a variable read is withheld from the stdio
        // backends started after (`config_vars`).
        for k in &file.api_keys {
            let key = match (&k.key, &k.key_env) {
                (Some(key), None) => key.clone(),
                (None, Some(var)) => crate::config_vars::var(var)
                    .with_context(|| format!("API key {:?}: ${var} is not set", k.name))?,
                _ => bail!("API key {:?}: give exactly one of key, keyEnv", k.name),
            };
            args_keys.push((k.name.clone(), key));
        }
        Ok(Resolved { file, args_keys })
    }

    /// Whether callers must present a credential (API keys or JWTs are configured).
    pub(crate) fn authenticated(&self, r: &Resolved) -> bool {
        !r.args_keys.is_empty()
            || !r.file.api_keys.is_empty()
            || self.jwt_issuer.is_some()
            || r.file.jwt.is_some()
    }

    /// Whether a caller without credentials would be served on `host`.
    /// `per_user`: a backend keeps tokens per principal (`auth: oauth`), which anonymous
    /// callers, all one principal, would share: refused off loopback whatever the opt-in.
    pub(crate) fn check_anonymous(
        &self,
        r: &Resolved,
        host: &str,
        per_user: bool,
    ) -> anyhow::Result<()> {
        let authenticated = self.authenticated(r);
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let allowed = self.allow_anonymous_non_loopback || r.file.allow_anonymous_non_loopback;
        if per_user && !authenticated && !loopback {
            bail!(
                "refusing to serve anonymous callers on {host} with a per-user OAuth backend: \
                 every anonymous caller would share one user's tokens; configure --api-keys-file \
                 or --jwt-issuer"
            );
        }
        if !(authenticated || loopback || allowed) {
            bail!(
                "refusing to serve anonymous callers on {host}: configure --api-keys-file or \
                 --jwt-issuer, or pass --allow-anonymous-non-loopback"
            );
        }
        Ok(())
    }

    /// The Cedar policy file, from the command line or the auth config.
    pub(crate) fn policy_path<'a>(&'a self, r: &'a Resolved) -> Option<&'a std::path::Path> {
        self.policy.as_deref().or(r.file.policy.as_deref())
    }

    /// Authorization, rate limits and audit for the core, and the policy a reload may
    /// replace.
    pub(crate) fn access(
        &self,
        r: &Resolved,
    ) -> anyhow::Result<(Access, Option<Arc<ReloadablePolicy>>)> {
        let mut access = Access::default();
        let mut reloadable = None;
        if let Some(path) = self.policy_path(r) {
            let policy = Arc::new(ReloadablePolicy::load(path)?);
            access.authorizer = Some(policy.clone());
            reloadable = Some(policy);
        }
        if let Some(path) = self.audit_log.as_ref().or(r.file.audit_log.as_ref()) {
            let bodies = self.audit_bodies.or(r.file.audit_bodies);
            access.audit = Some(
                AuditLog::open(path, bodies)
                    .with_context(|| format!("cannot open audit log {path}"))?,
            );
        }
        let per_principal = match (self.rate_limit, &r.file.rate_limit) {
            (Some(rate), _) => Some(rate),
            (None, Some(text)) => Some(text.parse().map_err(anyhow::Error::msg)?),
            (None, None) => None,
        };
        let mut per_tool = HashMap::new();
        for (name, rate) in &r.file.tool_rate_limits {
            per_tool.insert(name.clone(), rate.parse().map_err(anyhow::Error::msg)?);
        }
        for entry in &self.tool_rate_limit {
            let Some((name, rate)) = entry.split_once('=') else {
                bail!("--tool-rate-limit expects NAME=RATE, got {entry:?}");
            };
            per_tool.insert(
                name.trim().to_owned(),
                rate.parse().map_err(anyhow::Error::msg)?,
            );
        }
        if per_principal.is_some() || !per_tool.is_empty() {
            access.limits = Some(Arc::new(RateLimiter::new(per_principal, per_tool)));
        }
        Ok((access, reloadable))
    }

    /// The authenticator, once the listen address (hence the default public URL) is known.
    pub(crate) fn authenticator(
        &self,
        r: &Resolved,
        addr: std::net::SocketAddr,
    ) -> anyhow::Result<Authenticator> {
        let public_url = self
            .public_url
            .clone()
            .or_else(|| r.file.public_url.clone())
            .unwrap_or_else(|| format!("http://{addr}"));
        let public_url = public_url.trim_end_matches('/').to_owned();
        // Where authorization servers send users back (per-user OAuth to remotes).
        switchboard_core::oauth::site().set_public_url(&public_url);
        let keys = r.args_keys.clone();
        let jwt = match (&self.jwt_issuer, &r.file.jwt) {
            (None, None) => None,
            (issuer, file) => {
                let issuer = issuer
                    .clone()
                    .or_else(|| file.as_ref().map(|f| f.issuer.clone()))
                    .unwrap_or_default();
                let jwks = self
                    .jwks_url
                    .clone()
                    .or_else(|| file.as_ref().map(|f| f.jwks_url.clone()))
                    .context("--jwt-issuer needs --jwks-url")?;
                let mut audiences = self.jwt_audience.clone();
                if audiences.is_empty() {
                    audiences = file
                        .as_ref()
                        .map(|f| f.audiences.clone())
                        .unwrap_or_default();
                }
                if audiences.is_empty() {
                    audiences = vec![public_url.clone(), format!("{public_url}/mcp")];
                }
                let mut config = JwtConfig::new(issuer, audiences, jwks);
                let mut algs = self.jwt_algorithms.clone();
                if algs.is_empty() {
                    algs = file
                        .as_ref()
                        .map(|f| f.algorithms.clone())
                        .unwrap_or_default();
                }
                if !algs.is_empty() {
                    config.algorithms = algs
                        .iter()
                        .map(|a| parse_algorithm(a))
                        .collect::<Result<_, _>>()
                        .map_err(anyhow::Error::msg)?;
                }
                if let Some(v) = self
                    .jwt_leeway
                    .or(file.as_ref().and_then(|f| f.leeway_seconds))
                {
                    config.leeway = secs(v);
                }
                if let Some(v) = self
                    .jwks_refresh_cooldown
                    .or(file.as_ref().and_then(|f| f.jwks_refresh_cooldown_seconds))
                {
                    config.jwks_refresh_cooldown = secs(v);
                }
                Some(config)
            }
        };
        let auth = Authenticator::new(keys, jwt, &public_url).map_err(anyhow::Error::msg)?;
        if auth.required() {
            println!("switchboard: authentication required (bearer API keys / JWT)");
        }
        Ok(auth)
    }
}
