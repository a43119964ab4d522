//! `switchboard validate --config F`: every error with its path (through the caller's error
//! report, exit 1), or a summary of what would be served. Shows the file as written, so a
//! `${VAR}` is shown as its reference, never its value. Then what this host lacks for it
//! (`host`): warnings, or errors with `--strict`.

use super::model::BackendEntry;
use super::spec::AggregationSpec;
use crate::cli::ValidateArgs;

pub(crate) fn validate(args: &ValidateArgs) -> anyhow::Result<()> {
    let loaded = super::load(&args.config)?;
    print!("{}", summary(&loaded));
    let found = super::host::findings(&loaded);
    if found.is_empty() {
        return Ok(());
    }
    if args.strict {
        return Err(super::ConfigErrors {
            source_name: format!("{} on this host", loaded.source_name),
            errors: found,
        }
        .into());
    }
    for f in &found {
        eprintln!("warning: {f}");
    }
    eprintln!(
        "warning: {} problem(s) on this host (the file itself is valid; --strict makes them errors, `switchboard doctor` also starts each backend)",
        found.len()
    );
    Ok(())
}

pub(crate) fn summary(loaded: &super::Loaded) -> String {
    let f = &loaded.file;
    let agg = AggregationSpec::from_file(f.aggregation.as_ref(), &loaded.resolved.backends);
    let listen = f.listen.as_ref();
    let host = listen
        .and_then(|l| l.host.as_deref())
        .unwrap_or("127.0.0.1");
    let port = listen.and_then(|l| l.port).unwrap_or(8080);
    let mut out = format!("{}: valid\n", loaded.source_name);
    out += &format!("listen: http://{host}:{port}/mcp\n");
    let priority: Vec<&str> = agg.priority.iter().map(|b| b.as_str()).collect();
    out += &format!(
        "{} backend(s); conflict resolution {}, failure mode {}, priority {}\n",
        f.backends.len(),
        agg.conflict_resolution.as_str(),
        agg.failure_mode.as_str(),
        priority.join(" > ")
    );
    out += &token_store(f);
    if agg.tool_search {
        out += "tool search on: tools/list shows find_tools and call_tool\n";
    }
    let width = f.backends.iter().map(|b| b.name.len()).max().unwrap_or(0);
    for b in &f.backends {
        out += &format!("  {:width$}  {}\n", b.name, describe(b, f.isolation));
    }
    for b in &loaded.resolved.backends {
        match &b.kind {
            super::spec::BackendKind::Stdio(s) => {
                let line = match &s.sandbox {
                    Some(sandbox) => format!("sandboxed: {}", sandbox.describe()),
                    None => "not sandboxed".to_owned(),
                };
                out += &format!("  {:width$}  {line}\n", b.name.as_str());
            }
            super::spec::BackendKind::OpenApi(o) => {
                out += &openapi_lines(b.name.as_str(), o, width)
            }
            super::spec::BackendKind::Remote(_) => {}
        }
    }
    out
}

/// An OpenAPI backend's tools (or that its spec is fetched at startup) and what was skipped.
fn openapi_lines(name: &str, o: &super::spec::OpenApiSpec, width: usize) -> String {
    let Some(loaded) = &o.loaded else {
        return format!("  {name:width$}  spec fetched at startup\n");
    };
    let tools: Vec<&str> = loaded.catalog.names().collect();
    let mut out = format!(
        "  {name:width$}  {} tool(s): {}\n",
        tools.len(),
        tools.join(", ")
    );
    for s in &loaded.skipped {
        out += &format!("  {name:width$}  warning: operation skipped: {s}\n");
    }
    out
}

/// Where callers' upstream tokens would be kept (`tokenStore`, `sessionStore`).
fn token_store(f: &super::model::ConfigFile) -> String {
    match (&f.token_store, &f.session_store) {
        (Some(t), Some(_)) => format!(
            "token store: Redis (sessionStore), sealed with the key in {}\n",
            t.encryption_key_file.display()
        ),
        (Some(t), None) => format!(
            "token store: in memory, sealed with the key in {} (lost on restart)\n",
            t.encryption_key_file.display()
        ),
        (None, _) => "token store: in memory with a random key (no tokenStore.encryptionKeyFile: lost on restart)\n".to_owned(),
    }
}

fn describe(b: &BackendEntry, default: Option<super::model::IsolationKey>) -> String {
    let mut extra = Vec::new();
    if !b.tools.is_empty() {
        extra.push("tool settings".to_owned());
    }
    if !b.prompts.is_empty() {
        extra.push("prompt settings".to_owned());
    }
    if let Some(t) = b.timeout {
        extra.push(format!("timeout {:?}", t.0));
    }
    let main = match (&b.command, &b.url) {
        (Some(command), _) => {
            // Arguments are not shown: some servers take a credential there.
            let isolation = match b.isolation.or(default) {
                Some(super::model::IsolationKey::PerSession) => "per-session",
                _ => "shared",
            };
            format!(
                "command  {command} ({} arg(s)), isolation {isolation}, {} env var(s)",
                b.args.len(),
                b.env.len()
            )
        }
        (None, Some(url)) => {
            let transport = format!("{:?}", b.transport.unwrap_or(super::model::Transport::Auto));
            let auth = match (&b.auth, b.forward_caller_token) {
                (Some(a), _) => format!(", auth {}", super::outgoing::type_name(a.kind)),
                (None, true) => ", auth passthrough".to_owned(),
                (None, false) => String::new(),
            };
            format!(
                "url      {}, transport {}, {} header(s){auth}",
                super::spec::shown(url),
                transport.to_lowercase(),
                b.headers.len()
            )
        }
        (None, None) => match &b.openapi {
            Some(o) => format!(
                "openapi  {}, base URL {}, {} header(s)",
                super::spec::shown(&o.spec),
                super::spec::shown(&o.base_url),
                b.headers.len()
            ),
            None => String::new(),
        },
    };
    if extra.is_empty() {
        main
    } else {
        format!("{main}; {}", extra.join(", "))
    }
}
