//! Composite tools (`compositeTools` in the config): tools of the virtual server that the
//! gateway runs itself, as a DAG of steps over the backends' tools, asking the client for
//! input where a step says so.
//!
//! - `model`: the config shape; `plan`: validation and compilation at load (`compile_all`);
//!   `template`: the sandboxed `minijinja` templates; `annotations`: the floor the steps give
//!   and the refusal of a safer claim (checked once the catalog is warm, `check_composites`).
//! - `engine`: one run (parallel steps, retries, timeouts, audit), every inner call on the
//!   caller's own request path.
//! - `handles`: a Modern caller's run waiting for input, parked under an owner-bound,
//!   single-use handle that goes out as the `requestState` of an `input_required` result.
//! - `ask`: how a Legacy caller is asked (`elicitation/create` on its session, through
//!   `Gateway::ask_client`).
//!
//! Only the aggregating gateway (`serve`) lists and runs composites.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;

use serde_json::{json, Map, Value};
use tracing::warn;

use switchboard_wire::classify::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use switchboard_wire::{codes, encode_result, ErrorObject, Message, RequestId};

use crate::catalog::{Entry, Kind, Merged};
use crate::client_ask::ClientAsks;
use crate::vmcp::Vmcp;
use crate::{Access, Answer, Backends, CoreError, Exchange, Principal};

pub mod annotations;
mod ask;
mod engine;
mod handles;
pub mod model;
pub mod plan;
mod template;
#[cfg(test)]
mod tests;

use engine::{Outcome, Runner, StepResult, Suspended};
pub use handles::{HandleLimits, ParkError};
pub use model::CompositeSpec;
pub use plan::{compile_all, Plan, PlanError};

/// The composite tools and the bounds of their handles (`GatewayConfig::workflows`).
#[derive(Debug, Clone, Default)]
pub struct WorkflowConfig {
    pub plans: Vec<Arc<Plan>>,
    pub handles: HandleLimits,
}

/// Most bytes of step outputs one parked run may hold: the table keeps up to 1024 runs, so a
/// run that read a 16 MiB answer must not be kept waiting for a client.
const MAX_PARKED_BYTES: usize = 1024 * 1024;

/// The composites' state, owned by the gateway.
#[derive(Debug)]
pub(crate) struct Workflows {
    plans: Vec<Arc<Plan>>,
    /// Each composite's listed annotations, derived when the catalog is warm.
    annotations: parking_lot::RwLock<HashMap<String, Map<String, Value>>>,
    parked: handles::Handles<Suspended>,
}

impl Workflows {
    pub(crate) fn new(config: &WorkflowConfig) -> Self {
        Workflows {
            plans: config.plans.clone(),
            annotations: parking_lot::RwLock::new(HashMap::new()),
            parked: handles::Handles::new(config.handles),
        }
    }

    fn get(&self, name: &str) -> Option<&Arc<Plan>> {
        self.plans.iter().find(|p| p.name == name)
    }

    /// Whether there are composites at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }
}

/// Where a composite's `tool` steps go: the whole request path, as if the caller had sent
/// them (`Gateway::handle`; implemented in `pipeline`).
pub(crate) trait Steps: Send + Sync + std::fmt::Debug {
    fn call<'a>(&'a self, ex: Exchange<'a>) -> BoxFuture<'a, Result<Answer, CoreError>>;
}

/// What a composite's run takes from the gateway: the request path its steps go through,
/// who judges and audits, the merged lists (step names, quarantine, server info), and the
/// way to ask a Legacy client.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub(crate) steps: &'a dyn Steps,
    pub(crate) access: &'a Access,
    pub(crate) vmcp: Option<&'a Vmcp>,
    pub(crate) asks: &'a ClientAsks,
    pub(crate) backends: &'a Backends,
}

/// The catalog entry a step's `tool` names: an exposed name, else `backend.tool` (the
/// backend's own name).
fn entry_for<'m>(tools: &'m Merged, tool: &str) -> Option<&'m Entry> {
    let entries = tools.entries();
    entries.iter().find(|e| &*e.exposed == tool).or_else(|| {
        let (backend, original) = tool.split_once('.')?;
        entries
            .iter()
            .find(|e| e.backend.as_str() == backend && &*e.original == original)
    })
}

