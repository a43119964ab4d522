//! What the driver sends and how it judges what comes back.
//!
//! Every request is a `tools/call` with a unique integer id. With the default `echo` tool each
//! request also carries a unique text, so a response that was delivered to the wrong caller
//! (the exact failure a multiplexing gateway must never have) is caught even if its id happened
//! to be rewritten correctly.

use std::borrow::Cow;

use anyhow::{bail, Context};
use serde::Deserialize;
use serde_json::{Map, Value};

use switchboard_wire::{Message, MessageKind};

/// The protocol revision the driver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Era {
    /// MCP 2025-11-25: `initialize` once per session, then requests under `Mcp-Session-Id`.
    Legacy,
    /// MCP 2026-07-28: stateless requests, envelope in `params._meta`.
    Modern,
}

impl Era {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        }
    }

    /// The revision string sent in `initialize` / `_meta` / `MCP-Protocol-Version`.
    pub(crate) fn version(self) -> &'static str {
        match self {
            Era::Legacy => "2025-11-25",
            Era::Modern => "2026-07-28",
        }
    }
}

/// The text the default echo check expects for request `id`. Plain ASCII, so it needs no JSON
/// escaping and comes back borrowable.
fn echo_text(id: u64) -> String {
    format!("sb-bench-{id}")
}

/// What a good answer must contain besides the right id.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// `echo` with a per-request text the driver generated.
    EchoUnique,
    /// `echo` with a text the user fixed in `--args`.
    EchoFixed(String),
    /// Any other tool: a result that is not `isError`.
    AnyResult,
}

/// A prebuilt `tools/call` body with holes for the id and (for echo) the text.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    /// From `,"method"` up to the opening of `arguments` (exclusive of its content).
    middle: String,
    /// Arguments after the generated `text` member (`,...` or empty), or the whole fixed object.
    args: String,
    check: Check,
    tool: String,
}

/// How one answer was judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Ok,
    /// A response, but not the one this request should have got.
    Wrong(String),
    /// A failure the target reported (or a response we could not read), by kind.
    Error(String),
}

impl Template {
    /// `args`: the `--args` JSON object, if any. `echo`: check answers as `echo`'s even when
    /// the tool has another name (a gateway that prefixes tool names).
    pub(crate) fn new(
        era: Era,
        tool: &str,
        args: Option<&str>,
        echo: bool,
    ) -> anyhow::Result<Self> {
        let args: Map<String, Value> = match args {
            None => Map::new(),
            Some(text) => match serde_json::from_str::<Value>(text).context("--args")? {
                Value::Object(m) => m,
                _ => bail!("--args must be a JSON object"),
            },
        };
        let meta = match era {
            Era::Legacy => String::new(),
            Era::Modern => format!(
                r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"{}","io.modelcontextprotocol/clientCapabilities":{{}}}},"#,
                era.version()
            ),
        };
        let middle = format!(
            r#","method":"tools/call","params":{{{meta}"name":{},"arguments":"#,
            serde_json::to_string(tool)?
        );
        let (check, args) = if tool != "echo" && !echo {
            (Check::AnyResult, Value::Object(args).to_string())
        } else if let Some(text) = args.get("text") {
            let text = text
                .as_str()
                .context("--args: echo's text must be a string")?;
            (
                Check::EchoFixed(text.to_owned()),
                Value::Object(args).to_string(),
            )
        } else {
            let rest = Value::Object(args).to_string();
            // `{...}` minus its braces, behind a comma, so it can follow the generated text.
            let inner = &rest[1..rest.len() - 1];
            let rest = if inner.is_empty() {
                String::new()
            } else {
                format!(",{inner}")
            };
            (Check::EchoUnique, rest)
        };
        Ok(Template {
            middle,
            args,
            check,
            tool: tool.to_owned(),
        })
    }

    pub(crate) fn tool(&self) -> &str {
        &self.tool
    }

    /// The request body for id `id`.
    pub(crate) fn body(&self, id: u64) -> Vec<u8> {
        use std::io::Write;
        let mut out = Vec::with_capacity(self.middle.len() + self.args.len() + 64);
        let _ = write!(out, r#"{{"jsonrpc":"2.0","id":{id}"#);
        out.extend_from_slice(self.middle.as_bytes());
        if self.check == Check::EchoUnique {
            let _ = write!(out, r#"{{"text":"{}""#, echo_text(id));
            out.extend_from_slice(self.args.as_bytes());
            out.push(b'}');
        } else {
            out.extend_from_slice(self.args.as_bytes());
        }
        out.extend_from_slice(b"}}");
        out
    }

    /// Judges `answer`, the one JSON-RPC message that came back for request `id`.
    pub(crate) fn verify(&self, id: u64, answer: &[u8]) -> Verdict {
        let msg = match Message::parse(answer) {
            Ok(m) => m,
            Err(_) => return Verdict::Error("malformed_response".into()),
        };
        if msg.kind != MessageKind::Response {
            return Verdict::Error("not_a_response".into());
        }
        // Integer ids are compared as text: the answer must carry exactly the digits we sent.
        let got = msg.id.as_ref().map(|i| i.as_json()).unwrap_or_default();
        if got.parse::<u64>().ok() != Some(id) || got.starts_with('+') {
            return Verdict::Wrong(format!("sent id {id}, got id {got}"));
        }
        if let Some(err) = msg.error {
            return Verdict::Error(format!("jsonrpc_{}", error_code(err.get())));
        }
        let Some(result) = msg.result else {
            return Verdict::Error("malformed_response".into());
        };
        let Ok(result) = serde_json::from_str::<ToolResult<'_>>(result.get()) else {
            return Verdict::Wrong("result is not a CallToolResult".into());
        };
        if result.is_error == Some(true) {
            return Verdict::Error("tool_error".into());
        }
        let expected: Cow<'_, str> = match &self.check {
            Check::AnyResult => return Verdict::Ok,
            Check::EchoFixed(t) => Cow::Borrowed(t),
            Check::EchoUnique => Cow::Owned(echo_text(id)),
        };
        let text = result.content.first().and_then(|b| b.text.as_deref());
        let structured = result
            .structured_content
            .as_ref()
            .and_then(|s| s.text.as_deref());
        if text != Some(&*expected) || structured != Some(&*expected) {
            return Verdict::Wrong(format!(
                "expected {expected:?}, got text {text:?} / structuredContent.text {structured:?}"
            ));
        }
        Verdict::Ok
    }
}

