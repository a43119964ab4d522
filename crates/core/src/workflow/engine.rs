//! One run of a composite: its steps as a DAG, independent ones at once (at most
//! `maxParallel`), each inner call on the caller's own request path.
//!
//! The steps in flight are futures in a `FuturesUnordered` owned by the run's future, not
//! spawned tasks: they borrow the gateway and the caller, and dropping the run (the client
//! went away, the whole-run deadline passed, a step aborted it) drops every step in flight,
//! which withdraws its backend call and cancels it upstream like any dropped request. Nothing
//! outlives the run but what the handle table keeps for a parked one.
//!
//! Each `tool` step is an ordinary `tools/call` through `Gateway::handle` (a Legacy caller in
//! its session, or a Modern caller): admission (policy, rate limits) is
//! the caller's, routing is by exposed name, and the call has its own audit line.

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{json, Map, Value};

use switchboard_wire::classify::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use switchboard_wire::Message;

use super::plan::{Body, Plan, Step, MAX_BACKOFF};
use super::template;
use crate::access::RunScope;
use crate::session::SessionId;
use crate::{Exchange, Principal};

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Completed,
    Failed,
    Skipped,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// A finished step, as templates see it (`steps.<id>.output`, `.status`, `.error`).
#[derive(Debug, Clone)]
pub(crate) struct StepResult {
    pub(crate) status: Status,
    pub(crate) output: Value,
    pub(crate) error: Option<String>,
}

impl StepResult {
    fn done(output: Value) -> Self {
        StepResult {
            status: Status::Completed,
            output,
            error: None,
        }
    }

    pub(crate) fn failed(why: impl Into<String>) -> Self {
        StepResult {
            status: Status::Failed,
            output: Value::Null,
            error: Some(why.into()),
        }
    }

    fn skipped() -> Self {
        StepResult {
            status: Status::Skipped,
            output: Value::Null,
            error: None,
        }
    }
}

/// A run waiting for a Modern client's answers (kept in the handle table).
#[derive(Debug)]
pub(crate) struct Suspended {
    pub(crate) plan: Arc<Plan>,
    pub(crate) params: Value,
    pub(crate) results: Vec<Option<StepResult>>,
    /// The elicitation steps whose answers the resume carries.
    pub(crate) waiting: Vec<usize>,
}

impl Suspended {
    /// The serialized size of what it keeps (its steps' outputs and its arguments).
    pub(crate) fn weight(&self) -> usize {
        let outputs: usize = self
            .results
            .iter()
            .flatten()
            .map(|r| r.output.to_string().len())
            .sum();
        outputs + self.params.to_string().len()
    }
}

/// How a run (or one segment of it, up to the next input) ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The output (checked against the output schema).
    Done(Value),
    Failed(String),
    /// Modern caller: the run waits for these `inputRequests`.
    NeedsInput(Suspended, Map<String, Value>),
}

/// A Modern caller's inner calls go through `Gateway::handle` as Modern ones, under its
/// protocol version.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Modern<'a> {
    pub(crate) version: &'a str,
}

/// Who runs a composite.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Runner<'a> {
    /// What the run takes from the gateway (its steps' request path, access, lists).
    pub(crate) cx: super::Context<'a>,
    pub(crate) principal: &'a Principal,
    pub(crate) session: Option<&'a SessionId>,
    /// The calling request's own stream (Legacy), which carries a request for input first.
    pub(crate) stream: Option<&'a tokio::sync::mpsc::Sender<bytes::Bytes>>,
    pub(crate) modern: Option<Modern<'a>>,
}

