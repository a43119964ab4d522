//! A remote backend's outgoing identity: `backends[].auth` in the file, `--upstream-auth` and
//! its options on `run --url`. One set of rules for both: which keys each type takes and
//! needs, the client secret read from a file private to its owner (never from the command
//! line or the file itself), and the upstream crate's [`OutgoingAuth`] built from them.

use std::path::Path;
use std::time::Duration;

use switchboard_upstream::outgoing_auth::oauth::{self, ClientSettings, OAuthConfig, TokenAuth};
use switchboard_upstream::outgoing_auth::{
    check_token_endpoint, ClientCredentialsConfig, OutgoingAuth, OutgoingAuthError, Secret,
    TokenExchangeConfig,
};

use super::model::{AuthType, BackendAuth};
use super::ConfigError;

/// Deadline of one request to a token service (the call's own deadline bounds it too).
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The keys of `auth` besides `type`, as the file spells them.
pub(crate) const KEYS: [&str; 9] = [
    "tokenEndpoint",
    "clientId",
    "clientSecretFile",
    "audience",
    "scopes",
    "resource",
    "clientMetadataUrl",
    "tokenEndpointAuth",
    "authorizationServer",
];

/// The keys `kind` needs, and those it also takes.
pub(crate) fn keys(kind: AuthType) -> (&'static [&'static str], &'static [&'static str]) {
    const CLIENT: [&str; 3] = ["tokenEndpoint", "clientId", "clientSecretFile"];
    match kind {
        AuthType::Passthrough => (&[], &[]),
        AuthType::Oauth => (
            &[],
            &[
                "scopes",
                "clientId",
                "clientSecretFile",
                "clientMetadataUrl",
                "tokenEndpointAuth",
                "authorizationServer",
            ],
        ),
        AuthType::TokenExchange => (&CLIENT, &["audience", "scopes", "resource"]),
        AuthType::ClientCredentials => (&CLIENT, &["scopes"]),
    }
}

/// The type as the file spells it.
pub(crate) fn type_name(kind: AuthType) -> &'static str {
    match kind {
        AuthType::Passthrough => "passthrough",
        AuthType::TokenExchange => "tokenExchange",
        AuthType::ClientCredentials => "clientCredentials",
        AuthType::Oauth => "oauth",
    }
}

/// What `auth` resolves to: the upstream's settings, and a text that changes whenever they
/// do (for the reload diff; it holds a keyed digest of the secret, never the secret).
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) auth: OutgoingAuth,
    pub(crate) fingerprint: String,
}

