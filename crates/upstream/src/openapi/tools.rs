//! One MCP tool per operation: its name, schemas and annotations, and what a call needs to
//! build the HTTP request. An operation that cannot be converted is skipped, with the reason
//! and where it is; the spec as a whole fails only when it cannot be read as OpenAPI 3 or
//! leaves no tool at all.

use std::collections::{HashMap, HashSet};

use hyper::Method;
use serde_json::{json, Map, Value};

use super::error::SpecError;
use super::schema::{inline, is_object, spent, Budget};
use super::spec::{deref, escape, version, Version};

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];
/// The tool-name rule (`^[a-zA-Z0-9_-]{1,64}$`), as the catalog applies it.
const MAX_NAME: usize = 64;
/// How much of a spec one catalog takes: every bound is an error at `#/paths` naming it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Schema nodes of all tools together, once their `$ref`s are inlined.
    pub(crate) nodes: usize,
    /// Tools.
    pub(crate) tools: usize,
    /// Operations looked at (tools and skipped ones).
    pub(crate) operations: usize,
}

impl Limits {
    pub(crate) const DEFAULT: Limits = Limits {
        nodes: 2_000_000,
        tools: 2_000,
        operations: 10_000,
    };
}

/// Header parameters left out: those OpenAPI says to ignore (`Accept`, `Content-Type`,
/// `Authorization`), `Cookie` (cookie parameters make it), and every header the gateway
/// reserves for itself ([`crate::remote::RESERVED_HEADERS`], shared with remote backends).
fn ignored_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    matches!(name.as_str(), "authorization" | "cookie")
        || crate::remote::RESERVED_HEADERS.contains(&name.as_str())
}

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum In {
    Path,
    Query,
    Header,
    Cookie,
}

/// How a parameter's array or object value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    Simple,
    Form,
    SpaceDelimited,
    PipeDelimited,
    DeepObject,
}

#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) at: In,
    pub(crate) style: Style,
    pub(crate) explode: bool,
}

/// How the request body is encoded (it is the `body` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    Json,
    Form,
}

/// What a call needs to build its request.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    pub(crate) method: Method,
    /// The path template as the spec writes it (`/pets/{id}`).
    pub(crate) path: String,
    pub(crate) params: Vec<Param>,
    pub(crate) body: Option<BodyKind>,
}

/// One generated tool.
#[derive(Debug)]
pub struct Tool {
    pub(crate) name: String,
    /// The MCP `Tool` object `tools/list` shows.
    pub(crate) definition: Value,
    pub(crate) op: Operation,
    pub(crate) input: jsonschema::Validator,
    /// The response schema (after wrapping a non-object in `{result: …}`).
    pub(crate) output: Option<jsonschema::Validator>,
    /// Whether the 2xx JSON is wrapped as `{"result": …}` (its schema is not an object's).
    pub(crate) wrapped: bool,
}

/// An operation left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `GET /pets/{id}` (and its `operationId`, if it has one).
    pub operation: String,
    /// Where it is in the spec.
    pub pointer: String,
    /// Why it cannot be a tool.
    pub why: String,
}

impl Skipped {
    /// Each part made [`printable`](super::error::printable): they quote the spec.
    fn new(operation: String, pointer: String, why: String) -> Skipped {
        use super::error::printable;
        Skipped {
            operation: printable(operation),
            pointer: printable(pointer),
            why: printable(why),
        }
    }
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.operation, self.pointer, self.why)
    }
}

/// Every tool of one spec, and what the backend says about itself.
#[derive(Debug)]
pub struct Catalog {
    pub(crate) tools: Vec<Tool>,
    pub(crate) title: String,
    pub(crate) version: String,
    pub(crate) description: Option<String>,
}

impl Catalog {
    /// The tools of `doc`, and the operations that were skipped.
    pub fn from_document(doc: &Value) -> Result<(Catalog, Vec<Skipped>), SpecError> {
        Self::within(doc, Limits::DEFAULT)
    }

