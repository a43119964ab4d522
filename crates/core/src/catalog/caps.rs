//! What the virtual server declares: merged capabilities and instructions.

use serde_json::{Map, Value};

use crate::BackendId;

/// The capability families merged, each with its boolean flags. Anything else a backend
/// declares (`experimental`, `tasks`, extensions but [`ROUTED_EXTENSIONS`]) is left out: the
/// gateway advertises only what it knows how to route across backends, and a client never
/// uses what it was not offered. Whoever adds cross-backend routing for another family adds
/// it here.
const FAMILIES: &[(&str, &[&str])] = &[
    ("tools", &["listChanged"]),
    ("prompts", &["listChanged"]),
    ("resources", &["subscribe", "listChanged"]),
    ("logging", &[]),
    ("completions", &[]),
];

/// Extensions the gateway routes across backends: the Tasks extension (each task's methods go
/// to the backend holding it, `pipeline/tasks.rs`). Declared when any backend declares it.
const ROUTED_EXTENSIONS: &[&str] = &["io.modelcontextprotocol/tasks"];

/// Most bytes of one backend's instructions quoted (a backend must not bloat every
/// `initialize` answer).
pub const MAX_INSTRUCTIONS: usize = 16 * 1024;

/// The capabilities of the virtual server, from those of the backends the caller may use
/// (each from its `initialize` or `server/discover` answer): a family is present when any
/// backend declares it (as an object); a flag is `true` when any backend's is `true`.
pub fn merge_capabilities(backends: &[(BackendId, &Value)]) -> Value {
    let mut out = Map::new();
    for (family, flags) in FAMILIES {
        let declared: Vec<&Map<String, Value>> = backends
            .iter()
            .filter_map(|(_, caps)| caps.get(*family)?.as_object())
            .collect();
        if declared.is_empty() {
            continue;
        }
        let mut merged = Map::new();
        for flag in *flags {
            if declared
                .iter()
                .any(|d| d.get(*flag) == Some(&Value::Bool(true)))
            {
                merged.insert((*flag).to_owned(), Value::Bool(true));
            }
        }
        out.insert((*family).to_owned(), Value::Object(merged));
    }
    let mut extensions = Map::new();
    for ext in ROUTED_EXTENSIONS {
        let declared = backends.iter().any(|(_, caps)| {
            caps.get("extensions")
                .and_then(|e| e.get(*ext))
                .is_some_and(Value::is_object)
        });
        if declared {
            extensions.insert((*ext).to_owned(), Value::Object(Map::new()));
        }
    }
    if !extensions.is_empty() {
        out.insert("extensions".to_owned(), Value::Object(extensions));
    }
    Value::Object(out)
}

/// The virtual server's instructions: each backend's own (non-empty ones, at most
/// [`MAX_INSTRUCTIONS`] bytes each), under a heading naming it, in the given order. `None`
/// when no backend has any.
pub fn merge_instructions(backends: &[(BackendId, Option<&str>)]) -> Option<String> {
    let sections: Vec<String> = backends
        .iter()
        .filter_map(|(id, text)| {
            let text = (*text)?.trim();
            (!text.is_empty()).then(|| format!("## Backend `{id}`\n{}", bounded(text)))
        })
        .collect();
    if sections.is_empty() {
        return None;
    }
    Some(format!(
        "This server combines several MCP servers. Each section below is one backend's own \
         instructions; the tool and prompt names in it are that backend's, and may be exposed \
         with a prefix naming the backend.\n\n{}",
        sections.join("\n\n")
    ))
}

/// `text` cut to [`MAX_INSTRUCTIONS`] bytes at a character boundary, marked when cut.
fn bounded(text: &str) -> String {
    if text.len() <= MAX_INSTRUCTIONS {
        return text.to_owned();
    }
    let mut end = MAX_INSTRUCTIONS;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (truncated)", &text[..end])
}