/// The exposed name a step's `tool` is called by now (names can shift at run time); as
/// written when the catalog does not hold it (the call then fails as an unknown tool).
pub(crate) fn step_name(vmcp: Option<&Vmcp>, tool: &str) -> String {
    let view = vmcp.and_then(|v| v.current(Kind::Tools));
    view.and_then(|v| entry_for(&v.all, tool).map(|e| e.exposed.to_string()))
        .unwrap_or_else(|| tool.to_owned())
}

impl Workflows {
    /// Once the catalog is warm (`view`, the merged tools): each composite's annotations
    /// derived from its steps' tools, or why `serve` must not start (a claim safer than a
    /// step, a name a backend uses).
    pub(crate) fn check(&self, view: &Merged, vmcp: Option<&Vmcp>) -> Result<(), String> {
        let plans = &self.plans;
        for plan in plans {
            if view.lookup(&plan.name).is_some() {
                return Err(format!(
                    "composite tool `{}` has the name of a backend's tool",
                    plan.name
                ));
            }
            let tools = plan.tools();
            let mut steps = Vec::with_capacity(tools.len());
            for (step, tool) in tools {
                let hints = step_hints(vmcp, view, &plan.name, step, tool);
                steps.push(annotations::StepTool { step, tool, hints });
            }
            let derived = annotations::derive(&plan.name, plan.annotations.as_ref(), &steps)
                .map_err(|e| e.to_string())?;
            self.annotations.write().insert(plan.name.clone(), derived);
        }
        Ok(())
    }
}

/// The hints of a step's tool as its backend lists it; a tool missing from the catalog,
/// or quarantined (its listed definition is not the approved one: what it claims is not
/// to be believed), is assumed unsafe.
fn step_hints(
    vmcp: Option<&Vmcp>,
    tools: &Merged,
    composite: &str,
    step: &str,
    tool: &str,
) -> annotations::Hints {
    let entry = entry_for(tools, tool);
    let held = entry.is_some_and(|e| {
        vmcp.is_some_and(|v| v.refuse_quarantined(&e.backend, &e.original).is_err())
    });
    let listed = entry.filter(|_| !held).and_then(|e| {
        let item: Value = serde_json::from_str(e.item.get()).ok()?;
        Some(item.get("annotations").and_then(Value::as_object).cloned())
    });
    if held {
        warn!(
            composite,
            step, tool, "step tool quarantined; assumed unsafe"
        );
    } else if listed.is_none() {
        warn!(
            composite,
            step, tool, "step tool not in the catalog; assumed unsafe"
        );
    }
    annotations::Hints::of(listed.flatten().as_ref())
}

impl Workflows {
    /// `items` (a merged tools page, a JSON array) with the composite tools after them.
    pub(crate) fn with_composites(&self, items: &str) -> String {
        let plans = &self.plans;
        if plans.is_empty() {
            return items.to_owned();
        }
        let annotations = self.annotations.read();
        let listed: Vec<String> = plans
            .iter()
            .map(|p| {
                let own = p.annotations.clone().unwrap_or_default();
                p.listed(annotations.get(&p.name).unwrap_or(&own))
                    .to_string()
            })
            .collect();
        let inner = items
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim();
        let sep = if inner.is_empty() { "" } else { "," };
        format!("[{inner}{sep}{}]", listed.join(","))
    }

    /// Each composite's name and tool definition as `tools/list` shows it (for the tool-search
    /// index: composites are found like the catalog's tools).
    pub(crate) fn composite_tools(&self) -> Vec<(Arc<str>, Value)> {
        let annotations = self.annotations.read();
        self.plans
            .iter()
            .map(|p| {
                let own = p.annotations.clone().unwrap_or_default();
                let listed = p.listed(annotations.get(&p.name).unwrap_or(&own));
                (Arc::from(p.name.as_str()), listed)
            })
            .collect()
    }