    pub(crate) fn within(
        doc: &Value,
        limits: Limits,
    ) -> Result<(Catalog, Vec<Skipped>), SpecError> {
        let version = version(doc)?;
        let paths = match doc.get("paths") {
            Some(Value::Object(p)) => p,
            Some(_) => return Err(SpecError::new("#/paths", "not an object")),
            None => return Err(SpecError::new("#/paths", "missing: the spec has no paths")),
        };
        let mut tools = Vec::new();
        let mut skipped = Vec::new();
        let mut names = Names::default();
        let budget = Budget::new(limits.nodes);
        for (path, item) in paths {
            let at = format!("#/paths/{}", escape(path));
            let item = deref(doc, item).map_err(|e| SpecError::new(&at, e))?;
            for method in METHODS {
                let Some(op) = item.get(method) else { continue };
                if tools.len() + skipped.len() >= limits.operations {
                    return Err(SpecError::new(
                        "#/paths",
                        format!("more than {} operations", limits.operations),
                    ));
                }
                let at = format!("{at}/{method}");
                let ctx = Ctx {
                    doc,
                    version,
                    path,
                    method,
                    item,
                    op,
                    budget: &budget,
                };
                if method == "trace" {
                    skipped.push(Skipped::new(
                        ctx.label(),
                        at,
                        "TRACE echoes the request, configured credentials included".into(),
                    ));
                    continue;
                }
                let made = ctx.tool(&mut names);
                if spent(&budget) {
                    return Err(SpecError::new(
                        "#/paths",
                        format!(
                            "the operations' schemas add up to more than {} nodes once their $refs are resolved (at {at})",
                            limits.nodes
                        ),
                    ));
                }
                match made {
                    Ok(_) if tools.len() >= limits.tools => {
                        return Err(SpecError::new(
                            "#/paths",
                            format!("more than {} operations can be tools", limits.tools),
                        ))
                    }
                    Ok(tool) => tools.push(tool),
                    Err(why) => skipped.push(Skipped::new(ctx.label(), at, why)),
                }
            }
        }
        if tools.is_empty() {
            return Err(SpecError::new(
                "#/paths",
                match skipped.first() {
                    Some(s) => format!("no operation could be made a tool (first: {s})"),
                    None => "the spec has no operations".to_owned(),
                },
            ));
        }
        let info = doc.get("info");
        let text = |k: &str| info.and_then(|i| i.get(k)).and_then(Value::as_str);
        let catalog = Catalog {
            tools,
            title: text("title").unwrap_or("openapi").to_owned(),
            version: text("version").unwrap_or("0").to_owned(),
            description: text("description").map(str::to_owned),
        };
        Ok((catalog, skipped))
    }

    /// The tools' names, in the spec's order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name.as_str())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }
}

struct Ctx<'a> {
    doc: &'a Value,
    version: Version,
    path: &'a str,
    method: &'a str,
    item: &'a Value,
    op: &'a Value,
    budget: &'a Budget,
}

/// The names given so far, and the next suffix to try for each (so `n` operations named
/// alike cost `n` lookups, not `n²`).
#[derive(Default)]
struct Names {
    taken: HashSet<String>,
    next: HashMap<String, usize>,
}