/// Builds `auth` for `backend`. `name(key)` is how errors name a key (`backends[1].auth.clientId`,
/// `--upstream-client-id`); a relative `clientSecretFile` is taken from `base`.
pub(crate) fn resolve(
    auth: &BackendAuth,
    backend: &str,
    url: &str,
    base: &Path,
    name: &dyn Fn(&str) -> String,
) -> Result<Resolved, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let (needed, also) = keys(auth.kind);
    let given = |key: &str| match key {
        "tokenEndpoint" => auth.token_endpoint.is_some(),
        "clientId" => auth.client_id.is_some(),
        "clientSecretFile" => auth.client_secret_file.is_some(),
        "audience" => auth.audience.is_some(),
        "scopes" => !auth.scopes.is_empty(),
        "resource" => auth.resource.is_some(),
        "clientMetadataUrl" => auth.client_metadata_url.is_some(),
        "tokenEndpointAuth" => auth.token_endpoint_auth.is_some(),
        "authorizationServer" => auth.authorization_server.is_some(),
        _ => false,
    };
    if let Some(m) = auth.token_endpoint_auth.as_deref() {
        if TokenAuth::parse(m).is_none() {
            errors.push(ConfigError::new(
                &name("tokenEndpointAuth"),
                "one of client_secret_basic, client_secret_post, none",
            ));
        }
    }
    if let Some(u) = auth.client_metadata_url.as_deref() {
        if !u.starts_with("https://")
            || u.len() <= "https://".len()
            || !u["https://".len()..].contains('/')
        {
            errors.push(ConfigError::new(
                &name("clientMetadataUrl"),
                "must be an https URL with a path (the authorization server fetches it)",
            ));
        }
    }
    if auth.kind == AuthType::Oauth && auth.client_secret_file.is_some() && auth.client_id.is_none()
    {
        errors.push(ConfigError::new(
            &name("clientId"),
            "required with clientSecretFile (a pre-registered client)",
        ));
    }
    check_issuer_pin(auth, name, &mut errors);
    for key in needed {
        if !given(key) {
            errors.push(ConfigError::new(
                &name(key),
                format!("required for type {}", type_name(auth.kind)),
            ));
        }
    }
    for key in KEYS {
        if given(key) && !needed.contains(&key) && !also.contains(&key) {
            errors.push(ConfigError::new(
                &name(key),
                format!("not a key of type {}", type_name(auth.kind)),
            ));
        }
    }
    if auth.kind == AuthType::TokenExchange && !given("audience") && !given("resource") {
        errors.push(ConfigError::new(
            &name("audience"),
            "tokenExchange needs an audience or a resource: the exchanged token must be meant for this backend",
        ));
    }
    // Before the secret file is read: an endpoint the secret must never be sent to is
    // reported whether or not the file is there yet.
    if let (Some(url), true) = (&auth.token_endpoint, needed.contains(&"tokenEndpoint")) {
        if let Err(e) = check_token_endpoint(url) {
            let reason = match e {
                OutgoingAuthError::Config(reason) => reason.to_owned(),
                other => other.to_string(),
            };
            errors.push(ConfigError::new(&name("tokenEndpoint"), reason));
        }
    }
    for (i, scope) in auth.scopes.iter().enumerate() {
        if scope.is_empty() || scope.contains(char::is_whitespace) {
            errors.push(ConfigError::new(
                &format!("{}[{i}]", name("scopes")),
                "a scope is one non-empty word",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let secret = match &auth.client_secret_file {
        None => None,
        Some(file) => match crate::session_store::private_first_line(&base.join(file)) {
            Ok(Some(s)) => Some(Secret::new(&s)),
            Ok(None) => {
                return Err(vec![ConfigError::new(
                    &name("clientSecretFile"),
                    "the file is empty",
                )])
            }
            Err(e) => {
                return Err(vec![ConfigError::new(
                    &name("clientSecretFile"),
                    format!("{e:#}"),
                )])
            }
        },
    };
    let built = match (auth.kind, secret) {
        (AuthType::Passthrough, _) => Ok(OutgoingAuth::Passthrough),
        (AuthType::Oauth, client_secret) => oauth::Backend::new(
            OAuthConfig {
                backend: backend.to_owned(),
                server_url: url.to_owned(),
                scopes: auth.scopes.clone(),
                client: ClientSettings {
                    client_id: auth.client_id.clone(),
                    client_secret,
                    client_metadata_url: auth.client_metadata_url.clone(),
                    token_endpoint_auth: auth
                        .token_endpoint_auth
                        .as_deref()
                        .and_then(TokenAuth::parse),
                    authorization_server: auth.authorization_server.clone(),
                },
                timeout: TOKEN_TIMEOUT,
            },
            oauth::site(),
            match oauth::default_vault() {
                Ok(v) => v,
                Err(e) => return Err(vec![ConfigError::new(&name("type"), e.to_string())]),
            },
        )
        .map(OutgoingAuth::OAuth),
        (AuthType::TokenExchange, Some(client_secret)) => {
            OutgoingAuth::token_exchange(TokenExchangeConfig {
                backend: backend.to_owned(),
                token_endpoint: auth.token_endpoint.clone().unwrap_or_default(),
                client_id: auth.client_id.clone().unwrap_or_default(),
                client_secret,
                audience: auth.audience.clone(),
                scopes: auth.scopes.clone(),
                resource: auth.resource.clone(),
                timeout: TOKEN_TIMEOUT,
            })
        }
        (AuthType::ClientCredentials, Some(client_secret)) => {
            OutgoingAuth::client_credentials(ClientCredentialsConfig {
                token_endpoint: auth.token_endpoint.clone().unwrap_or_default(),
                client_id: auth.client_id.clone().unwrap_or_default(),
                client_secret,
                scopes: auth.scopes.clone(),
                timeout: TOKEN_TIMEOUT,
            })
        }
        (_, None) => {
            return Err(vec![ConfigError::new(&name("type"), "incomplete")]);
        }
    };
    let auth_built =
        built.map_err(|e| vec![ConfigError::new(&name("tokenEndpoint"), e.to_string())])?;
    Ok(Resolved {
        auth: auth_built,
        fingerprint: fingerprint(auth, base),
    })
}

/// oauth's `authorizationServer`: an https issuer (plain http to a loopback host only), and
/// required with a pre-registered `clientId`, whose credentials must reach no other server
/// than the one it is registered at, whatever the remote's metadata names.
fn check_issuer_pin(
    auth: &BackendAuth,
    name: &dyn Fn(&str) -> String,
    errors: &mut Vec<ConfigError>,
) {
    if auth.kind != AuthType::Oauth {
        return;
    }
    match (&auth.authorization_server, &auth.client_id) {
        (Some(issuer), _) => {
            if let Err(e) = check_token_endpoint(issuer) {
                let reason = match e {
                    OutgoingAuthError::Config(reason) => reason.to_owned(),
                    other => other.to_string(),
                };
                errors.push(ConfigError::new(&name("authorizationServer"), reason));
            }
        }
        (None, Some(_)) => errors.push(ConfigError::new(
            &name("authorizationServer"),
            "required with clientId: the issuer of the authorization server the client is registered at (exactly as its metadata names it); a pre-registered client's credentials go to no other server",
        )),
        (None, None) => {}
    }
}

/// Every setting, and the secret file's content as a keyed digest ([`keyed_digest`]).
fn fingerprint(auth: &BackendAuth, base: &Path) -> String {
    let secret = auth
        .client_secret_file
        .as_ref()
        .and_then(|f| std::fs::read(base.join(f)).ok())
        .map(|bytes| keyed_digest(&bytes));
    format!(
        "{}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        type_name(auth.kind),
        auth.token_endpoint,
        auth.client_id,
        auth.audience,
        auth.scopes,
        auth.resource,
        auth.client_metadata_url,
        auth.token_endpoint_auth,
        auth.authorization_server,
        secret
    )
}

/// HMAC-SHA256 of `bytes` under a random key of this process, in hex: equal for equal
/// content within the process (what the reload diff needs), and, unlike a plain digest of a
/// short secret, nothing to search a guess for where it is printed. Without an OS random
/// source every call gives a new value: the secret then counts as changed at each reload
/// (the backend's outgoing auth is rebuilt), never as unchanged.
fn keyed_digest(bytes: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    use std::sync::atomic::{AtomicU64, Ordering};
    static KEY: std::sync::OnceLock<Option<[u8; 32]>> = std::sync::OnceLock::new();
    static UNKEYED: AtomicU64 = AtomicU64::new(0);
    let key = KEY.get_or_init(|| {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).ok().map(|()| key)
    });
    let Some(mac) = key
        .as_ref()
        .and_then(|k| Hmac::<sha2::Sha256>::new_from_slice(k).ok())
    else {
        return format!("unkeyed-{}", UNKEYED.fetch_add(1, Ordering::Relaxed));
    };
    let mut mac = mac;
    mac.update(bytes);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir() -> std::path::PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("sb-outgoing-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn secret_file(dir: &Path, mode: u32) {
        let path = dir.join("sts.secret");
        std::fs::write(&path, "hunter2\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn exchange() -> BackendAuth {
        BackendAuth {
            kind: AuthType::TokenExchange,
            token_endpoint: Some("http://127.0.0.1:9/token".into()),
            client_id: Some("switchboard".into()),
            client_secret_file: Some("sts.secret".into()),
            audience: Some("internal".into()),
            scopes: vec!["tools".into()],
            resource: None,
            client_metadata_url: None,
            token_endpoint_auth: None,
            authorization_server: None,
        }
    }

    fn at(key: &str) -> String {
        format!("backends[0].auth.{key}")
    }

    fn messages(r: Result<Resolved, Vec<ConfigError>>) -> Vec<String> {
        r.map(|_| Vec::new())
            .unwrap_or_else(|e| e.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_complete_exchange_resolves_and_its_secret_is_nowhere_in_it() {
        let d = dir();
        secret_file(&d, 0o600);
        let r = resolve(&exchange(), "internal", "http://127.0.0.1:1/mcp", &d, &at).unwrap();
        assert!(r.auth.acts_as_caller());
        let shown = format!("{r:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    /// The reload diff's fingerprint changes with the secret file, but holds no plain digest
    /// of it (an unsalted SHA-256 of a short secret can be searched for), wherever it is
    /// printed.
    #[test]
    fn the_fingerprint_follows_the_secret_under_a_key_of_the_process() {
        use sha2::Digest as _;
        let d = dir();
        secret_file(&d, 0o600);
        let first = resolve(&exchange(), "internal", "http://127.0.0.1:1/mcp", &d, &at).unwrap();
        let hex = |bytes: &[u8]| -> String { bytes.iter().map(|b| format!("{b:02x}")).collect() };
        let plain = hex(&sha2::Sha256::digest(b"hunter2\n"));
        let plain_trimmed = hex(&sha2::Sha256::digest(b"hunter2"));
        for shown in [first.fingerprint.clone(), format!("{first:?}")] {
            assert!(!shown.contains(&plain), "{shown}");
            assert!(!shown.contains(&plain_trimmed), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        let same = resolve(&exchange(), "internal", "http://127.0.0.1:1/mcp", &d, &at).unwrap();
        assert_eq!(
            same.fingerprint, first.fingerprint,
            "stable within the process"
        );
        std::fs::write(d.join("sts.secret"), "hunter3\n").unwrap();
        let changed = resolve(&exchange(), "internal", "http://127.0.0.1:1/mcp", &d, &at).unwrap();
        assert_ne!(
            changed.fingerprint, first.fingerprint,
            "a new secret is a change"
        );
    }

    #[test]
    fn each_type_takes_its_keys_and_needs_its_own() {
        let d = dir();
        secret_file(&d, 0o600);
        let mut cc = exchange();
        cc.kind = AuthType::ClientCredentials;
        assert_eq!(
            messages(resolve(&cc, "b", "http://127.0.0.1:1/mcp", &d, &at)),
            vec!["backends[0].auth.audience: not a key of type clientCredentials"]
        );
        let mut bare = exchange();
        bare.token_endpoint = None;
        bare.audience = None;
        assert_eq!(
            messages(resolve(&bare, "b", "http://127.0.0.1:1/mcp", &d, &at)),
            vec![
                "backends[0].auth.tokenEndpoint: required for type tokenExchange",
                "backends[0].auth.audience: tokenExchange needs an audience or a resource: the exchanged token must be meant for this backend",
            ]
        );
        let mut pass = exchange();
        pass.kind = AuthType::Passthrough;
        assert_eq!(
            messages(resolve(&pass, "b", "http://127.0.0.1:1/mcp", &d, &at)).len(),
            5
        );
        let mut oauth = exchange();
        oauth.kind = AuthType::Oauth;
        oauth.authorization_server = Some("https://as.example.com".into());
        assert_eq!(
            messages(resolve(&oauth, "b", "http://127.0.0.1:1/mcp", &d, &at)),
            vec![
                "backends[0].auth.tokenEndpoint: not a key of type oauth",
                "backends[0].auth.audience: not a key of type oauth",
            ]
        );
        let mut spaced = exchange();
        spaced.scopes = vec!["a b".into()];
        assert_eq!(
            messages(resolve(&spaced, "b", "http://127.0.0.1:1/mcp", &d, &at)),
            vec!["backends[0].auth.scopes[0]: a scope is one non-empty word"]
        );
    }

    /// A pre-registered oauth client is pinned to the authorization server it is registered
    /// at: refused without one, naming the key; the pin is an https (or loopback) URL.
    #[test]
    fn a_pre_registered_oauth_client_needs_its_authorization_server() {
        let d = dir();
        secret_file(&d, 0o600);
        let oauth = BackendAuth {
            kind: AuthType::Oauth,
            token_endpoint: None,
            audience: None,
            scopes: vec![],
            ..exchange()
        };
        let err = messages(resolve(&oauth, "b", "https://mcp.example.com/mcp", &d, &at));
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(
            err[0].starts_with("backends[0].auth.authorizationServer: required with clientId"),
            "{err:?}"
        );
        let cleartext = BackendAuth {
            authorization_server: Some("http://as.example.com".into()),
            ..oauth.clone()
        };
        let err = messages(resolve(
            &cleartext,
            "b",
            "https://mcp.example.com/mcp",
            &d,
            &at,
        ));
        assert!(
            err.len() == 1 && err[0].starts_with("backends[0].auth.authorizationServer: "),
            "{err:?}"
        );
        let good = BackendAuth {
            authorization_server: Some("https://as.example.com".into()),
            ..oauth
        };
        assert!(resolve(&good, "b", "https://mcp.example.com/mcp", &d, &at).is_ok());
        let mut other = exchange();
        other.authorization_server = Some("https://as.example.com".into());
        assert_eq!(
            messages(resolve(&other, "b", "https://mcp.example.com/mcp", &d, &at)),
            vec!["backends[0].auth.authorizationServer: not a key of type tokenExchange"]
        );
    }

    #[test]
    fn the_secret_file_must_be_private_and_the_endpoint_usable() {
        let d = dir();
        secret_file(&d, 0o644);
        let err = messages(resolve(&exchange(), "b", "http://127.0.0.1:1/mcp", &d, &at));
        assert!(
            err[0].contains("readable or writable by group or others"),
            "{err:?}"
        );
        assert!(!err[0].contains("hunter2"));
        secret_file(&d, 0o600);
        // Plain http only to a loopback host: reported with the key, before the secret file
        // is read (validate says it even where the file is not there yet).
        let mut cleartext = exchange();
        cleartext.token_endpoint = Some("http://sts.example.com/token".into());
        cleartext.client_secret_file = Some("missing.secret".into());
        let err = messages(resolve(&cleartext, "b", "http://127.0.0.1:1/mcp", &d, &at));
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(
            err[0].starts_with("backends[0].auth.tokenEndpoint: ") && err[0].contains("https"),
            "{err:?}"
        );
        let mut bad = exchange();
        bad.token_endpoint = Some("ftp://h/token".into());
        let err = messages(resolve(&bad, "b", "http://127.0.0.1:1/mcp", &d, &at));
        assert!(
            err[0].starts_with("backends[0].auth.tokenEndpoint: "),
            "{err:?}"
        );
    }
}
