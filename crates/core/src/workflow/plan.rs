//! A composite tool checked and compiled at load: unique step ids, `dependsOn` naming steps
//! that exist, no cycle, bounded sizes, every template compiling, schemas that compile. Each
//! error names where it is (`compositeTools[0].steps[2].dependsOn[0]: …`).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::model::{CompositeSpec, ErrorAction, StepKind, StepSpec};
use super::template::{self, check_expression, check_value};

/// Composite tools one config may declare.
pub const MAX_COMPOSITES: usize = 256;
/// Steps one composite may have.
pub const MAX_STEPS: usize = 64;
/// Steps (or `forEach` items) running at once, at most.
pub const MAX_PARALLEL: usize = 16;
/// Items one `forEach` may iterate, at most (its default is 100).
pub const MAX_ITERATIONS: usize = 1000;
/// Retries of one step, at most.
pub const MAX_RETRIES: u32 = 10;
/// Longest whole-run deadline (the default is 5 minutes).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Longest template or schema text, in bytes (serialized).
const MAX_TEXT: usize = 64 * 1024;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
const DEFAULT_PARALLEL: usize = 4;
const DEFAULT_ITERATIONS: usize = 100;
const DEFAULT_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between two retries.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Why a composite was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {why}")]
pub struct PlanError {
    /// The config path (`compositeTools[0].steps[1].dependsOn[0]`).
    pub at: String,
    pub why: String,
}

fn fail(at: impl Into<String>, why: impl Into<String>) -> PlanError {
    PlanError {
        at: at.into(),
        why: why.into(),
    }
}

/// A validated composite tool.
#[derive(Debug)]
pub struct Plan {
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub(crate) output_validator: Option<jsonschema::Validator>,
    pub(crate) input_validator: Option<jsonschema::Validator>,
    pub annotations: Option<Map<String, Value>>,
    pub timeout: Duration,
    /// How long a parked run waits for its resume.
    pub input_timeout: Duration,
    pub max_parallel: usize,
    /// In config order; `deps` are indices into this.
    pub steps: Vec<Step>,
    pub output: Option<Value>,
}

/// A validated step.
#[derive(Debug, Clone)]
pub struct Step {
    pub id: String,
    pub deps: Vec<usize>,
    pub condition: Option<String>,
    pub on_error: OnError,
    pub timeout: Option<Duration>,
    pub body: Body,
}

#[derive(Debug, Clone, Copy)]
pub struct OnError {
    pub action: ErrorAction,
    /// Retries after the first attempt (0 unless `retry`).
    pub retries: u32,
    pub backoff: Duration,
}

#[derive(Debug, Clone)]
pub enum Body {
    Tool {
        /// As written: an exposed name or `backend.tool`.
        tool: String,
        arguments: Map<String, Value>,
    },
    Elicitation {
        message: String,
        requested_schema: Value,
    },
    ForEach {
        items: String,
        /// A `tool` step (its id, condition and dependencies are not used).
        inner: Box<Step>,
        max_parallel: usize,
        max_iterations: usize,
    },
}

impl Plan {
    /// The tool as `tools/list` shows it, with the annotations it will be listed with.
    pub(crate) fn listed(&self, annotations: &Map<String, Value>) -> Value {
        let mut tool = json!({ "name": self.name, "inputSchema": self.input_schema });
        if let Some(d) = &self.description {
            tool["description"] = json!(d);
        }
        if let Some(o) = &self.output_schema {
            tool["outputSchema"] = o.clone();
        }
        if !annotations.is_empty() {
            tool["annotations"] = Value::Object(annotations.clone());
        }
        tool
    }

    /// Whether a step asks the client for input.
    pub(crate) fn asks(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s.body, Body::Elicitation { .. }))
    }

    /// Every `tool` a step (or `forEach` body) calls, with the step's config path.
    pub(crate) fn tools(&self) -> Vec<(&str, &str)> {
        let mut out = Vec::new();
        for step in &self.steps {
            match &step.body {
                Body::Tool { tool, .. } => out.push((step.id.as_str(), tool.as_str())),
                Body::ForEach { inner, .. } => {
                    if let Body::Tool { tool, .. } = &inner.body {
                        out.push((step.id.as_str(), tool.as_str()));
                    }
                }
                Body::Elicitation { .. } => {}
            }
        }
        out
    }
}

