//! `switchboard run --url`: fronting a remote MCP server.
//!
//! A remote is always served with per-session isolation: every Legacy client session gets an
//! upstream session of its own (the client's own `initialize` goes to the remote), every
//! Modern partition too, so no upstream session is ever shared between principals, and the
//! remote's sampling, elicitation, logging and progress reach exactly the session they belong
//! to. The shared handle is stateless: it carries Modern requests (and the gateway's probes)
//! and never holds an upstream session.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use hyper::header::{HeaderName, HeaderValue};

use switchboard_core::{Backend, CoreError, EraPolicy, SpawnBackend};
use switchboard_upstream::remote::{
    Mode, RemoteConfig, RemoteEndpoint, RemoteError, RemoteTransport, RemoteUpstream,
};
use switchboard_upstream::{InboundSink, Upstream, UpstreamError, UpstreamOwner};

/// How to reach a remote MCP server (instead of a command after `--`).
#[derive(Debug, Args)]
pub(crate) struct RemoteArgs {
    /// Front the remote MCP server at this URL (`http://` or `https://`) instead of a local
    /// command.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub(crate) url: Option<String>,
    /// The remote's transport. `auto` tries Streamable HTTP and falls back to HTTP+SSE
    /// (2024-11-05) on the same URL when the remote answers but not as Streamable HTTP.
    #[arg(long, value_enum, default_value_t = TransportArg::Auto, requires = "url")]
    pub(crate) transport: TransportArg,
    /// A header sent to the remote on every request, `Name: value` (repeatable). `${VAR}` in
    /// the value is taken from the gateway's environment, so secrets stay off the command
    /// line. Values are never logged.
    #[arg(long = "header", value_name = "NAME: VALUE", requires = "url")]
    pub(crate) headers: Vec<String>,
    /// Read more such headers from a file, one per line (`#` comments and blank lines skipped).
    #[arg(long, value_name = "FILE", requires = "url")]
    pub(crate) header_file: Option<std::path::PathBuf>,
    /// How the gateway authenticates to the remote, per call: `passthrough` (the caller's own
    /// verified JWT, unchanged; discouraged), `token-exchange` (RFC 8693: the caller's JWT
    /// exchanged for a token meant for the remote), `client-credentials` (the gateway's own
    /// token). Without it: the `--header`s only. With `passthrough` and `token-exchange`,
    /// API-key and anonymous callers are refused.
    #[arg(long, value_enum, value_name = "TYPE", requires = "url")]
    pub(crate) upstream_auth: Option<UpstreamAuthArg>,
    /// The token service's token endpoint (token-exchange, client-credentials).
    #[arg(long, value_name = "URL", requires = "upstream_auth")]
    pub(crate) upstream_token_endpoint: Option<String>,
    /// The audience requested in a token exchange.
    #[arg(long, value_name = "AUDIENCE", requires = "upstream_auth")]
    pub(crate) upstream_audience: Option<String>,
    /// The resource (RFC 8707) requested in a token exchange.
    #[arg(long, value_name = "URI", requires = "upstream_auth")]
    pub(crate) upstream_resource: Option<String>,
    /// A scope to request (repeatable).
    #[arg(
        long = "upstream-scope",
        value_name = "SCOPE",
        requires = "upstream_auth"
    )]
    pub(crate) upstream_scopes: Vec<String>,
    /// The gateway's client id at the token service.
    #[arg(long, value_name = "ID", requires = "upstream_auth")]
    pub(crate) upstream_client_id: Option<String>,
    /// A file (mode 0600) whose first line is the gateway's client secret there.
    #[arg(long, value_name = "FILE", requires = "upstream_auth")]
    pub(crate) upstream_client_secret_file: Option<std::path::PathBuf>,
    /// oauth: the public https URL of the gateway's Client ID Metadata Document (it serves
    /// the document at `/oauth/client-metadata.json`; the URL is its `client_id`).
    #[arg(long, value_name = "URL", requires = "upstream_auth")]
    pub(crate) upstream_client_metadata_url: Option<String>,
    /// oauth: the token endpoint auth method (`client_secret_basic`, `client_secret_post`,
    /// `none`); default: from the registration and the server's metadata.
    #[arg(long, value_name = "METHOD", requires = "upstream_auth")]
    pub(crate) upstream_token_endpoint_auth: Option<String>,
    /// oauth: the issuer of the remote's authorization server, exactly as its metadata names
    /// it; required with `--upstream-client-id` (the client's credentials go nowhere else).
    #[arg(long, value_name = "ISSUER", requires = "upstream_auth")]
    pub(crate) upstream_authorization_server: Option<String>,
}

