//! The `guardrails:` config as written (serde; the shipped JSON Schema describes the same
//! shape), and its compiled form, [`Rule`].

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::scan::{Kind, Kinds};
use crate::GuardError;

/// One guardrail as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleSpec {
    /// Named in audit lines, metrics and refusals; a backend's or tool's rule of the same
    /// name replaces the gateway's.
    pub name: String,
    /// Where it runs (default: request and response).
    #[serde(default)]
    pub on: Vec<Direction>,
    pub check: Option<CheckSpec>,
    pub webhook: Option<WebhookSpec>,
    /// Tool-name globs (`*` any run of characters) matched against the name the client
    /// sees and against `backend/tool`; empty: every tool. Results of `resources/read` and
    /// `prompts/get` match `*` only when this is empty.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Turns an inherited rule of this name off (on a backend or a tool).
    #[serde(default)]
    pub off: bool,
}

/// Where a guardrail runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// A `tools/call`'s arguments.
    Request,
    /// A `tools/call` result, `resources/read` and `prompts/get` results, and the progress
    /// messages sent while a call runs.
    Response,
    /// Tool definitions as lists are merged.
    ToolDefinitions,
    PromptDefinitions,
    ResourceDefinitions,
}

/// The built-in checks of one guardrail.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckSpec {
    /// A payload larger than this (bytes, or `256KiB`, `1MiB`).
    #[serde(default, deserialize_with = "size")]
    pub max_bytes: Option<usize>,
    pub secrets: Option<Builtin>,
    #[serde(default)]
    pub patterns: Vec<Pattern>,
    pub injection: Option<Builtin>,
    pub action: Action,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Builtin {
    Builtin,
}

/// A personal-data pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    Email,
    Phone,
    Iban,
    CreditCard,
}

/// What a guardrail does with a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A JSON-RPC error (-32602) for a request; an `isError` result for a response.
    Reject,
    /// Each match replaced by `[REDACTED:kind]`.
    Redact,
    /// Cut to `maxBytes` (UTF-8 safe) with a note saying how much was cut.
    Truncate,
    /// Audit only.
    Warn,
    /// Definitions: held through tool trust's quarantine (hidden where trust is off).
    Quarantine,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Reject => "reject",
            Action::Redact => "redact",
            Action::Truncate => "truncate",
            Action::Warn => "warn",
            Action::Quarantine => "quarantine",
        }
    }
}

/// The external hook of one guardrail.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookSpec {
    /// `http://` only from the gateway's client (loopback or a private network sidecar).
    pub url: String,
    /// A file whose first line is the HMAC-SHA256 key (relative to the config's directory).
    pub secret_file: Option<std::path::PathBuf>,
    /// Default 1s.
    #[serde(default, deserialize_with = "duration")]
    pub timeout: Option<Duration>,
    /// Most hook calls in flight (default 32); more wait for a slot within the timeout.
    pub max_concurrent: Option<usize>,
    /// What a failed, slow or unreachable hook means (default `closed`: reject).
    #[serde(default)]
    pub failure: Failure,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    #[default]
    Closed,
    Open,
}

/// A compiled guardrail.
#[derive(Debug)]
pub struct Rule {
    pub name: Arc<str>,
    pub request: bool,
    pub response: bool,
    pub tool_definitions: bool,
    pub prompt_definitions: bool,
    pub resource_definitions: bool,
    pub max_bytes: Option<usize>,
    pub kinds: Kinds,
    pub action: Action,
    pub webhook: Option<WebhookSpec>,
    tools: Vec<Glob>,
}