/// Validates every composite (names unique among them).
pub fn compile_all(specs: &[CompositeSpec]) -> Result<Vec<Plan>, PlanError> {
    if specs.len() > MAX_COMPOSITES {
        return Err(fail(
            "compositeTools",
            format!("at most {MAX_COMPOSITES} composite tools"),
        ));
    }
    let mut names = HashMap::new();
    let mut plans = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let at = format!("compositeTools[{i}]");
        if let Some(first) = names.insert(spec.name.as_str(), i) {
            return Err(fail(
                format!("{at}.name"),
                format!("`{}` is also compositeTools[{first}]'s name", spec.name),
            ));
        }
        plans.push(compile(&at, spec)?);
    }
    for (i, spec) in specs.iter().enumerate() {
        no_recursion(&format!("compositeTools[{i}]"), spec, &names)?;
    }
    Ok(plans)
}

/// Refuses a step whose tool is a composite (itself included) or one of the gateway's own
/// tools: its run would start another run, unbounded (a forEach multiplies it each level).
fn no_recursion(
    at: &str,
    spec: &CompositeSpec,
    composites: &HashMap<&str, usize>,
) -> Result<(), PlanError> {
    for (i, step) in spec.steps.iter().enumerate() {
        let inner = step
            .step
            .as_deref()
            .map(|s| (format!("{at}.steps[{i}].step.tool"), s));
        let own = Some((format!("{at}.steps[{i}].tool"), step));
        for (here, s) in own.into_iter().chain(inner) {
            let Some(tool) = s.tool.as_deref() else {
                continue;
            };
            if composites.contains_key(tool) {
                return Err(fail(
                    here,
                    format!("`{tool}` is a composite tool; a composite cannot call one"),
                ));
            }
            if crate::tool_search::is_own_tool(tool) {
                return Err(fail(
                    here,
                    format!("`{tool}` is the gateway's own tool; a composite cannot call it"),
                ));
            }
        }
    }
    Ok(())
}

/// Validates one composite at config path `at`.
pub fn compile(at: &str, spec: &CompositeSpec) -> Result<Plan, PlanError> {
    if !crate::catalog::valid_tool_name(&spec.name) {
        return Err(fail(
            format!("{at}.name"),
            "must match ^[a-zA-Z0-9_-]{1,64}$",
        ));
    }
    let env = template::environment();
    let input_schema = spec
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object"}));
    if input_schema.get("type") != Some(&json!("object")) {
        return Err(fail(
            format!("{at}.inputSchema"),
            "must have \"type\": \"object\"",
        ));
    }
    let input_validator = Some(
        jsonschema::validator_for(&input_schema)
            .map_err(|e| fail(format!("{at}.inputSchema"), e.to_string()))?,
    );
    let output_validator = match &spec.output_schema {
        None => None,
        Some(s) => Some(
            jsonschema::validator_for(s)
                .map_err(|e| fail(format!("{at}.outputSchema"), e.to_string()))?,
        ),
    };
    let timeout =
        bounded_timeout(&format!("{at}.timeout"), spec.timeout)?.unwrap_or(DEFAULT_TIMEOUT);
    let input_timeout = bounded_timeout(&format!("{at}.inputTimeout"), spec.input_timeout)?
        .unwrap_or(DEFAULT_TIMEOUT);
    let max_parallel = parallel(&format!("{at}.maxParallel"), spec.max_parallel)?;
    let steps = compile_steps(at, &spec.steps, &env)?;
    if let Some(output) = &spec.output {
        bounded(&format!("{at}.output"), output)?;
        check_value(&env, output).map_err(|e| fail(format!("{at}.output"), e.0))?;
    }
    Ok(Plan {
        name: spec.name.clone(),
        description: spec.description.clone(),
        input_schema,
        output_schema: spec.output_schema.clone(),
        output_validator,
        input_validator,
        annotations: spec.annotations.clone(),
        timeout,
        input_timeout,
        max_parallel,
        steps,
        output: spec.output.clone(),
    })
}

