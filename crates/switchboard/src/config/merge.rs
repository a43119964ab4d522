//! `serve`'s options: the config file's values, except where the same flag as `run`'s was
//! given on the command line. Lists given on the command line replace the file's; API keys
//! add up (the file's `auth.apiKeys` and `--api-keys-file`).

use super::model::{ConfigFile, Dur, IsolationKey};
use super::spec::{AggregationSpec, BackendKind, ServeSpec};
use super::{ConfigError, ConfigErrors, Loaded, Resolved};
use crate::cli::{GatewayArgs, Isolation};

/// Sets options from the file unless their flag was given.
struct Over<'a> {
    /// Whether the flag with this clap id (the field name) was on the command line.
    given: &'a dyn Fn(&str) -> bool,
}

impl Over<'_> {
    fn set<T>(&self, id: &str, dst: &mut T, val: Option<T>) {
        if let Some(v) = val {
            if !(self.given)(id) {
                *dst = v;
            }
        }
    }
}

fn secs(d: Option<Dur>) -> Option<f64> {
    d.map(|d| d.0.as_secs_f64())
}

/// The spec `serve` starts from.
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
    let o = Over { given };
    if let Some(l) = &file.listen {
        o.set("host", &mut args.host, l.host.clone());
        o.set("port", &mut args.port, l.port);
    }
    o.set(
        "isolation",
        &mut args.isolation,
        file.isolation.map(isolation),
    );
    o.set(
        "worker_threads",
        &mut args.worker_threads,
        file.worker_threads.map(Some),
    );
    timeouts(&o, &file, &mut args);
    session_store(&o, &file, &mut args);
    ops(&o, &file, &mut args.ops);
    limits(&o, &file, &mut args);
    let errors = http(&o, &file, &mut args);
    auth(&o, &file, &resolved, &mut args);
    o.set(
        "token_store_key_file",
        &mut args.token_store_key_file,
        resolved.token_key_file.clone().map(Some),
    );
    if !errors.is_empty() {
        return Err(ConfigErrors {
            source_name,
            errors,
        });
    }
    let guard_base = resolved.base.clone();
    let mut backends = resolved.backends;
    for b in &mut backends {
        crate::guardrails::absolutize(&mut b.guardrails, &guard_base);
        let prompts = b.prompts.overrides.values_mut();
        for o in b.tools.overrides.values_mut().chain(prompts) {
            crate::guardrails::absolutize(&mut o.guardrails, &guard_base);
        }
    }
    let mut guardrails = file.guardrails.clone();
    crate::guardrails::absolutize(&mut guardrails, &guard_base);
    if let Err(e) = crate::guardrails::check(&guardrails, &backends) {
        return Err(ConfigErrors {
            source_name,
            errors: vec![ConfigError::new("guardrails", e)],
        });
    }
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
        let own = one.timeout.map(|d| d.as_secs_f64());
        o.set("request_timeout", &mut args.request_timeout, own);
    }
    let aggregation = AggregationSpec::from_file(file.aggregation.as_ref(), &backends);
    let composites = super::composite::plans(&file).map_err(|errors| ConfigErrors {
        source_name: source_name.clone(),
        errors,
    })?;
    Ok(ServeSpec {
        options: args,
        backends,
        aggregation,
        composites,
        trust: Default::default(),
        watched: None,
        guardrails,
    })
}

/// `sessionStore:`.
fn session_store(o: &Over<'_>, file: &ConfigFile, args: &mut GatewayArgs) {
    use crate::cli::StoreFallback;
    let Some(s) = &file.session_store else { return };
    o.set(
        "session_store",
        &mut args.session_store,
        Some(Some(s.url.clone())),
    );
    let password = s.password_file.clone().map(Some);
    o.set(
        "session_store_password_file",
        &mut args.session_store_password_file,
        password,
    );
    o.set(
        "session_store_prefix",
        &mut args.session_store_prefix,
        s.key_prefix.clone(),
    );
    let fallback = s.fallback.map(|f| match f {
        super::model::StoreFallbackKey::Refuse => StoreFallback::Refuse,
        super::model::StoreFallbackKey::Memory => StoreFallback::Memory,
    });
    o.set(
        "session_store_fallback",
        &mut args.session_store_fallback,
        fallback,
    );
    o.set(
        "replica_secret_file",
        &mut args.replica_secret_file,
        s.replica_secret_file.clone().map(Some),
    );
    o.set(
        "replica_url",
        &mut args.replica_url,
        s.replica_url.clone().map(Some),
    );
}

