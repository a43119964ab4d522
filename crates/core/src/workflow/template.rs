//! Templates over `params` and earlier steps (`minijinja`, sandboxed).
//!
//! A string that is exactly one `{{ expression }}` evaluates to that expression's value with
//! its JSON type (an object from a step's `structuredContent` stays an object); any other
//! string containing `{{` or `{%` renders to a string; anything else is literal. Conditions and
//! `forEach` items are expressions (bare, or in `{{ }}`).
//!
//! Sandbox: the environment has no loader (so `include`/`import` find nothing, and nothing
//! reads a file), minijinja has no access to the process environment, and every evaluation
//! runs on a fuel budget with a recursion limit, so a template cannot loop for long. The
//! templates themselves are the operator's (the config file); what callers and backends
//! control is only the data they read.

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value};

/// Instructions one evaluation may execute.
const FUEL: u64 = 100_000;
/// Nesting of calls/blocks one evaluation may reach.
const RECURSION: usize = 32;

/// Why a template did not compile or evaluate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TemplateError(pub(crate) String);

fn err(e: &minijinja::Error) -> TemplateError {
    TemplateError(e.to_string())
}

/// A fresh sandboxed environment (no loader, fuel, recursion limit, undefined is an error).
pub(crate) fn environment<'s>() -> Environment<'s> {
    let mut env = Environment::new();
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env
}

/// How a template string is read.
enum Form<'a> {
    Expression(&'a str),
    Template(&'a str),
    Literal,
}

fn form(s: &str) -> Form<'_> {
    let t = s.trim();
    if let Some(inner) = t.strip_prefix("{{").and_then(|r| r.strip_suffix("}}")) {
        if !inner.contains("{{") && !inner.contains("}}") {
            return Form::Expression(inner.trim());
        }
    }
    if s.contains("{{") || s.contains("{%") {
        Form::Template(s)
    } else {
        Form::Literal
    }
}

/// An expression as written: bare, or in `{{ }}`.
fn expression_of(s: &str) -> &str {
    match form(s) {
        Form::Expression(e) => e,
        _ => s.trim(),
    }
}

/// Checks every template string in `v` compiles (at load).
pub(crate) fn check_value(env: &Environment<'_>, v: &Value) -> Result<(), TemplateError> {
    match v {
        Value::String(s) => match form(s) {
            Form::Expression(e) => env.compile_expression(e).map(drop).map_err(|e| err(&e)),
            Form::Template(t) => env.template_from_str(t).map(drop).map_err(|e| err(&e)),
            Form::Literal => Ok(()),
        },
        Value::Array(items) => items.iter().try_for_each(|i| check_value(env, i)),
        Value::Object(map) => map.values().try_for_each(|i| check_value(env, i)),
        _ => Ok(()),
    }
}

/// Checks an expression (a condition, `forEach` items) compiles.
pub(crate) fn check_expression(env: &Environment<'_>, s: &str) -> Result<(), TemplateError> {
    env.compile_expression(expression_of(s))
        .map(drop)
        .map_err(|e| err(&e))
}

/// `v` with every template string evaluated in `ctx`.
pub(crate) fn eval_value(
    env: &Environment<'_>,
    v: &Value,
    ctx: &minijinja::Value,
) -> Result<Value, TemplateError> {
    Ok(match v {
        Value::String(s) => match form(s) {
            Form::Expression(e) => to_json(&eval(env, e, ctx)?)?,
            Form::Template(t) => Value::String(env.render_str(t, ctx).map_err(|e| err(&e))?),
            Form::Literal => v.clone(),
        },
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| eval_value(env, i, ctx))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(eval_map(env, map, ctx)?),
        _ => v.clone(),
    })
}

/// [`eval_value`] of every member of `map`.
pub(crate) fn eval_map(
    env: &Environment<'_>,
    map: &Map<String, Value>,
    ctx: &minijinja::Value,
) -> Result<Map<String, Value>, TemplateError> {
    map.iter()
        .map(|(k, v)| Ok((k.clone(), eval_value(env, v, ctx)?)))
        .collect()
}

/// A condition's truth.
pub(crate) fn truthy(
    env: &Environment<'_>,
    s: &str,
    ctx: &minijinja::Value,
) -> Result<bool, TemplateError> {
    Ok(eval(env, expression_of(s), ctx)?.is_true())
}

/// An expression's value as JSON (`forEach` items).
pub(crate) fn eval_json(
    env: &Environment<'_>,
    s: &str,
    ctx: &minijinja::Value,
) -> Result<Value, TemplateError> {
    to_json(&eval(env, expression_of(s), ctx)?)
}

/// A string template rendered (an elicitation's message).
pub(crate) fn render(
    env: &Environment<'_>,
    s: &str,
    ctx: &minijinja::Value,
) -> Result<String, TemplateError> {
    env.render_str(s, ctx).map_err(|e| err(&e))
}

fn eval(
    env: &Environment<'_>,
    expr: &str,
    ctx: &minijinja::Value,
) -> Result<minijinja::Value, TemplateError> {
    let compiled = env.compile_expression(expr).map_err(|e| err(&e))?;
    compiled.eval(ctx.clone()).map_err(|e| err(&e))
}

fn to_json(v: &minijinja::Value) -> Result<Value, TemplateError> {
    serde_json::to_value(v).map_err(|e| TemplateError(format!("not representable as JSON: {e}")))
}

/// The context templates see.
pub(crate) fn context(v: &Value) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(v))
}