/// `--upstream-auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum UpstreamAuthArg {
    /// The caller's own verified JWT, unchanged.
    Passthrough,
    /// RFC 8693 token exchange of the caller's JWT.
    TokenExchange,
    /// The gateway's own token (client credentials grant).
    ClientCredentials,
    /// Per-user OAuth: each caller's own token, after its consent (authorization code + PKCE).
    Oauth,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TransportArg {
    /// Streamable HTTP first, then HTTP+SSE.
    Auto,
    /// Streamable HTTP (MCP 2025-03-26 and later).
    Streamable,
    /// HTTP+SSE (MCP 2024-11-05): the URL is the SSE stream's.
    Sse,
}

impl RemoteArgs {
    /// `--upstream-auth` and its options, checked as the file's `auth` is (`headers`: the
    /// `--header`s, which must not hold an `Authorization` beside it).
    pub(crate) fn outgoing(
        &self,
        headers: &[(HeaderName, HeaderValue)],
    ) -> anyhow::Result<crate::config::outgoing::Resolved> {
        use crate::config::model::{AuthType, BackendAuth};
        let Some(kind) = self.upstream_auth else {
            return Ok(crate::config::outgoing::Resolved {
                auth: Default::default(),
                fingerprint: String::new(),
            });
        };
        anyhow::ensure!(
            !headers.iter().any(|(n, _)| *n == hyper::header::AUTHORIZATION),
            "--upstream-auth cannot be combined with an Authorization --header: the gateway sets it"
        );
        let auth = BackendAuth {
            kind: match kind {
                UpstreamAuthArg::Passthrough => AuthType::Passthrough,
                UpstreamAuthArg::TokenExchange => AuthType::TokenExchange,
                UpstreamAuthArg::ClientCredentials => AuthType::ClientCredentials,
                UpstreamAuthArg::Oauth => AuthType::Oauth,
            },
            token_endpoint: self.upstream_token_endpoint.clone(),
            client_id: self.upstream_client_id.clone(),
            client_secret_file: self.upstream_client_secret_file.clone(),
            audience: self.upstream_audience.clone(),
            scopes: self.upstream_scopes.clone(),
            resource: self.upstream_resource.clone(),
            client_metadata_url: self.upstream_client_metadata_url.clone(),
            token_endpoint_auth: self.upstream_token_endpoint_auth.clone(),
            authorization_server: self.upstream_authorization_server.clone(),
        };
        let flag = |key: &str| match key {
            "type" => "--upstream-auth".to_owned(),
            "tokenEndpoint" => "--upstream-token-endpoint".to_owned(),
            "clientId" => "--upstream-client-id".to_owned(),
            "clientSecretFile" => "--upstream-client-secret-file".to_owned(),
            "audience" => "--upstream-audience".to_owned(),
            "scopes" => "--upstream-scope".to_owned(),
            "resource" => "--upstream-resource".to_owned(),
            "clientMetadataUrl" => "--upstream-client-metadata-url".to_owned(),
            "tokenEndpointAuth" => "--upstream-token-endpoint-auth".to_owned(),
            "authorizationServer" => "--upstream-authorization-server".to_owned(),
            other => other.to_owned(),
        };
        let url = self.url.as_deref().unwrap_or("");
        crate::config::outgoing::resolve(&auth, "default", url, std::path::Path::new("."), &flag)
            .map_err(|errors| {
                anyhow::anyhow!(
                    "{}",
                    errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            })
    }

    /// `--header` and `--header-file` lines, each checked and expanded.
    pub(crate) fn headers(&self) -> anyhow::Result<Vec<(HeaderName, HeaderValue)>> {
        let mut lines: Vec<String> = self.headers.clone();
        if let Some(path) = &self.header_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--header-file {}", path.display()))?;
            lines.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned),
            );
        }
        lines
            .iter()
            .map(|line| parse_header(line, crate::config_vars::var))
            .collect()
    }
}

/// A remote's configuration: where, with which headers, within which deadlines.
/// `call_timeout` bounds a whole call (the gateway's own deadline, restarted by progress,
/// cancels it earlier); `send_timeout` bounds a notification or answer POST.
pub(crate) fn remote_config(
    spec: &crate::config::spec::RemoteSpec,
    call_timeout: Duration,
    send_timeout: Duration,
) -> RemoteConfig {
    let mut config = RemoteConfig::new(spec.url.clone());
    config.call_timeout = call_timeout;
    config.send_timeout = send_timeout;
    config.headers.clone_from(&spec.headers);
    config.auth = spec.auth.clone();
    config
}