impl Ctx<'_> {
    fn label(&self) -> String {
        let m = self.method.to_ascii_uppercase();
        match self.op.get("operationId").and_then(Value::as_str) {
            Some(id) => format!("{m} {} (operationId {id})", self.path),
            None => format!("{m} {}", self.path),
        }
    }

    fn tool(&self, names: &mut Names) -> Result<Tool, String> {
        super::request::check_template(self.path)?;
        let mut properties = Map::new();
        let mut required = Vec::new();
        let params = self.params(&mut properties, &mut required)?;
        let body = self.body(&mut properties, &mut required)?;
        let input = json!({"type": "object", "properties": properties,
            "required": required, "additionalProperties": false});
        let input_check = jsonschema::validator_for(&input)
            .map_err(|e| format!("its input schema is not valid JSON Schema: {e}"))?;
        let (output, wrapped) = self.output()?;
        let output_check = match &output {
            Some(s) => Some(
                jsonschema::validator_for(s)
                    .map_err(|e| format!("its response schema is not valid JSON Schema: {e}"))?,
            ),
            None => None,
        };
        let name = self.name(names);
        let text = |k: &str| self.op.get(k).and_then(Value::as_str);
        let mut definition = json!({
            "name": name,
            "description": text("description").or(text("summary"))
                .map_or_else(|| self.label(), str::to_owned),
            "inputSchema": input,
            "annotations": annotations(self.method),
        });
        if let Some(title) = text("summary") {
            definition["title"] = json!(title);
        }
        if let Some(o) = output {
            definition["outputSchema"] = o;
        }
        Ok(Tool {
            name,
            definition,
            op: Operation {
                method: Method::from_bytes(self.method.to_ascii_uppercase().as_bytes())
                    .map_err(|_| "unknown method".to_owned())?,
                path: self.path.to_owned(),
                params,
                body,
            },
            input: input_check,
            output: output_check,
            wrapped,
        })
    }

    /// `operationId` (else method + path) made to fit the rule, unique in this spec (taken).
    fn name(&self, names: &mut Names) -> String {
        let raw = match self.op.get("operationId").and_then(Value::as_str) {
            Some(id) => id.to_owned(),
            None => format!("{}_{}", self.method, self.path.replace(['{', '}'], "")),
        };
        let base = normalise(&raw);
        let mut name = base.clone();
        if names.taken.contains(&name) {
            let n = names.next.entry(base.clone()).or_insert(2);
            loop {
                let suffix = format!("_{n}");
                let mut head = base.clone();
                head.truncate(MAX_NAME - suffix.len());
                name = format!("{head}{suffix}");
                *n += 1;
                if !names.taken.contains(&name) {
                    break;
                }
            }
        }
        names.taken.insert(name.clone());
        name
    }

    fn params(
        &self,
        properties: &mut Map<String, Value>,
        required: &mut Vec<Value>,
    ) -> Result<Vec<Param>, String> {
        let mut merged: Vec<&Value> = Vec::new();
        for list in [self.item.get("parameters"), self.op.get("parameters")] {
            for p in list.and_then(Value::as_array).into_iter().flatten() {
                let p = deref(self.doc, p)?;
                let key = |q: &Value| (q.get("name").cloned(), q.get("in").cloned());
                // The operation's own definition replaces the path item's (same name and in).
                merged.retain(|q| key(q) != key(p));
                merged.push(p);
            }
        }
        let mut out = Vec::new();
        for p in merged {
            let Some(param) = self.param(p, properties, required)? else {
                continue;
            };
            out.push(param);
        }
        for var in template_vars(self.path) {
            if !out.iter().any(|p| p.at == In::Path && p.name == var) {
                return Err(format!("path template variable {{{var}}} has no parameter"));
            }
        }
        Ok(out)
    }

    fn param(
        &self,
        p: &Value,
        properties: &mut Map<String, Value>,
        required: &mut Vec<Value>,
    ) -> Result<Option<Param>, String> {
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a parameter has no name")?;
        let at = match p.get("in").and_then(Value::as_str) {
            Some("path") => In::Path,
            Some("query") => In::Query,
            Some("header") => In::Header,
            Some("cookie") => In::Cookie,
            other => return Err(format!("parameter {name}: unknown location {other:?}")),
        };
        if at == In::Header && ignored_header(name) {
            return Ok(None);
        }
        if at == In::Path && !template_vars(self.path).any(|v| v == name) {
            return Err(format!("path parameter {name} is not in the path template"));
        }
        let schema = match (p.get("schema"), p.get("content")) {
            (Some(s), _) => inline(self.doc, self.version, s, self.budget)
                .map_err(|e| format!("parameter {name}: {e}"))?,
            (None, _) => {
                return Err(format!(
                    "parameter {name}: only `schema` parameters are supported, not `content`"
                ))
            }
        };
        let style = self.style(p, at, name)?;
        if properties.contains_key(name) {
            return Err(format!("two parameters are named {name}"));
        }
        let mut schema = schema;
        if let (Some(d), Some(obj)) = (p.get("description"), schema.as_object_mut()) {
            obj.entry("description").or_insert(d.clone());
        }
        properties.insert(name.to_owned(), schema);
        if at == In::Path || p.get("required") == Some(&Value::Bool(true)) {
            required.push(json!(name));
        }
        let explode = p
            .get("explode")
            .and_then(Value::as_bool)
            .unwrap_or(style == Style::Form);
        Ok(Some(Param {
            name: name.to_owned(),
            at,
            style,
            explode,
        }))
    }

    fn style(&self, p: &Value, at: In, name: &str) -> Result<Style, String> {
        let default = match at {
            In::Path | In::Header => Style::Simple,
            In::Query | In::Cookie => Style::Form,
        };
        let style = match p.get("style").and_then(Value::as_str) {
            None => default,
            Some("simple") if matches!(at, In::Path | In::Header) => Style::Simple,
            Some("form") if matches!(at, In::Query | In::Cookie) => Style::Form,
            Some("spaceDelimited") if at == In::Query => Style::SpaceDelimited,
            Some("pipeDelimited") if at == In::Query => Style::PipeDelimited,
            Some("deepObject") if at == In::Query => Style::DeepObject,
            Some(s) => {
                return Err(format!(
                    "parameter {name}: style {s} is not supported there"
                ))
            }
        };
        Ok(style)
    }

    fn body(
        &self,
        properties: &mut Map<String, Value>,
        required: &mut Vec<Value>,
    ) -> Result<Option<BodyKind>, String> {
        let Some(body) = self.op.get("requestBody") else {
            return Ok(None);
        };
        let body = deref(self.doc, body)?;
        let is_required = body.get("required") == Some(&Value::Bool(true));
        let content = body.get("content").and_then(Value::as_object);
        let pick = content.and_then(|c| {
            let json = c.iter().find(|(t, _)| is_json(t));
            let form = c.get("application/x-www-form-urlencoded");
            json.map(|(_, m)| (BodyKind::Json, m))
                .or(form.map(|m| (BodyKind::Form, m)))
        });
        let Some((kind, media)) = pick else {
            let types: Vec<&str> = content
                .into_iter()
                .flatten()
                .map(|(t, _)| t.as_str())
                .collect();
            if is_required {
                return Err(format!(
                    "request body type {} is not supported (JSON and form bodies are)",
                    types.join(", ")
                ));
            }
            return Ok(None);
        };
        if properties.contains_key("body") {
            return Err("a parameter is named body, which is the request body's argument".into());
        }
        let schema = match media.get("schema") {
            Some(s) => inline(self.doc, self.version, s, self.budget)
                .map_err(|e| format!("request body: {e}"))?,
            None => json!({}),
        };
        if kind == BodyKind::Form && !is_object(&schema) && schema != json!({}) {
            return Err("a form body's schema must describe an object".into());
        }
        properties.insert("body".into(), schema);
        if is_required {
            required.push(json!("body"));
        }
        Ok(Some(kind))
    }

    /// The first 2xx response's JSON schema (wrapped as `{result: …}` unless an object's).
    fn output(&self) -> Result<(Option<Value>, bool), String> {
        let Some(responses) = self.op.get("responses").and_then(Value::as_object) else {
            return Ok((None, false));
        };
        let mut codes: Vec<&String> = responses.keys().filter(|c| c.starts_with('2')).collect();
        codes.sort();
        let Some(code) = codes.first() else {
            return Ok((None, false));
        };
        let response = deref(self.doc, &responses[code.as_str()])?;
        let media = response
            .get("content")
            .and_then(Value::as_object)
            .and_then(|c| c.iter().find(|(t, _)| is_json(t)))
            .and_then(|(_, m)| m.get("schema"));
        let Some(schema) = media else {
            return Ok((None, false));
        };
        let mut schema = inline(self.doc, self.version, schema, self.budget)
            .map_err(|e| format!("response {code}: {e}"))?;
        if is_object(&schema) {
            if let Some(obj) = schema.as_object_mut() {
                obj.entry("type").or_insert(json!("object"));
            }
            return Ok((Some(schema), false));
        }
        let wrapped =
            json!({"type": "object", "properties": {"result": schema}, "required": ["result"]});
        Ok((Some(wrapped), true))
    }
}

/// `application/json` or any `…+json` type.
pub(crate) fn is_json(media_type: &str) -> bool {
    let t = media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    t == "application/json" || (t.starts_with("application/") && t.ends_with("+json"))
}

/// The `{name}`s of a path template.
pub(crate) fn template_vars(path: &str) -> impl Iterator<Item = &str> {
    path.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(v, _)| v))
}

/// `raw` as a tool name: `[a-zA-Z0-9_-]` only (others become `_`, runs collapsed), at most 64.
fn normalise(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            c
        } else {
            '_'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let mut out = out.trim_matches('_').to_owned();
    out.truncate(MAX_NAME);
    if out.is_empty() {
        "operation".to_owned()
    } else {
        out
    }
}

/// What the method says about the operation.
fn annotations(method: &str) -> Value {
    let (read_only, idempotent, destructive) = match method {
        "get" | "head" | "options" | "trace" => (true, true, false),
        "delete" => (false, true, true),
        "put" => (false, true, false),
        _ => (false, false, false),
    };
    json!({"readOnlyHint": read_only, "idempotentHint": idempotent,
        "destructiveHint": destructive, "openWorldHint": true})
}

#[cfg(test)]
pub(crate) mod tests;