impl Runner<'_> {
    pub(crate) fn scope(&self) -> RunScope<'_> {
        RunScope {
            principal: self.principal,
            session: self.session,
            modern: self.modern.is_some(),
        }
    }

    pub(crate) fn audit(&self, plan: &Plan, event: &str, outcome: &str, fields: &[(&str, Value)]) {
        self.cx
            .access
            .record_workflow(self.scope(), event, outcome, &plan.name, fields);
    }

    /// Runs `plan` from `results` (all `None` for a new run) until it finishes or (Modern)
    /// needs input.
    pub(crate) async fn run(
        &self,
        plan: &Arc<Plan>,
        params: Value,
        mut results: Vec<Option<StepResult>>,
    ) -> Outcome {
        let mut started: Vec<bool> = results.iter().map(Option::is_some).collect();
        let mut running = FuturesUnordered::new();
        // Modern elicitation steps that are ready, with their `inputRequests` entries.
        let mut waiting: Vec<(usize, Value)> = Vec::new();
        loop {
            let mut again = true;
            while again {
                again = false;
                for (i, step) in plan.steps.iter().enumerate() {
                    let ready = !started[i] && step.deps.iter().all(|d| results[*d].is_some());
                    if !ready || running.len() >= plan.max_parallel {
                        continue;
                    }
                    started[i] = true;
                    let ctx = context(plan, &params, &results);
                    let parks =
                        matches!(step.body, Body::Elicitation { .. }) && self.modern.is_some();
                    if !parks {
                        running.push(async move { (i, self.step(plan, step, ctx).await) });
                        continue;
                    }
                    match self.input_request(plan, step, &ctx) {
                        Ok(Some(request)) => waiting.push((i, request)),
                        Ok(None) => {
                            results[i] = Some(StepResult::skipped());
                            again = true;
                        }
                        Err(why) => return Outcome::Failed(format!("step `{}`: {why}", step.id)),
                    }
                }
            }
            let Some((i, result)) = running.next().await else {
                break;
            };
            let step = &plan.steps[i];
            let aborts = result.status == Status::Failed
                && step.on_error.action != super::model::ErrorAction::Continue;
            if aborts {
                let why = result.error.unwrap_or_default();
                return Outcome::Failed(format!("step `{}` failed: {why}", step.id));
            }
            results[i] = Some(result);
        }
        if waiting.is_empty() {
            return finish(plan, &params, &results);
        }
        suspend(plan, params, results, waiting)
    }

    /// One step, whatever its kind (a Modern caller's elicitation never comes here).
    async fn step(&self, plan: &Plan, step: &Step, ctx: Value) -> StepResult {
        let env = template::environment();
        let mctx = template::context(&ctx);
        if let Some(condition) = &step.condition {
            match template::truthy(&env, condition, &mctx) {
                Ok(true) => {}
                Ok(false) => {
                    self.audit(
                        plan,
                        "workflow_step_finished",
                        "skipped",
                        &step_fields(&step.id, 0, None),
                    );
                    return StepResult::skipped();
                }
                Err(e) => return StepResult::failed(format!("condition: {e}")),
            }
        }
        match &step.body {
            Body::Tool { tool, arguments } => {
                self.attempts(plan, step, &step.id, (tool, arguments), &mctx)
                    .await
            }
            Body::ForEach {
                items,
                inner,
                max_parallel,
                max_iterations,
            } => {
                let items = match template::eval_json(&env, items, &mctx) {
                    Ok(Value::Array(items)) => items,
                    Ok(_) => return StepResult::failed("items is not an array"),
                    Err(e) => return StepResult::failed(format!("items: {e}")),
                };
                if items.len() > *max_iterations {
                    return StepResult::failed(format!("more than {max_iterations} items"));
                }
                self.for_each(plan, step, inner, items, (ctx, *max_parallel))
                    .await
            }
            Body::Elicitation {
                message,
                requested_schema,
            } => {
                self.elicit_legacy(plan, step, (message, requested_schema), &mctx)
                    .await
            }
        }
    }

    /// A tool step's attempts: the first, then its retries with doubling backoff.
    async fn attempts(
        &self,
        plan: &Plan,
        step: &Step,
        label: &str,
        (tool, arguments): (&str, &Map<String, Value>),
        mctx: &minijinja::Value,
    ) -> StepResult {
        let env = template::environment();
        let args = match template::eval_map(&env, arguments, mctx) {
            Ok(args) => args,
            Err(e) => return StepResult::failed(format!("arguments: {e}")),
        };
        let tries = 1 + step.on_error.retries;
        let mut backoff = step.on_error.backoff;
        let mut last = String::new();
        for attempt in 1..=tries {
            self.audit(
                plan,
                "workflow_step_started",
                "started",
                &step_fields(label, attempt, None),
            );
            let call = self.call_tool(tool, &args);
            let answer = match step.timeout {
                Some(t) => tokio::time::timeout(t, call)
                    .await
                    .unwrap_or_else(|_| Err(format!("no answer within {t:?}"))),
                None => call.await,
            };
            match answer {
                Ok(output) => {
                    let fields = step_fields(label, attempt, None);
                    self.audit(plan, "workflow_step_finished", "completed", &fields);
                    return StepResult::done(output);
                }
                Err(why) => {
                    let fields = step_fields(label, attempt, Some(&why));
                    self.audit(plan, "workflow_step_finished", "failed", &fields);
                    last = why;
                }
            }
            if attempt < tries {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        StepResult::failed(last)
    }

    /// A `forEach`: its step once per item (`item`, `index` in scope), at most `parallel` at
    /// once; the output is the items' outputs in order, and any item failing fails the step.
    async fn for_each(
        &self,
        plan: &Plan,
        step: &Step,
        inner: &Step,
        items: Vec<Value>,
        (ctx, parallel): (Value, usize),
    ) -> StepResult {
        let Body::Tool { tool, arguments } = &inner.body else {
            return StepResult::failed("a forEach runs a tool step");
        };
        let mut outputs = vec![Value::Null; items.len()];
        let mut pending = items.into_iter().enumerate();
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < parallel {
                let Some((index, item)) = pending.next() else {
                    break;
                };
                let mut ctx = ctx.clone();
                ctx["item"] = item;
                ctx["index"] = json!(index);
                let label = format!("{}[{index}]", step.id);
                running.push(async move {
                    let mctx = template::context(&ctx);
                    let r = self
                        .attempts(plan, inner, &label, (tool, arguments), &mctx)
                        .await;
                    (index, r)
                });
            }
            let Some((index, result)) = running.next().await else {
                break;
            };
            if result.status == Status::Failed {
                let why = result.error.unwrap_or_default();
                return StepResult::failed(format!("item {index}: {why}"));
            }
            outputs[index] = result.output;
        }
        StepResult::done(Value::Array(outputs))
    }

    /// One `tools/call` as the caller, on the caller's own path.
    async fn call_tool(&self, tool: &str, args: &Map<String, Value>) -> Result<Value, String> {
        let exposed = super::step_name(self.cx.vmcp, tool);
        let mut params = json!({ "name": exposed, "arguments": args });
        if let Some(m) = &self.modern {
            // No input capability: the composite's own elicitation steps ask the client; an
            // inner tool that asks is answered as the spec answers an undeclared capability.
            params["_meta"] =
                json!({ META_PROTOCOL_VERSION: m.version, META_CLIENT_CAPABILITIES: {} });
        }
        let id = format!("sbw-{}", crate::route::random_hex());
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
        let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let msg = Message::parse_client(&body).map_err(|e| format!("{e:?}"))?;
        let exchange = match self.modern {
            Some(_) => Exchange::modern(self.principal, &msg, None),
            None => Exchange::legacy(self.principal, self.session, &msg, None),
        };
        let answer = self.cx.steps.call(exchange).await.map(|a| a.body);
        match answer {
            Ok(bytes) => tool_outcome(&bytes),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A Modern caller's elicitation step as an `inputRequests` entry (`None`: skipped).
    fn input_request(
        &self,
        plan: &Plan,
        step: &Step,
        ctx: &Value,
    ) -> Result<Option<Value>, String> {
        let Body::Elicitation {
            message,
            requested_schema,
        } = &step.body
        else {
            return Err("not an elicitation".into());
        };
        let env = template::environment();
        let mctx = template::context(ctx);
        if let Some(c) = &step.condition {
            if !template::truthy(&env, c, &mctx).map_err(|e| e.to_string())? {
                self.audit(
                    plan,
                    "workflow_step_finished",
                    "skipped",
                    &step_fields(&step.id, 0, None),
                );
                return Ok(None);
            }
        }
        let message = template::render(&env, message, &mctx).map_err(|e| e.to_string())?;
        self.audit(
            plan,
            "workflow_step_started",
            "input_required",
            &step_fields(&step.id, 1, None),
        );
        Ok(Some(json!({
            "method": "elicitation/create",
            "params": { "message": message, "requestedSchema": requested_schema },
        })))
    }

    /// A Legacy caller's elicitation step: the gateway asks the client on its session.
    async fn elicit_legacy(
        &self,
        plan: &Plan,
        step: &Step,
        (message, schema): (&str, &Value),
        mctx: &minijinja::Value,
    ) -> StepResult {
        let env = template::environment();
        let message = match template::render(&env, message, mctx) {
            Ok(m) => m,
            Err(e) => return StepResult::failed(format!("message: {e}")),
        };
        self.audit(
            plan,
            "workflow_step_started",
            "started",
            &step_fields(&step.id, 1, None),
        );
        let params = json!({ "mode": "form", "message": message, "requestedSchema": schema });
        let (session, stream) = (self.session, self.stream);
        let method = "elicitation/create";
        let answer =
            super::ask::ask_legacy_client(self.cx.asks, session, stream, method, params).await;
        let result = match answer {
            Ok(answer) => elicitation_result(&answer),
            Err(why) => StepResult::failed(why),
        };
        self.record_elicitation(plan, step, &result);
        result
    }

    /// The audit line of an answered elicitation step.
    pub(crate) fn record_elicitation(&self, plan: &Plan, step: &Step, result: &StepResult) {
        let fields = step_fields(&step.id, 1, result.error.as_deref());
        self.audit(
            plan,
            "workflow_step_finished",
            result.status.as_str(),
            &fields,
        );
    }
}

/// An elicitation answer as a step result: `accept` completes with its `content`; a
/// `decline` or `cancel` (or anything else) fails the step.
pub(crate) fn elicitation_result(answer: &Value) -> StepResult {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => StepResult::done(answer.get("content").cloned().unwrap_or(json!({}))),
        Some(other) => StepResult::failed(format!("the user chose `{other}`")),
        None => StepResult::failed("the answer has no action"),
    }
}

fn step_fields(step: &str, attempt: u32, error: Option<&str>) -> Vec<(&'static str, Value)> {
    let mut fields = vec![("step", json!(step))];
    if attempt > 0 {
        fields.push(("attempt", json!(attempt)));
    }
    if let Some(e) = error {
        fields.push(("reason", json!(e)));
    }
    fields
}

/// A run parked until its client answers the `waiting` elicitation steps.
fn suspend(
    plan: &Arc<Plan>,
    params: Value,
    results: Vec<Option<StepResult>>,
    waiting: Vec<(usize, Value)>,
) -> Outcome {
    let mut requests = Map::new();
    let mut steps = Vec::with_capacity(waiting.len());
    for (i, request) in waiting {
        requests.insert(plan.steps[i].id.clone(), request);
        steps.push(i);
    }
    let suspended = Suspended {
        plan: plan.clone(),
        params,
        results,
        waiting: steps,
    };
    Outcome::NeedsInput(suspended, requests)
}

/// What templates see: `params` and every finished step.
fn context(plan: &Plan, params: &Value, results: &[Option<StepResult>]) -> Value {
    let mut steps = Map::new();
    for (step, result) in plan.steps.iter().zip(results) {
        if let Some(r) = result {
            steps.insert(
                step.id.clone(),
                json!({ "output": r.output, "status": r.status.as_str(), "error": r.error }),
            );
        }
    }
    json!({ "params": params, "steps": steps })
}

/// The run's output: the `output` template, or every step's output by id; checked against
/// the output schema.
fn finish(plan: &Plan, params: &Value, results: &[Option<StepResult>]) -> Outcome {
    let ctx = context(plan, params, results);
    let output = match &plan.output {
        Some(t) => {
            let env = template::environment();
            match template::eval_value(&env, t, &template::context(&ctx)) {
                Ok(v) => v,
                Err(e) => return Outcome::Failed(format!("output: {e}")),
            }
        }
        None => {
            let mut out = Map::new();
            for (step, result) in plan.steps.iter().zip(results) {
                let output = result.as_ref().map_or(Value::Null, |r| r.output.clone());
                out.insert(step.id.clone(), output);
            }
            Value::Object(out)
        }
    };
    if let Some(validator) = &plan.output_validator {
        if let Err(e) = validator.validate(&output) {
            return Outcome::Failed(format!("the output does not match outputSchema: {e}"));
        }
    }
    Outcome::Done(output)
}

/// A `tools/call` answer as a step's output (`structuredContent`, else the text content
/// parsed as JSON, else the text), or why it failed.
pub(super) fn tool_outcome(bytes: &[u8]) -> Result<Value, String> {
    // As written (`plain`): serde_json's own `Value` parses a string again behind its RawValue
    // key, with a fresh nesting limit each time (a tool's text, which anyone may have written,
    // could nest until the stack overflows), and a step would see what no client sees.
    let v = switchboard_wire::plain::parse(bytes).map_err(|e| format!("unreadable answer: {e}"))?;
    if let Some(err) = v.get("error") {
        let message = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("error");
        return Err(format!(
            "{message} ({})",
            err.get("code").unwrap_or(&Value::Null)
        ));
    }
    let result = v.get("result").cloned().unwrap_or(Value::Null);
    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        return Err("the tool asked for input, which a composite step does not relay".into());
    }
    let text = result["content"]
        .as_array()
        .and_then(|c| c.iter().find(|i| i["type"] == "text"))
        .and_then(|i| i["text"].as_str())
        .map(str::to_owned);
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(text.unwrap_or_else(|| "the tool reported an error".into()));
    }
    if let Some(s) = result.get("structuredContent").filter(|s| !s.is_null()) {
        return Ok(s.clone());
    }
    Ok(match text {
        // A text holding the key serde_json's `Value` would expand stays a text: the step's
        // output goes on in answers the gateway reads again.
        Some(t) => match switchboard_wire::plain::parse(t.as_bytes()) {
            Ok(v) if !switchboard_wire::holds_reserved_key(&t) => v,
            _ => Value::String(t),
        },
        None => Value::Null,
    })
}