fn compile_steps(
    at: &str,
    specs: &[StepSpec],
    env: &minijinja::Environment<'_>,
) -> Result<Vec<Step>, PlanError> {
    if specs.is_empty() || specs.len() > MAX_STEPS {
        return Err(fail(
            format!("{at}.steps"),
            format!("1 to {MAX_STEPS} steps"),
        ));
    }
    let mut index = HashMap::new();
    for (i, s) in specs.iter().enumerate() {
        let here = format!("{at}.steps[{i}].id");
        if s.id.is_empty()
            || s.id.len() > 64
            || !s.id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(fail(
                here,
                "must match ^[a-zA-Z0-9_]{1,64}$ (templates name it)",
            ));
        }
        if let Some(first) = index.insert(s.id.as_str(), i) {
            return Err(fail(
                here,
                format!("`{}` is also steps[{first}]'s id", s.id),
            ));
        }
    }
    let mut steps = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        let here = format!("{at}.steps[{i}]");
        let mut deps = Vec::new();
        for (j, d) in s.depends_on.iter().enumerate() {
            let Some(&k) = index.get(d.as_str()) else {
                return Err(fail(
                    format!("{here}.dependsOn[{j}]"),
                    format!("no step is named `{d}`"),
                ));
            };
            if k == i {
                return Err(fail(
                    format!("{here}.dependsOn[{j}]"),
                    "a step cannot depend on itself",
                ));
            }
            if !deps.contains(&k) {
                deps.push(k);
            }
        }
        steps.push(compile_step(&here, s, deps, env, false)?);
    }
    if let Some(i) = cycle(&steps) {
        return Err(fail(
            format!("{at}.steps[{i}].dependsOn"),
            format!("step `{}` is on a dependency cycle", steps[i].id),
        ));
    }
    Ok(steps)
}

fn compile_step(
    here: &str,
    s: &StepSpec,
    deps: Vec<usize>,
    env: &minijinja::Environment<'_>,
    inner: bool,
) -> Result<Step, PlanError> {
    if let Some(c) = &s.condition {
        check_expression(env, c).map_err(|e| fail(format!("{here}.condition"), e.0))?;
    }
    let body = match s.kind {
        StepKind::Tool => tool_body(here, s, env)?,
        StepKind::Elicitation if !inner => elicitation_body(here, s, env)?,
        StepKind::ForEach if !inner => for_each_body(here, s, env)?,
        _ => {
            return Err(fail(
                format!("{here}.type"),
                "a forEach step runs a tool step",
            ))
        }
    };
    let spec = s.on_error.clone().unwrap_or_default();
    let retries = match spec.action {
        ErrorAction::Retry => spec.max_retries.unwrap_or(3),
        _ => 0,
    };
    if retries > MAX_RETRIES {
        return Err(fail(
            format!("{here}.onError.maxRetries"),
            format!("at most {MAX_RETRIES}"),
        ));
    }
    let backoff = spec.backoff.unwrap_or(DEFAULT_BACKOFF);
    if backoff > MAX_BACKOFF {
        return Err(fail(
            format!("{here}.onError.backoff"),
            format!("at most {MAX_BACKOFF:?}"),
        ));
    }
    Ok(Step {
        id: s.id.clone(),
        deps,
        condition: s.condition.clone(),
        on_error: super::plan::OnError {
            action: spec.action,
            retries,
            backoff,
        },
        timeout: bounded_timeout(&format!("{here}.timeout"), s.timeout)?,
        body,
    })
}

fn tool_body(
    here: &str,
    s: &StepSpec,
    env: &minijinja::Environment<'_>,
) -> Result<Body, PlanError> {
    let Some(tool) = s.tool.clone().filter(|t| !t.is_empty() && t.len() <= 256) else {
        return Err(fail(format!("{here}.tool"), "a tool step names its tool"));
    };
    let arguments = s.arguments.clone().unwrap_or_default();
    let value = Value::Object(arguments.clone());
    bounded(&format!("{here}.arguments"), &value)?;
    check_value(env, &value).map_err(|e| fail(format!("{here}.arguments"), e.0))?;
    Ok(Body::Tool { tool, arguments })
}