/// The JSON-RPC error code, or `unknown` when the error object has none.
pub(crate) fn error_code(error: &str) -> String {
    #[derive(Deserialize)]
    struct E {
        code: Option<i64>,
    }
    match serde_json::from_str::<E>(error) {
        Ok(E { code: Some(c) }) => c.to_string(),
        _ => "unknown".into(),
    }
}

/// The few members of a `CallToolResult` the checks read; the rest is skipped unparsed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolResult<'a> {
    #[serde(borrow, default)]
    content: Vec<Block<'a>>,
    #[serde(borrow, default)]
    structured_content: Option<Structured<'a>>,
    #[serde(default)]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Structured<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_answer(id: &str, text: &str) -> Vec<u8> {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"{text}"}}],"structuredContent":{{"text":"{text}"}}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn legacy_echo_body() {
        let t = Template::new(Era::Legacy, "echo", None, false).unwrap();
        let body: Value = serde_json::from_slice(&t.body(42)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"jsonrpc":"2.0","id":42,"method":"tools/call",
                "params":{"name":"echo","arguments":{"text":"sb-bench-42"}}})
        );
    }

    #[test]
    fn modern_body_carries_envelope_and_extra_args() {
        let t = Template::new(Era::Modern, "echo", Some(r#"{"delayMs":0}"#), false).unwrap();
        let body: Value = serde_json::from_slice(&t.body(7)).unwrap();
        let meta = &body["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            serde_json::json!({})
        );
        assert_eq!(
            body["params"]["arguments"],
            serde_json::json!({"text":"sb-bench-7","delayMs":0})
        );
    }

    #[test]
    fn other_tools_and_fixed_text() {
        let t = Template::new(Era::Legacy, "pid", Some("{}"), false).unwrap();
        let body: Value = serde_json::from_slice(&t.body(1)).unwrap();
        assert_eq!(
            body["params"],
            serde_json::json!({"name":"pid","arguments":{}})
        );
        let ok = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"9"}]}}"#;
        assert_eq!(t.verify(1, ok), Verdict::Ok);

        let t = Template::new(Era::Legacy, "echo", Some(r#"{"text":"same"}"#), false).unwrap();
        assert_eq!(t.verify(3, &echo_answer("3", "same")), Verdict::Ok);
        assert!(matches!(
            t.verify(3, &echo_answer("3", "other")),
            Verdict::Wrong(_)
        ));

        assert!(Template::new(Era::Legacy, "echo", Some("[1]"), false).is_err());
        assert!(Template::new(Era::Legacy, "echo", Some(r#"{"text":5}"#), false).is_err());
        assert!(Template::new(Era::Legacy, "echo", Some("{"), false).is_err());
    }

    #[test]
    fn a_renamed_echo_is_still_checked_as_echo() {
        let t = Template::new(Era::Legacy, "fixture_echo", None, true).unwrap();
        let body: Value = serde_json::from_slice(&t.body(9)).unwrap();
        assert_eq!(
            body["params"],
            serde_json::json!({"name":"fixture_echo","arguments":{"text":"sb-bench-9"}})
        );
        assert_eq!(t.verify(9, &echo_answer("9", "sb-bench-9")), Verdict::Ok);
        assert!(matches!(
            t.verify(9, &echo_answer("9", "sb-bench-8")),
            Verdict::Wrong(_)
        ));
    }

    #[test]
    fn verification() {
        let t = Template::new(Era::Legacy, "echo", None, false).unwrap();
        assert_eq!(t.verify(5, &echo_answer("5", "sb-bench-5")), Verdict::Ok);
        // Right id, someone else's payload: the cross-delivery the check exists for.
        assert!(matches!(
            t.verify(5, &echo_answer("5", "sb-bench-6")),
            Verdict::Wrong(_)
        ));
        // Wrong id, or an id that is "equal" only after coercion.
        assert!(matches!(
            t.verify(5, &echo_answer("6", "sb-bench-5")),
            Verdict::Wrong(_)
        ));
        assert!(matches!(
            t.verify(5, &echo_answer("\"5\"", "sb-bench-5")),
            Verdict::Wrong(_)
        ));
        // Only one of the two texts right is still wrong.
        let half = br#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"sb-bench-5"}]}}"#;
        assert!(matches!(t.verify(5, half), Verdict::Wrong(_)));

        let err = br#"{"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"nope"}}"#;
        assert_eq!(t.verify(5, err), Verdict::Error("jsonrpc_-32601".into()));
        let tool_err = br#"{"jsonrpc":"2.0","id":5,"result":{"content":[],"isError":true}}"#;
        assert_eq!(t.verify(5, tool_err), Verdict::Error("tool_error".into()));
        assert_eq!(
            t.verify(5, b"{nope"),
            Verdict::Error("malformed_response".into())
        );
        let note = br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#;
        assert_eq!(t.verify(5, note), Verdict::Error("not_a_response".into()));
        assert_eq!(error_code(r#"{"message":"x"}"#), "unknown");
    }
}