/// `Name: value` with `${VAR}` expanded by `env`. Errors name the header, never its value.
fn parse_header(
    raw: &str,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<(HeaderName, HeaderValue)> {
    let (name, value) = raw.split_once(':').with_context(|| {
        format!(
            "--header: expected `Name: value`, got no `:` in the value given ({} bytes, not shown: it may be a credential)",
            raw.len()
        )
    })?;
    let name = header_name(name.trim()).map_err(|e| match e {
        // Not quoted: with the `:` misplaced, a credential sits before it.
        HeaderNameError::Invalid(_) => anyhow::anyhow!(
            "--header: the text before the first `:` is not a header name (not shown: it may be a credential)"
        ),
        HeaderNameError::Reserved(_) => anyhow::anyhow!("--header {e}"),
    })?;
    let value = crate::config::secrets::expand(value.trim(), &env)
        .with_context(|| format!("--header {name}"))?;
    let value = header_value(&value).with_context(|| format!("--header {name}"))?;
    Ok((name, value))
}

/// Why a header name is refused (never holds a value).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeaderNameError {
    #[error("`{0}` is not a header name")]
    Invalid(String),
    #[error("{0}: the gateway sets this header itself")]
    Reserved(String),
}

/// A header name the operator may set on requests to a remote.
pub(crate) fn header_name(raw: &str) -> Result<HeaderName, HeaderNameError> {
    let name = HeaderName::from_bytes(raw.as_bytes())
        .map_err(|_| HeaderNameError::Invalid(raw.to_owned()))?;
    // The gateway sets these itself, per upstream session or per request: a fixed value
    // would make every session present the same `Mcp-Session-Id` (one upstream session for
    // every principal), or break the framing of requests on the shared connection pool.
    let reserved = name.as_str().starts_with("mcp-")
        || name.as_str() == "last-event-id"
        || switchboard_upstream::remote::RESERVED_HEADERS.contains(&name.as_str());
    if reserved {
        return Err(HeaderNameError::Reserved(name.to_string()));
    }
    Ok(name)
}

/// An (expanded) header value, marked sensitive so it is never logged.
pub(crate) fn header_value(value: &str) -> anyhow::Result<HeaderValue> {
    let mut value = HeaderValue::from_str(value)
        .map_err(|_| anyhow::anyhow!("the value is not a valid header value"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The backend, the owner of the gateway's own upstream session (if it keeps one), and the
/// endpoint on the transport that answered.
type Connected = (Backend, Option<UpstreamOwner>, RemoteEndpoint);

/// Connects over the chosen transport (see [`TransportArg::Auto`]); returns the backend and
/// the endpoint on the transport that answered.
pub(crate) async fn connect_with(
    endpoint: RemoteEndpoint,
    choice: TransportArg,
    sink: &Arc<dyn InboundSink>,
    timeout: Duration,
) -> anyhow::Result<Connected> {
    let on = |t| endpoint.clone().with_transport(t);
    let only = match choice {
        TransportArg::Streamable => Some(RemoteTransport::Streamable),
        TransportArg::Sse => Some(RemoteTransport::Sse),
        TransportArg::Auto => None,
    };
    if let Some(t) = only {
        let endpoint = on(t);
        let (backend, owner) = connect(&endpoint, sink, timeout).await?;
        return Ok((backend, owner, endpoint));
    }
    let streamable = on(RemoteTransport::Streamable);
    let first = match connect(&streamable, sink, timeout).await {
        Ok((backend, owner)) => return Ok((backend, owner, streamable)),
        // Nobody there: HTTP+SSE would not answer either.
        Err(e) if unreachable(&e) => return Err(e),
        Err(e) => e,
    };
    let sse = on(RemoteTransport::Sse);
    match connect(&sse, sink, timeout).await {
        Ok((backend, owner)) => {
            println!("switchboard: the remote speaks HTTP+SSE (2024-11-05), not Streamable HTTP");
            Ok((backend, owner, sse))
        }
        Err(second) => Err(second.context(format!(
            "neither Streamable HTTP ({first:#}) nor HTTP+SSE worked"
        ))),
    }
}

/// Whether a per-user OAuth remote refused the gateway's own (tokenless) probe with 401.
fn needs_consent(endpoint: &RemoteEndpoint, e: &CoreError) -> bool {
    use switchboard_upstream::outgoing_auth::OutgoingAuth;
    // 401 to the probe; or a Modern-only remote that refuses `initialize` (-32020) after
    // its `server/discover` asked for authorization.
    let text = e.to_string();
    matches!(endpoint.auth(), OutgoingAuth::OAuth(_))
        && (text.contains("HTTP 401") || text.contains("-32020"))
}

/// Whether connecting failed below HTTP.
fn unreachable(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<CoreError>(),
            Some(CoreError::Backend(UpstreamError::Remote(
                RemoteError::Transport(_)
            )))
        )
    })
}