/// `health:`, `metrics:` and `traces:`.
fn ops(o: &Over<'_>, file: &ConfigFile, args: &mut crate::ops_args::OpsArgs) {
    use crate::ops_args::ReadyArg;
    if let Some(h) = &file.health {
        o.set(
            "probe_interval",
            &mut args.probe_interval,
            secs(h.probe_interval),
        );
        o.set(
            "probe_timeout",
            &mut args.probe_timeout,
            secs(h.probe_timeout),
        );
        let ready = h.ready_when.map(|r| match r {
            super::model::ReadyWhen::Any => ReadyArg::Any,
            super::model::ReadyWhen::All => ReadyArg::All,
        });
        o.set("ready_when", &mut args.ready_when, ready);
        o.set("status_open", &mut args.status_open, h.status_open);
        if let Some(b) = &h.breaker {
            let failures = b.consecutive_failures;
            o.set("breaker_failures", &mut args.breaker_failures, failures);
            let rate = b.failure_rate;
            o.set("breaker_failure_rate", &mut args.breaker_failure_rate, rate);
            let cool = secs(b.cool_down);
            o.set("breaker_cool_down", &mut args.breaker_cool_down, cool);
        }
    }
    if let Some(m) = &file.metrics {
        let listen = m.listen.clone().map(Some);
        o.set("metrics_listen", &mut args.metrics_listen, listen);
    }
    if let Some(t) = &file.traces {
        let endpoint = t.endpoint.clone().map(Some);
        o.set("otlp_endpoint", &mut args.otlp_endpoint, endpoint);
        let name = t.service_name.clone();
        o.set("otlp_service_name", &mut args.otlp_service_name, name);
    }
}

fn timeouts(o: &Over<'_>, file: &ConfigFile, args: &mut GatewayArgs) {
    let Some(t) = &file.timeouts else { return };
    o.set(
        "request_timeout",
        &mut args.request_timeout,
        secs(t.request),
    );
    o.set(
        "max_request_time",
        &mut args.max_request_time,
        secs(t.max_request),
    );
    o.set("session_ttl", &mut args.session_ttl, secs(t.session_ttl));
    o.set(
        "partition_idle",
        &mut args.partition_idle,
        secs(t.partition_idle),
    );
    o.set("send_timeout", &mut args.send_timeout, secs(t.send));
    o.set(
        "header_read_timeout",
        &mut args.header_read_timeout,
        secs(t.header_read),
    );
    o.set("idle_timeout", &mut args.idle_timeout, secs(t.idle));
    o.set(
        "startup_timeout",
        &mut args.startup_timeout,
        secs(t.startup),
    );
    o.set("listen_grace", &mut args.listen_grace, secs(t.listen_grace));
    o.set(
        "shutdown_grace",
        &mut args.shutdown_grace,
        secs(t.shutdown_grace),
    );
    o.set("keep_alive", &mut args.keep_alive, secs(t.keep_alive));
}

fn limits(o: &Over<'_>, file: &ConfigFile, args: &mut GatewayArgs) {
    let Some(l) = &file.limits else { return };
    o.set(
        "max_sessions",
        &mut args.max_sessions,
        l.max_sessions.map(Some),
    );
    let per_principal = l.max_sessions_per_principal.map(Some);
    o.set(
        "max_sessions_per_principal",
        &mut args.max_sessions_per_principal,
        per_principal,
    );
    o.set(
        "mrtr_per_principal",
        &mut args.mrtr_per_principal,
        l.mrtr_per_principal.map(Some),
    );
    o.set(
        "max_connections",
        &mut args.max_connections,
        l.max_connections.map(Some),
    );
    o.set("max_in_flight", &mut args.max_in_flight, l.max_in_flight);
    o.set("max_body_bytes", &mut args.max_body_bytes, l.max_body_bytes);
    o.set("max_line_bytes", &mut args.max_line_bytes, l.max_line_bytes);
    let a = &mut args.auth;
    // Checked when the file was resolved.
    let rate = l.rate_limit.as_ref().and_then(|r| r.parse().ok());
    o.set("rate_limit", &mut a.rate_limit, rate.map(Some));
    let tools: Vec<String> = l
        .tool_rate_limits
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let tools = Some(tools).filter(|t| !t.is_empty());
    o.set("tool_rate_limit", &mut a.tool_rate_limit, tools);
}