impl Rule {
    /// Compiles one spec; its errors name the rule, never a value that could be a secret.
    pub fn compile(spec: &RuleSpec) -> Result<Rule, GuardError> {
        let bad = |what: &str| GuardError::Invalid(spec.name.clone(), what.to_owned());
        if spec.check.is_some() == spec.webhook.is_some() {
            return Err(bad("needs exactly one of `check` and `webhook`"));
        }
        let on: &[Direction] = if spec.on.is_empty() {
            &[Direction::Request, Direction::Response]
        } else {
            &spec.on
        };
        let mut kinds = Kinds::NONE;
        let (mut max_bytes, mut action) = (None, Action::Warn);
        if let Some(check) = &spec.check {
            if check.secrets.is_some() {
                kinds = kinds.union(Kinds::secrets());
            }
            if check.injection.is_some() {
                kinds = kinds.with(Kind::Injection);
            }
            for p in &check.patterns {
                kinds = kinds.with(match p {
                    Pattern::Email => Kind::Email,
                    Pattern::Phone => Kind::Phone,
                    Pattern::Iban => Kind::Iban,
                    Pattern::CreditCard => Kind::CreditCard,
                });
            }
            max_bytes = check.max_bytes;
            action = check.action;
            if max_bytes.is_some() != kinds.is_empty() {
                return Err(bad("`check` needs either `maxBytes` or patterns, not both"));
            }
            if action == Action::Truncate && max_bytes.is_none() {
                return Err(bad("`truncate` needs `maxBytes`"));
            }
            if action == Action::Redact && max_bytes.is_some() {
                return Err(bad("`redact` needs patterns, not `maxBytes`"));
            }
        }
        let is_def = |d: &Direction| {
            matches!(
                d,
                Direction::ToolDefinitions
                    | Direction::PromptDefinitions
                    | Direction::ResourceDefinitions
            )
        };
        let defs = on.iter().any(is_def);
        if action == Action::Quarantine && !on.iter().all(is_def) {
            return Err(bad("`quarantine` applies to definitions only"));
        }
        if spec.webhook.is_some() && defs {
            return Err(bad("a webhook runs on requests and responses only"));
        }
        Ok(Rule {
            name: Arc::from(spec.name.as_str()),
            request: on.contains(&Direction::Request),
            response: on.contains(&Direction::Response),
            tool_definitions: on.contains(&Direction::ToolDefinitions),
            prompt_definitions: on.contains(&Direction::PromptDefinitions),
            resource_definitions: on.contains(&Direction::ResourceDefinitions),
            max_bytes,
            kinds,
            action,
            webhook: spec.webhook.clone(),
            tools: spec.tools.iter().map(|t| Glob(t.clone())).collect(),
        })
    }

    /// Whether this rule covers `tool` (the name the client sees) of `backend`.
    pub fn covers(&self, backend: &str, tool: Option<&str>) -> bool {
        if self.tools.is_empty() {
            return true;
        }
        let Some(tool) = tool else {
            return false;
        };
        self.tools
            .iter()
            .any(|g| g.matches(tool) || g.matches_joined(backend, tool))
    }
}

/// A `*` glob.
#[derive(Debug, Clone)]
struct Glob(String);

impl Glob {
    fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes())
    }

    fn matches_joined(&self, backend: &str, tool: &str) -> bool {
        self.0.contains('/') && self.matches(&format!("{backend}/{tool}"))
    }
}

/// `*` matches any run of bytes; everything else itself. Iterative, linear in practice.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                back = Some((p, n));
                p += 1;
            }
            Some(c) if *c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match back {
                Some((bp, bn)) => {
                    p = bp + 1;
                    n = bn + 1;
                    back = Some((bp, bn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|c| *c == b'*')
}

/// `256KiB`, `1MiB`, `4096`, `64KB`.
fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(usize),
        S(String),
    }
    let raw = Option::<Raw>::deserialize(d)?;
    match raw {
        None => Ok(None),
        Some(Raw::N(n)) => Ok(Some(n)),
        Some(Raw::S(s)) => parse_size(&s)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("expected a size like 256KiB")),
    }
}

/// A size with an optional unit (`B`, `KB`/`KiB`, `MB`/`MiB`, `GB`/`GiB`).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: usize = digits.parse().ok()?;
    let mult: usize = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1000,
        "KiB" => 1 << 10,
        "MB" => 1_000_000,
        "MiB" => 1 << 20,
        "GB" => 1_000_000_000,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// `500ms`, `2s`, or seconds as a number.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(f64),
        S(String),
    }
    let raw = Option::<Raw>::deserialize(d)?;
    let parsed = match raw {
        None => return Ok(None),
        Some(Raw::N(n)) => Duration::try_from_secs_f64(n).ok(),
        Some(Raw::S(s)) => parse_duration(&s),
    };
    parsed
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom("expected a duration like 500ms or 2s"))
}

/// `500ms`, `2s`, `1m`, `1h`, `5` (seconds).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (n, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = n.trim().parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}
