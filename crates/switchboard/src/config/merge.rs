//! `serve`'s options: the config file's values, except where the same flag as `run`'s was
//! given on the command line. Lists given on the command line replace the file's; API keys
//! add up (the file's `auth.apiKeys` and `--api-keys-file`).

use super::spec::{AggregationSpec, BackendKind, ServeSpec};
use super::{ConfigError, ConfigErrors, Loaded};
use crate::cli::{GatewayArgs, Isolation};

/// Takes `$val` (an `Option`) into `$dst` unless flag `$id` was given.
macro_rules! take {
    ($given:ident, $id:literal, $dst:expr, $val:expr) => {
        if let Some(v) = $val {
            if !$given($id) {
                $dst = v;
            }
        }
    };
}

/// The spec `serve` starts from. `given(id)`: whether the flag with that clap id (the field
/// name) was on the command line.
pub(crate) fn serve_spec(
    loaded: Loaded,
    mut args: GatewayArgs,
    given: &dyn Fn(&str) -> bool,
) -> Result<ServeSpec, ConfigErrors> {
    let Loaded {
        source_name,
        file,
        resolved,
    } = loaded;
    let f = &file;
    let secs = |d: &super::model::Dur| d.0.as_secs_f64();
    if let Some(l) = &f.listen {
        take!(given, "host", args.host, l.host.clone());
        take!(given, "port", args.port, l.port);
    }
    take!(
        given,
        "isolation",
        args.isolation,
        f.isolation.map(isolation)
    );
    take!(
        given,
        "worker_threads",
        args.worker_threads,
        f.worker_threads.map(Some)
    );
    if let Some(t) = &f.timeouts {
        take!(
            given,
            "request_timeout",
            args.request_timeout,
            t.request.as_ref().map(secs)
        );
        take!(
            given,
            "max_request_time",
            args.max_request_time,
            t.max_request.as_ref().map(secs)
        );
        take!(
            given,
            "session_ttl",
            args.session_ttl,
            t.session_ttl.as_ref().map(secs)
        );
        take!(
            given,
            "partition_idle",
            args.partition_idle,
            t.partition_idle.as_ref().map(secs)
        );
        take!(
            given,
            "send_timeout",
            args.send_timeout,
            t.send.as_ref().map(secs)
        );
        take!(
            given,
            "header_read_timeout",
            args.header_read_timeout,
            t.header_read.as_ref().map(secs)
        );
        take!(
            given,
            "idle_timeout",
            args.idle_timeout,
            t.idle.as_ref().map(secs)
        );
        take!(
            given,
            "startup_timeout",
            args.startup_timeout,
            t.startup.as_ref().map(secs)
        );
        take!(
            given,
            "listen_grace",
            args.listen_grace,
            t.listen_grace.as_ref().map(secs)
        );
        take!(
            given,
            "shutdown_grace",
            args.shutdown_grace,
            t.shutdown_grace.as_ref().map(secs)
        );
        take!(
            given,
            "keep_alive",
            args.keep_alive,
            t.keep_alive.as_ref().map(secs)
        );
    }
    if let Some(l) = &f.limits {
        take!(
            given,
            "max_sessions",
            args.max_sessions,
            l.max_sessions.map(Some)
        );
        take!(
            given,
            "max_sessions_per_principal",
            args.max_sessions_per_principal,
            l.max_sessions_per_principal.map(Some)
        );
        take!(
            given,
            "mrtr_per_principal",
            args.mrtr_per_principal,
            l.mrtr_per_principal.map(Some)
        );
        take!(
            given,
            "max_connections",
            args.max_connections,
            l.max_connections.map(Some)
        );
        take!(given, "max_in_flight", args.max_in_flight, l.max_in_flight);
        take!(
            given,
            "max_body_bytes",
            args.max_body_bytes,
            l.max_body_bytes
        );
        take!(
            given,
            "max_line_bytes",
            args.max_line_bytes,
            l.max_line_bytes
        );
        let a = &mut args.auth;
        take!(
            given,
            "rate_limit",
            a.rate_limit,
            l.rate_limit.as_ref().and_then(|r| r.parse().ok()).map(Some)
        );
        let tools: Vec<String> = l
            .tool_rate_limits
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        take!(
            given,
            "tool_rate_limit",
            a.tool_rate_limit,
            Some(tools).filter(|t| !t.is_empty())
        );
    }
    let mut errors = Vec::new();
    if let Some(h) = &f.http {
        take!(
            given,
            "allowed_hosts",
            args.allowed_hosts,
            h.allowed_hosts.clone()
        );
        take!(
            given,
            "allowed_origins",
            args.allowed_origins,
            h.allowed_origins.clone()
        );
        if let Some(p) = &h.endpoint_prefix {
            match switchboard_http::clean_prefix(p) {
                Some(clean) => take!(given, "endpoint_prefix", args.endpoint_prefix, Some(clean)),
                None => errors.push(ConfigError::new(
                    "http.endpointPrefix",
                    "expected an absolute path like /gateway (plain path characters)",
                )),
            }
        }
        take!(
            given,
            "trust_forwarded_prefix",
            args.trust_forwarded_prefix,
            h.trust_forwarded_prefix
        );
    }
    auth(f, &resolved, &mut args, given);
    if !errors.is_empty() {
        return Err(ConfigErrors {
            source_name,
            errors,
        });
    }
    let mut backends = resolved.backends;
    if given("isolation") {
        // The flag is the strongest statement: it applies to every command backend.
        for b in &mut backends {
            if let BackendKind::Stdio(s) = &mut b.kind {
                s.isolation = args.isolation;
            }
        }
    }
    if let [one] = backends.as_slice() {
        // One backend: its own deadline is the gateway's.
        take!(
            given,
            "request_timeout",
            args.request_timeout,
            one.timeout.map(|d| d.as_secs_f64())
        );
    }
    let aggregation = AggregationSpec::from_file(f.aggregation.as_ref(), &backends);
    Ok(ServeSpec {
        options: args,
        backends,
        aggregation,
    })
}