fn http(o: &Over<'_>, file: &ConfigFile, args: &mut GatewayArgs) -> Vec<ConfigError> {
    let Some(h) = &file.http else {
        return Vec::new();
    };
    o.set(
        "allowed_hosts",
        &mut args.allowed_hosts,
        h.allowed_hosts.clone(),
    );
    o.set(
        "allowed_origins",
        &mut args.allowed_origins,
        h.allowed_origins.clone(),
    );
    let trust = h.trust_forwarded_prefix;
    o.set(
        "trust_forwarded_prefix",
        &mut args.trust_forwarded_prefix,
        trust,
    );
    let Some(p) = &h.endpoint_prefix else {
        return Vec::new();
    };
    match switchboard_http::clean_prefix(p) {
        Some(clean) => {
            o.set("endpoint_prefix", &mut args.endpoint_prefix, Some(clean));
            Vec::new()
        }
        None => vec![ConfigError::new(
            "http.endpointPrefix",
            "expected an absolute path like /gateway (plain path characters)",
        )],
    }
}

fn auth(o: &Over<'_>, f: &ConfigFile, resolved: &Resolved, args: &mut GatewayArgs) {
    let a = &mut args.auth;
    a.inline_keys.clone_from(&resolved.api_keys);
    if let Some(p) = &f.policy {
        o.set("policy", &mut a.policy, Some(Some(resolved.path(&p.file))));
    }
    if let Some(audit) = &f.audit {
        let log = if audit.log == "-" {
            audit.log.clone()
        } else {
            resolved.path(audit.log.as_ref()).display().to_string()
        };
        o.set("audit_log", &mut a.audit_log, Some(Some(log)));
        o.set("audit_bodies", &mut a.audit_bodies, audit.bodies.map(Some));
    }
    let Some(file) = &f.auth else { return };
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| Some(resolved.path(p)));
    o.set("auth_config", &mut a.auth_config, path(&file.config_file));
    o.set(
        "api_keys_file",
        &mut a.api_keys_file,
        path(&file.api_keys_file),
    );
    o.set(
        "public_url",
        &mut a.public_url,
        file.public_url.clone().map(Some),
    );
    let anonymous = file.allow_anonymous_non_loopback;
    o.set(
        "allow_anonymous_non_loopback",
        &mut a.allow_anonymous_non_loopback,
        anonymous,
    );
    let Some(jwt) = &file.jwt else { return };
    o.set(
        "jwt_issuer",
        &mut a.jwt_issuer,
        Some(Some(jwt.issuer.clone())),
    );
    o.set(
        "jwks_url",
        &mut a.jwks_url,
        Some(Some(jwt.jwks_url.clone())),
    );
    let nonempty = |v: &Vec<String>| Some(v.clone()).filter(|v| !v.is_empty());
    o.set(
        "jwt_audience",
        &mut a.jwt_audience,
        nonempty(&jwt.audiences),
    );
    o.set(
        "jwt_algorithms",
        &mut a.jwt_algorithms,
        nonempty(&jwt.algorithms),
    );
    o.set("jwt_leeway", &mut a.jwt_leeway, secs(jwt.leeway).map(Some));
    let cooldown = secs(jwt.jwks_refresh_cooldown).map(Some);
    o.set(
        "jwks_refresh_cooldown",
        &mut a.jwks_refresh_cooldown,
        cooldown,
    );
}

fn isolation(k: IsolationKey) -> Isolation {
    match k {
        IsolationKey::Shared => Isolation::Shared,
        IsolationKey::PerSession => Isolation::PerSession,
    }
}
