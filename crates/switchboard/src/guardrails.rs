//! `guardrails:` from the config (or `run --guardrails FILE`) to the core's
//! `Guardrails`: the gateway's rules, each backend's over them, each tool's over its
//! backend's; webhook secrets read at startup and at every reload (a rotated `secretFile`
//! counts as a change); the webhook's HTTP client.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use futures::future::BoxFuture;
use serde::Deserialize;
use switchboard_core::audit::AuditLog;
use switchboard_core::guardrails::{GuardHook, Guardrails, MAX_REPLY_BYTES};
use switchboard_guard::{compile, layered, RuleSpec};

use crate::config::spec::BackendSpec;

/// `run --guardrails FILE`: a YAML file with the config's `guardrails:` list.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GuardFile {
    guardrails: Vec<RuleSpec>,
}

/// The rules of `run --guardrails FILE` (a webhook's `secretFile` relative to the file).
pub(crate) fn load_file(path: &Path) -> anyhow::Result<Vec<RuleSpec>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--guardrails {}: cannot read", path.display()))?;
    let file: GuardFile = serde_yaml_ng::from_str(&text)
        .map_err(|e| anyhow::anyhow!("--guardrails {}: {e}", path.display()))?;
    let mut rules = file.guardrails;
    let base = path.parent().unwrap_or(Path::new("."));
    absolutize(&mut rules, base);
    compile(&rules).map_err(|e| anyhow::anyhow!("--guardrails {}: {e}", path.display()))?;
    Ok(rules)
}

/// Webhook `secretFile`s taken from `base` when relative.
pub(crate) fn absolutize(rules: &mut [RuleSpec], base: &Path) {
    for r in rules {
        if let Some(w) = &mut r.webhook {
            if let Some(f) = &mut w.secret_file {
                *f = base.join(&*f);
            }
        }
    }
}

/// Every rule set the config declares compiles (names unique per list; layering valid):
/// each error as text naming the rule.
pub(crate) fn check(gateway: &[RuleSpec], backends: &[BackendSpec]) -> Result<(), String> {
    build_rules(gateway, backends).map(|_| ())
}

/// The core's guardrails, or `None` when no rule is declared anywhere, with the webhooks'
/// `secrets` already read ([`secrets`]: startup and a reload key the guardrails by the
/// secrets they are built with).
pub(crate) fn build(
    gateway: &[RuleSpec],
    backends: &[BackendSpec],
    audit: Option<Arc<AuditLog>>,
    secrets: HashMap<PathBuf, Vec<u8>>,
) -> anyhow::Result<Option<Arc<Guardrails>>> {
    let any = !gateway.is_empty()
        || backends.iter().any(|b| {
            !b.guardrails.is_empty() || overrides(b).any(|(_, o)| !o.guardrails.is_empty())
        });
    if !any {
        return Ok(None);
    }
    let mut guards = build_rules(gateway, backends).map_err(anyhow::Error::msg)?;
    guards = guards.with_audit(audit);
    guards = guards.with_hook(Arc::new(HttpHook::new()?), secrets);
    Ok(Some(Arc::new(guards)))
}

fn build_rules(gateway: &[RuleSpec], backends: &[BackendSpec]) -> Result<Guardrails, String> {
    let base = compile(gateway).map_err(|e| e.to_string())?;
    let mut guards = Guardrails::new(base.clone());
    for b in backends {
        let name = b.name.to_string();
        let own = layered(&base, &b.guardrails).map_err(|e| format!("backend {name}: {e}"))?;
        // A tool's and a prompt's override of one name each keep their own rules.
        for (kind, overrides) in [
            ("tool", &b.tools.overrides),
            ("prompt", &b.prompts.overrides),
        ] {
            for (item, o) in overrides.iter().filter(|(_, o)| !o.guardrails.is_empty()) {
                let rules = layered(&own, &o.guardrails)
                    .map_err(|e| format!("backend {name}, {kind} {item}: {e}"))?;
                match kind {
                    "tool" => guards.set_tool(&name, item, rules),
                    _ => guards.set_prompt(&name, item, rules),
                }
            }
        }
        if !b.guardrails.is_empty() {
            guards.set_backend(&name, own);
        }
    }
    Ok(guards)
}

/// A backend's tool and prompt overrides (a prompt's guardrails apply to its `prompts/get`).
fn overrides(b: &BackendSpec) -> impl Iterator<Item = (&String, &crate::config::model::Override)> {
    b.tools.overrides.iter().chain(b.prompts.overrides.iter())
}

/// Every webhook rule's `secretFile`, at every level, with the rule naming it.
pub(crate) fn secret_files<'a>(
    gateway: &'a [RuleSpec],
    backends: &'a [BackendSpec],
) -> impl Iterator<Item = (&'a RuleSpec, &'a PathBuf)> {
    let all = gateway.iter().chain(backends.iter().flat_map(|b| {
        b.guardrails
            .iter()
            .chain(overrides(b).flat_map(|(_, o)| o.guardrails.iter()))
    }));
    all.filter_map(|rule| Some((rule, rule.webhook.as_ref()?.secret_file.as_ref()?)))
}

/// Each webhook's secret (the first line of its `secretFile`), by path.
pub(crate) fn secrets(
    gateway: &[RuleSpec],
    backends: &[BackendSpec],
) -> anyhow::Result<HashMap<PathBuf, Vec<u8>>> {
    let mut out = HashMap::new();
    for (rule, path) in secret_files(gateway, backends) {
        if out.contains_key(path) {
            continue;
        }
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "guardrail {}: secretFile {}: cannot read",
                rule.name,
                path.display()
            )
        })?;
        let secret = text
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .as_bytes()
            .to_vec();
        anyhow::ensure!(
            !secret.is_empty(),
            "guardrail {}: secretFile {} is empty",
            rule.name,
            path.display()
        );
        out.insert(path.clone(), secret);
    }
    Ok(out)
}

/// Posts webhook bodies (plain HTTP; no redirects; the reply bounded).
#[derive(Debug)]
struct HttpHook {
    client: reqwest::Client,
}

impl HttpHook {
    fn new() -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("the guardrail webhook client")?;
        Ok(HttpHook { client })
    }
}

impl GuardHook for HttpHook {
    fn post<'a>(
        &'a self,
        url: &'a str,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    ) -> BoxFuture<'a, Result<(u16, Vec<u8>), String>> {
        Box::pin(async move {
            let mut req = self.client.post(url).body(body);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let mut resp = req.send().await.map_err(|_| "unreachable".to_owned())?;
            let status = resp.status().as_u16();
            let mut out = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|_| "reply cut".to_owned())? {
                if out.len() + chunk.len() > MAX_REPLY_BYTES {
                    return Err("reply too large".to_owned());
                }
                out.extend_from_slice(&chunk);
            }
            Ok((status, out))
        })
    }
}