    /// A Legacy `tools/call` of a composite, run here (`None`: not a composite).
    ///
    /// Boxed (here and for Modern): a run's steps re-enter the request path that runs it, so
    /// its future would otherwise contain itself.
    pub(crate) fn legacy<'f>(
        &'f self,
        cx: Context<'f>,
        call: &'f Exchange<'_>,
        id: &'f RequestId,
    ) -> Option<BoxFuture<'f, Result<Vec<u8>, CoreError>>> {
        let plan = self.composite_of(call.msg)?.clone();
        if plan.asks() {
            if let Err(e) = ask::can_ask(cx.asks, call.session()) {
                return Some(Box::pin(std::future::ready(Err(e))));
            }
        }
        Some(Box::pin(Self::run_legacy(cx, call, id, plan)))
    }

    async fn run_legacy(
        cx: Context<'_>,
        call: &Exchange<'_>,
        id: &RequestId,
        plan: Arc<Plan>,
    ) -> Result<Vec<u8>, CoreError> {
        let runner = Runner {
            cx,
            principal: call.caller,
            session: call.session(),
            stream: call.stream.as_ref(),
            modern: None,
        };
        let params = arguments_of(call.msg);
        let outcome = start(&runner, &plan, params).await;
        Ok(encode_result(
            id,
            &result_of(&runner, &plan, outcome).to_string(),
        ))
    }

    /// A Modern `tools/call` of a composite: a new run, or the resume of a parked one
    /// (`requestState` + `inputResponses`). `None`: not a composite.
    pub(crate) fn modern<'f>(
        &'f self,
        cx: Context<'f>,
        caller: &'f Principal,
        msg: &'f Message<'_>,
        id: &'f RequestId,
    ) -> Option<BoxFuture<'f, Answer>> {
        let plan = self.composite_of(msg)?.clone();
        Some(Box::pin(self.run_modern(cx, caller, msg, id, plan)))
    }

    async fn run_modern(
        &self,
        cx: Context<'_>,
        caller: &Principal,
        msg: &Message<'_>,
        id: &RequestId,
        plan: Arc<Plan>,
    ) -> Answer {
        let version = msg
            .meta(META_PROTOCOL_VERSION)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .unwrap_or_default();
        let runner = Runner {
            cx,
            principal: caller,
            session: None,
            stream: None,
            modern: Some(engine::Modern { version: &version }),
        };
        let params: Value = msg
            .params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_else(|| json!({}));
        let outcome = match params.get("requestState") {
            None | Some(Value::Null) => {
                let asks = plan
                    .steps
                    .iter()
                    .any(|s| matches!(s.body, plan::Body::Elicitation { .. }));
                if asks && !declares(&params, "elicitation") {
                    return crate::mrtr::missing_capability(id, "elicitation");
                }
                start(&runner, &plan, arguments_of(msg)).await
            }
            Some(state) => {
                // A handle resumed through another composite's name is refused and kept.
                let fits = |s: &Suspended| Arc::ptr_eq(&s.plan, &plan);
                let parked = state
                    .as_str()
                    .and_then(|h| self.parked.take(caller, h, fits));
                let Some(suspended) = parked else {
                    return unknown_handle(id);
                };
                resume(&runner, suspended, params.get("inputResponses")).await
            }
        };
        self.modern_answer(&runner, &plan, id, outcome)
    }

    /// Whether `msg` calls a composite tool that asks its client for input.
    /// Whether `msg` calls a composite tool that asks its client for input and that
    /// `caller` may call (a composite is judged without a backend, as its call is).
    pub(crate) fn asks(&self, caller: &Principal, msg: &Message<'_>, access: &Access) -> bool {
        self.composite_of(msg).is_some_and(|plan| {
            let target = crate::access::Target::Tool(plan.name.clone());
            plan.asks() && access.allows(caller, "call_tool", &target, None)
        })
    }

    fn composite_of(&self, msg: &Message<'_>) -> Option<&Arc<Plan>> {
        if msg.method != Some("tools/call") || self.plans.is_empty() {
            return None;
        }
        let name: String = serde_json::from_str(msg.param("name")?.get()).ok()?;
        self.get(&name)
    }

    /// A Modern run's answer: its result, or `input_required` under a fresh handle.
    fn modern_answer(
        &self,
        runner: &Runner<'_>,
        plan: &Arc<Plan>,
        id: &RequestId,
        outcome: Outcome,
    ) -> Answer {
        let presented = (runner.cx.backends).presented(runner.cx.vmcp.map(Vmcp::presented));
        let info = json!({ switchboard_wire::classify::META_SERVER_INFO: presented.server_info });
        let mut result = match outcome {
            Outcome::NeedsInput(suspended, requests) => {
                let weight = suspended.weight();
                let parked = if weight > MAX_PARKED_BYTES {
                    Err(format!("its finished steps' outputs exceed {MAX_PARKED_BYTES} bytes, too much to keep while it waits for input"))
                } else {
                    let (who, ttl) = (runner.principal, plan.input_timeout);
                    let parked = self.parked.park(who, ttl, suspended, weight);
                    parked.map_err(|e| e.to_string())
                };
                match parked {
                    Ok(handle) => json!({
                        "resultType": "input_required",
                        "inputRequests": requests,
                        "requestState": handle,
                    }),
                    Err(why) => result_of(runner, plan, Outcome::Failed(why)),
                }
            }
            done => result_of(runner, plan, done),
        };
        if result.get("resultType").is_none() {
            result["resultType"] = json!("complete");
        }
        result["_meta"] = info;
        Answer::ok(encode_result(id, &result.to_string()))
    }
}