/// Learns the remote's eras and what it declared, on an upstream session of the gateway's own
/// that is ended at once; returns the backend with its stateless shared handle.
pub(crate) async fn connect(
    endpoint: &RemoteEndpoint,
    sink: &Arc<dyn InboundSink>,
    timeout: Duration,
) -> anyhow::Result<(Backend, Option<UpstreamOwner>)> {
    let probe = RemoteUpstream::new(endpoint, Mode::Session, sink.clone());
    let owner = probe.owner();
    // Modern first: a remote that answers `server/discover` is sent no Legacy `initialize`
    // of the gateway's own until a Legacy client arrives (`per_session::legacy`).
    let policy = match endpoint.transport() {
        RemoteTransport::Sse => EraPolicy::Auto,
        RemoteTransport::Streamable => EraPolicy::ModernFirst,
    };
    let connected = Backend::connect(Upstream::Remote(probe.clone()), timeout, policy).await;
    let mut backend = match connected {
        Ok(b) => b,
        // Per-user OAuth: the gateway's own probe has no user's token, and a 401 means
        // "needs consent", not "down". The eras are learned from no handshake: both are
        // assumed, and each client's own requests (with its own token) find out.
        Err(e) if needs_consent(endpoint, &e) => {
            owner.shutdown(Duration::from_secs(2)).await;
            println!("switchboard: the remote asks for authorization (401); each caller is asked for consent on first use");
            let mut backend = Backend::unprobed(Upstream::Remote(RemoteUpstream::new(
                endpoint,
                Mode::Stateless,
                sink.clone(),
            )));
            backend.info.era.modern = endpoint.transport() != RemoteTransport::Sse;
            return Ok((backend, None));
        }
        Err(e) => {
            owner.shutdown(Duration::from_secs(2)).await;
            return Err(e).context("remote did not become ready");
        }
    };
    if endpoint.transport() == RemoteTransport::Sse {
        // Every HTTP+SSE exchange belongs to a session: there is no stateless path for
        // Modern requests, whatever the remote answered on the probe's session.
        backend.info.era.modern = false;
    }
    backend.handle = Upstream::Remote(RemoteUpstream::new(endpoint, Mode::Stateless, sink.clone()));
    if backend.info.era.modern {
        owner.shutdown(Duration::from_secs(2)).await;
        return Ok((backend, None));
    }
    // A Legacy-only remote refuses sessionless requests, so the gateway's own reads (its
    // `tools/list` walk for `Mcp-Param-*` checks) keep the probe's session; no client's
    // request ever goes there.
    backend.internal = Some(Upstream::Remote(probe));
    Ok((backend, Some(UpstreamOwner::Remote(owner))))
}

/// Opens an upstream session per client session (and per Modern partition).
#[derive(Debug)]
pub(crate) struct RemoteSpawner(pub(crate) RemoteEndpoint);

impl SpawnBackend for RemoteSpawner {
    fn spawn(
        &self,
        sink: Arc<dyn InboundSink>,
    ) -> Result<(Upstream, UpstreamOwner), UpstreamError> {
        let upstream = RemoteUpstream::new(&self.0, Mode::Session, sink);
        let owner = UpstreamOwner::Remote(upstream.owner());
        Ok((Upstream::Remote(upstream), owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        (var == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn headers_expand_variables_and_refuse_what_would_be_wrong() {
        let (name, value) = parse_header("Authorization: Bearer ${TOKEN}", env).unwrap();
        assert_eq!(name, "authorization");
        assert_eq!(value, "Bearer s3cret");
        assert!(value.is_sensitive());
        let unset = parse_header("X-Key: ${MISSING}", env).unwrap_err();
        assert!(format!("{unset:#}").contains("MISSING"), "{unset:#}");
        for bad in [
            "no colon",
            "bad name: v",
            "X: ${UNCLOSED",
            "X: a\u{1}b",
            "Mcp-Session-Id: fixed",
            "MCP-Protocol-Version: 2025-11-25",
            "Content-Length: 0",
            "Host: elsewhere",
            "Last-Event-ID: 1",
            "Keep-Alive: timeout=5",
            "Proxy-Connection: close",
            "Expect: 100-continue",
            "Upgrade: h2c",
        ] {
            let err = parse_header(bad, env).unwrap_err();
            assert!(!format!("{err:#}").contains("s3cret"), "{err:#}");
        }
    }
}
