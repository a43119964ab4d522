//! How a client's method is classified for the policy: which action on which target it
//! needs, and which list methods are filtered item by item.

use std::borrow::Cow;

use serde_json::value::RawValue;
use switchboard_wire::{method, object_member, Message};

use super::Target;

/// What one method needs from the policy.
#[derive(Debug)]
pub(super) enum Gate {
    /// Protocol plumbing every caller needs (handshake, ping, own log level, own unsubscribe).
    Open,
    /// One action on one target.
    Check(Cow<'static, str>, Target),
    /// A Modern `subscriptions/listen`: `subscribe` on each requested URI.
    Listen(Vec<String>),
}

/// Methods that need no permission: they reveal nothing and only affect the caller's own state.
const OPEN: &[&str] = &[
    method::INITIALIZE,
    method::INITIALIZED,
    method::PING,
    method::CANCELLED,
    method::PROGRESS,
    method::SET_LEVEL,
    method::UNSUBSCRIBE,
    method::DISCOVER,
    "notifications/roots/list_changed",
];

/// List methods: (method, action, array member, item key, target constructor).
pub(super) type Wrap = fn(String) -> Target;
pub(super) const LISTS: &[(&str, &str, &str, &str, Wrap)] = &[
    ("tools/list", "list_tools", "tools", "name", Target::Tool),
    (
        "prompts/list",
        "list_prompts",
        "prompts",
        "name",
        Target::Prompt,
    ),
    (
        "resources/list",
        "list_resources",
        "resources",
        "uri",
        Target::resource,
    ),
    (
        "resources/templates/list",
        "list_resources",
        "resourceTemplates",
        "uriTemplate",
        Target::ResourceTemplate,
    ),
];

/// The per-item action that makes an item of a list visible.
pub(super) fn item_action(target: &Target) -> &'static str {
    match target {
        Target::Tool(_) => "call_tool",
        Target::Prompt(_) => "get_prompt",
        Target::Resource(_) | Target::ResourceTemplate(_) => "read_resource",
        Target::Server => "",
    }
}

pub(super) fn str_member(obj: Option<&RawValue>, key: &str) -> String {
    obj.and_then(|o| object_member(o, key))
        .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
        .unwrap_or_default()
}

fn check(action: &'static str, target: Target) -> Gate {
    Gate::Check(Cow::Borrowed(action), target)
}

pub(super) fn gate(msg: &Message<'_>) -> Gate {
    let name = msg.method.unwrap_or_default();
    if OPEN.contains(&name) {
        return Gate::Open;
    }
    if let Some((_, action, ..)) = LISTS.iter().find(|l| l.0 == name) {
        return Gate::Check(Cow::Borrowed(action), Target::Server);
    }
    let param = |k: &str| str_member(msg.params, k);
    match name {
        "tools/call" => check("call_tool", Target::Tool(param("name"))),
        "resources/read" => check("read_resource", Target::resource(param("uri"))),
        "prompts/get" => check("get_prompt", Target::Prompt(param("name"))),
        method::SUBSCRIBE => check("subscribe", Target::resource(param("uri"))),
        "completion/complete" => {
            let reference = msg.param("ref");
            match str_member(reference, "type").as_str() {
                "ref/prompt" => check("get_prompt", Target::Prompt(str_member(reference, "name"))),
                "ref/resource" => check(
                    "read_resource",
                    Target::resource(str_member(reference, "uri")),
                ),
                _ => check("completion/complete", Target::Server),
            }
        }
        // The URIs the listen will subscribe to, read by the parser that subscribes them: a
        // second, stricter parser here let `["forbidden", 1]` through unchecked (it failed
        // on the number and judged nothing) while the subscription kept "forbidden".
        "subscriptions/listen" => {
            Gate::Listen(crate::modern_listen::Filter::parse(msg.params).uris)
        }
        // Anything else is evaluated as an action named after the method on the server, so it
        // is denied unless the policy names it.
        other => Gate::Check(Cow::Owned(other.to_owned()), Target::Server),
    }
}

pub(super) fn denial(action: &str) -> &'static str {
    match action {
        "call_tool" => "call denied by authorization policy",
        "read_resource" => "read denied by authorization policy",
        "get_prompt" => "prompt denied by authorization policy",
        "subscribe" => "subscription denied by authorization policy",
        a if a.starts_with("list_") => "list denied by authorization policy",
        _ => "method denied by authorization policy",
    }
}