/// A new run: audited from its start, bounded by the composite's deadline.
async fn start(runner: &Runner<'_>, plan: &Arc<Plan>, params: Value) -> Outcome {
    runner.audit(plan, "workflow_started", "started", &[]);
    if let Some(validator) = &plan.input_validator {
        if let Err(e) = validator.validate(&params) {
            return Outcome::Failed(format!("invalid arguments: {e}"));
        }
    }
    let results = vec![None; plan.steps.len()];
    within_deadline(runner, plan, params, results).await
}

/// A parked run given its answers, then run on.
async fn resume(runner: &Runner<'_>, s: Suspended, responses: Option<&Value>) -> Outcome {
    let Suspended {
        plan,
        params,
        mut results,
        waiting,
    } = s;
    for i in waiting {
        let step = &plan.steps[i];
        let result = match responses.and_then(|r| r.get(&step.id)) {
            Some(answer) => engine::elicitation_result(answer),
            None => StepResult::failed("no answer in inputResponses"),
        };
        runner.record_elicitation(&plan, step, &result);
        let continues = step.on_error.action == model::ErrorAction::Continue;
        if result.status == engine::Status::Failed && !continues {
            let why = result.error.unwrap_or_default();
            return Outcome::Failed(format!("step `{}` failed: {why}", step.id));
        }
        results[i] = Some(result);
    }
    within_deadline(runner, &plan, params, results).await
}

/// One segment of a run (to its end or its next input), within the whole-run deadline
/// (the time a parked run waits for its client does not count).
async fn within_deadline(
    runner: &Runner<'_>,
    plan: &Arc<Plan>,
    params: Value,
    results: Vec<Option<StepResult>>,
) -> Outcome {
    match tokio::time::timeout(plan.timeout, runner.run(plan, params, results)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed(format!("not finished within {:?}", plan.timeout)),
    }
}

/// The `tools/call` result of a finished run (audited as `workflow_finished`).
fn result_of(runner: &Runner<'_>, plan: &Plan, outcome: Outcome) -> Value {
    match outcome {
        Outcome::Done(output) => {
            runner.audit(plan, "workflow_finished", "completed", &[]);
            let mut result = json!({
                "content": [{ "type": "text", "text": output.to_string() }],
                "isError": false,
            });
            if output.is_object() {
                result["structuredContent"] = output;
            }
            result
        }
        Outcome::Failed(why) => {
            runner.audit(
                plan,
                "workflow_finished",
                "failed",
                &[("reason", json!(why))],
            );
            json!({
                "content": [{ "type": "text", "text": format!("workflow `{}` failed: {why}", plan.name) }],
                "isError": true,
            })
        }
        Outcome::NeedsInput(..) => {
            runner.audit(plan, "workflow_finished", "failed", &[]);
            json!({
                "content": [{ "type": "text", "text": "this workflow needs input the client cannot give" }],
                "isError": true,
            })
        }
    }
}

/// The composite's arguments (an object; `{}` when absent).
fn arguments_of(msg: &Message<'_>) -> Value {
    msg.param("arguments")
        .and_then(|a| serde_json::from_str::<Value>(a.get()).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

fn declares(params: &Value, capability: &str) -> bool {
    params["_meta"][META_CLIENT_CAPABILITIES]
        .get(capability)
        .is_some_and(|v| !v.is_null())
}

/// The one answer for a handle that is unknown, expired, used, or another principal's.
fn unknown_handle(id: &RequestId) -> Answer {
    let err = ErrorObject::new(codes::INVALID_PARAMS, "Invalid or expired requestState")
        .with_data(json!({ "reason": "unknown" }));
    Answer::error(id, &err)
}