fn auth(
    f: &super::model::ConfigFile,
    resolved: &super::Resolved,
    args: &mut GatewayArgs,
    given: &dyn Fn(&str) -> bool,
) {
    let a = &mut args.auth;
    a.inline_keys.clone_from(&resolved.api_keys);
    if let Some(p) = &f.policy {
        take!(
            given,
            "policy",
            a.policy,
            Some(Some(resolved.path(&p.file)))
        );
    }
    if let Some(audit) = &f.audit {
        let log = if audit.log == "-" {
            audit.log.clone()
        } else {
            resolved.path(audit.log.as_ref()).display().to_string()
        };
        take!(given, "audit_log", a.audit_log, Some(Some(log)));
        take!(
            given,
            "audit_bodies",
            a.audit_bodies,
            audit.bodies.map(Some)
        );
    }
    let Some(file) = &f.auth else { return };
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| Some(resolved.path(p)));
    take!(given, "auth_config", a.auth_config, path(&file.config_file));
    take!(
        given,
        "api_keys_file",
        a.api_keys_file,
        path(&file.api_keys_file)
    );
    take!(
        given,
        "public_url",
        a.public_url,
        file.public_url.clone().map(Some)
    );
    take!(
        given,
        "allow_anonymous_non_loopback",
        a.allow_anonymous_non_loopback,
        file.allow_anonymous_non_loopback
    );
    let Some(jwt) = &file.jwt else { return };
    take!(
        given,
        "jwt_issuer",
        a.jwt_issuer,
        Some(Some(jwt.issuer.clone()))
    );
    take!(
        given,
        "jwks_url",
        a.jwks_url,
        Some(Some(jwt.jwks_url.clone()))
    );
    take!(
        given,
        "jwt_audience",
        a.jwt_audience,
        Some(jwt.audiences.clone()).filter(|v| !v.is_empty())
    );
    take!(
        given,
        "jwt_algorithms",
        a.jwt_algorithms,
        Some(jwt.algorithms.clone()).filter(|v| !v.is_empty())
    );
    take!(
        given,
        "jwt_leeway",
        a.jwt_leeway,
        jwt.leeway.map(|d| Some(d.0.as_secs_f64()))
    );
    take!(
        given,
        "jwks_refresh_cooldown",
        a.jwks_refresh_cooldown,
        jwt.jwks_refresh_cooldown.map(|d| Some(d.0.as_secs_f64()))
    );
}

fn isolation(k: super::model::IsolationKey) -> Isolation {
    match k {
        super::model::IsolationKey::Shared => Isolation::Shared,
        super::model::IsolationKey::PerSession => Isolation::PerSession,
    }
}