fn elicitation_body(
    here: &str,
    s: &StepSpec,
    env: &minijinja::Environment<'_>,
) -> Result<Body, PlanError> {
    let Some(message) = s.message.clone() else {
        return Err(fail(
            format!("{here}.message"),
            "an elicitation step has a message",
        ));
    };
    check_value(env, &Value::String(message.clone()))
        .map_err(|e| fail(format!("{here}.message"), e.0))?;
    let requested_schema = s
        .requested_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    bounded(&format!("{here}.requestedSchema"), &requested_schema)?;
    if requested_schema.get("type") != Some(&json!("object")) {
        return Err(fail(
            format!("{here}.requestedSchema"),
            "must have \"type\": \"object\"",
        ));
    }
    Ok(Body::Elicitation {
        message,
        requested_schema,
    })
}

fn for_each_body(
    here: &str,
    s: &StepSpec,
    env: &minijinja::Environment<'_>,
) -> Result<Body, PlanError> {
    let Some(items) = s.items.clone() else {
        return Err(fail(format!("{here}.items"), "a forEach step has items"));
    };
    check_expression(env, &items).map_err(|e| fail(format!("{here}.items"), e.0))?;
    let Some(inner) = &s.step else {
        return Err(fail(
            format!("{here}.step"),
            "a forEach step has a step to run",
        ));
    };
    let inner = compile_step(&format!("{here}.step"), inner, Vec::new(), env, true)?;
    let max_iterations = s.max_iterations.unwrap_or(DEFAULT_ITERATIONS);
    if max_iterations == 0 || max_iterations > MAX_ITERATIONS {
        return Err(fail(
            format!("{here}.maxIterations"),
            format!("1 to {MAX_ITERATIONS}"),
        ));
    }
    Ok(Body::ForEach {
        items,
        inner: Box::new(inner),
        max_parallel: parallel(&format!("{here}.maxParallel"), s.max_parallel)?,
        max_iterations,
    })
}

fn parallel(at: &str, n: Option<usize>) -> Result<usize, PlanError> {
    match n.unwrap_or(DEFAULT_PARALLEL) {
        n @ 1..=MAX_PARALLEL => Ok(n),
        _ => Err(fail(at, format!("1 to {MAX_PARALLEL}"))),
    }
}

fn bounded_timeout(at: &str, t: Option<Duration>) -> Result<Option<Duration>, PlanError> {
    match t {
        Some(t) if t.is_zero() || t > MAX_TIMEOUT => {
            Err(fail(at, format!("more than 0 and at most {MAX_TIMEOUT:?}")))
        }
        t => Ok(t),
    }
}

fn bounded(at: &str, v: &Value) -> Result<(), PlanError> {
    if v.to_string().len() > MAX_TEXT {
        return Err(fail(at, format!("longer than {MAX_TEXT} bytes")));
    }
    Ok(())
}

/// A step on a dependency cycle, if there is one (Kahn's algorithm: what never becomes ready
/// is on, or behind, a cycle; the first such step that is itself on one is reported).
fn cycle(steps: &[Step]) -> Option<usize> {
    let mut waiting: Vec<usize> = steps.iter().map(|s| s.deps.len()).collect();
    let mut ready: Vec<usize> = (0..steps.len()).filter(|i| waiting[*i] == 0).collect();
    let mut done = vec![false; steps.len()];
    while let Some(i) = ready.pop() {
        done[i] = true;
        for (j, s) in steps.iter().enumerate() {
            if s.deps.contains(&i) {
                waiting[j] -= 1;
                if waiting[j] == 0 {
                    ready.push(j);
                }
            }
        }
    }
    (0..steps.len()).find(|&i| !done[i] && reaches(steps, i, i))
}

/// Whether following dependencies from `from` arrives at `to`.
fn reaches(steps: &[Step], from: usize, to: usize) -> bool {
    let mut seen = vec![false; steps.len()];
    let mut stack = steps[from].deps.clone();
    while let Some(i) = stack.pop() {
        if i == to {
            return true;
        }
        if !std::mem::replace(&mut seen[i], true) {
            stack.extend(&steps[i].deps);
        }
    }
    false
}
