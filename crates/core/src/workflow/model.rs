//! Composite tools as the config file writes them (`compositeTools`): camelCase keys,
//! unknown keys refused. Nothing here is checked beyond its shape; `plan` validates and
//! compiles it.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// One composite tool.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompositeSpec {
    /// The exposed tool name.
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// The tool's `inputSchema` (an object schema; `{"type":"object"}` when absent).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// When present the final output must validate against it.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// What the composite claims; checked against the floor its steps give.
    #[serde(default)]
    pub annotations: Option<Map<String, Value>>,
    /// Whole-run deadline.
    #[serde(default, deserialize_with = "duration")]
    pub timeout: Option<Duration>,
    /// How long a run waits for a Modern client's input (its handle's lifetime).
    #[serde(default, deserialize_with = "duration")]
    pub input_timeout: Option<Duration>,
    /// Steps running at once (at most [`super::plan::MAX_PARALLEL`]).
    #[serde(default)]
    pub max_parallel: Option<usize>,
    pub steps: Vec<StepSpec>,
    /// The result: a JSON value whose strings are templates. Absent: every step's output,
    /// by step id.
    #[serde(default)]
    pub output: Option<Value>,
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StepKind {
    Tool,
    Elicitation,
    ForEach,
}

/// One step of a composite.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepSpec {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: StepKind,
    /// `tool`: an exposed tool name, or `backend.tool` (the backend's own name).
    #[serde(default)]
    pub tool: Option<String>,
    /// `tool`: the arguments, a JSON object whose strings are templates.
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
    /// Runs only when this template is truthy; otherwise the step is `skipped`.
    #[serde(default)]
    pub condition: Option<String>,
    #[serde(default)]
    pub depends_on: Vec<String>,
    #[serde(default)]
    pub on_error: Option<OnErrorSpec>,
    /// Per attempt.
    #[serde(default, deserialize_with = "duration")]
    pub timeout: Option<Duration>,
    /// `elicitation`: the message (a template) and the schema of the answer.
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub requested_schema: Option<Value>,
    /// `forEach`: a template that yields an array.
    #[serde(default)]
    pub items: Option<String>,
    /// `forEach`: the step run per item (`tool` only), with `item` and `index` in scope.
    #[serde(default)]
    pub step: Option<Box<StepSpec>>,
    #[serde(default)]
    pub max_iterations: Option<usize>,
    #[serde(default)]
    pub max_parallel: Option<usize>,
}

/// What a failed step does to the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorAction {
    /// The run fails (the default).
    #[default]
    Abort,
    /// The step is `failed`; the run goes on.
    Continue,
    /// Tried again (`maxRetries`, waiting `backoff`, doubled each time); then abort.
    Retry,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OnErrorSpec {
    #[serde(default)]
    pub action: ErrorAction,
    #[serde(default)]
    pub max_retries: Option<u32>,
    #[serde(default, deserialize_with = "duration")]
    pub backoff: Option<Duration>,
}

/// `"250ms"`, `"5s"`, `"2m"`, or a number of seconds (as elsewhere in the config).
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Secs(f64),
        Text(String),
    }
    let secs = match Raw::deserialize(d)? {
        Raw::Secs(v) => Some(v),
        Raw::Text(t) => parse_text(&t),
    };
    secs.and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom("expected a duration like 250ms, 5s, 2m or 1h"))
}

fn parse_text(t: &str) -> Option<f64> {
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "ms" => 0.001,
        "s" | "" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    number.parse::<f64>().ok().map(|n| n * scale)
}
