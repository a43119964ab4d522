//! The JSON-RPC envelope: just enough of a message to route it.

use std::borrow::Cow;

use serde::de::Visitor;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::error::{codes, ParseError};
use crate::strict::{Violation, Within};
use crate::RequestId;

/// What kind of JSON-RPC message this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// Has `method` and `id`.
    Request,
    /// Has `method`, no `id`.
    Notification,
    /// Has `id` and exactly one of `result` / `error`, no `method`.
    Response,
}

/// A parsed envelope borrowing from the input buffer. Payload members stay raw JSON.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    /// Request, notification or response.
    pub kind: MessageKind,
    /// Present for requests and responses.
    pub id: Option<RequestId>,
    /// Present for requests and notifications.
    pub method: Option<&'a str>,
    /// `params`, raw. Absent when the member was absent or `null`.
    pub params: Option<&'a RawValue>,
    /// `params._meta`, raw, when `params` is an object that has it. Looked up once when the
    /// message is parsed: the era, the progress token and the Modern envelope are all read
    /// from it, up to a dozen lookups per request that each walked all of `params`.
    pub meta: Option<&'a RawValue>,
    /// `result`, raw (responses only).
    pub result: Option<&'a RawValue>,
    /// `error`, raw (responses only).
    pub error: Option<&'a RawValue>,
}

/// Serde view of the envelope. `id` uses [`present`] so that `"id": null` is seen as present
/// (and then refused) rather than silently treated as a notification.
#[derive(Deserialize)]
struct Raw<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Deepest nesting of arrays and objects accepted in a client's message, counting the message
/// object itself. The envelope parser copes with any depth, but backends do not: serde_json
/// refuses 128 levels and never answers, Python's `json` raises `RecursionError` near 1,000 and
/// takes the whole (shared) process down. Real MCP payloads stay far below this.
pub const MAX_CLIENT_DEPTH: usize = 64;

impl<'a> Message<'a> {
    /// [`Message::parse`] plus the limits the gateway enforces on what a *client* may send
    /// towards a backend (a backend's own messages are parsed with [`Message::parse`] only),
    /// checked anywhere in the message by one strict scan ([`crate::strict`]):
    /// - nesting deeper than [`MAX_CLIENT_DEPTH`] → `-32600`;
    /// - an object that repeats a key → `-32602` inside `params`, `-32600` elsewhere;
    /// - a member the gateway reads (of the message, its `params` or `params.ref`) spelled
    ///   another way, `"Name"` for `name` → `-32602` inside `params`, `-32600` elsewhere;
    /// - a string the policy judges (`params.name`, `params.uri`, `params.ref.*`) holding
    ///   U+0000 → `-32602`;
    /// - an unpaired surrogate escape or a float that overflows a double → `-32700` (not JSON
    ///   by strict rules);
    /// - a `params._meta.progressToken` that is not a string or a number (the gateway routes
    ///   progress by it) → `-32602`.
    ///
    /// Every error carries the id, unless the violation is inside the id itself.
    pub fn parse_client(input: &'a [u8]) -> Result<Self, ParseError> {
        let text = utf8(input)?;
        let msg = Self::parse_text(text)?;
        if let Err(v) = crate::strict::scan(text, MAX_CLIENT_DEPTH) {
            return Err(refusal(v, msg.id));
        }
        if let Some(token) = msg.meta("progressToken") {
            if !matches!(
                token.get().as_bytes().first(),
                Some(b'"' | b'-' | b'0'..=b'9')
            ) {
                return Err(ParseError::new(
                    msg.id.clone(),
                    codes::INVALID_PARAMS,
                    "Invalid params: _meta.progressToken must be a string or a number",
                ));
            }
        }
        Ok(msg)
    }

    /// Parses one JSON-RPC message.
    ///
    /// Errors: invalid JSON or UTF-8 → `-32700`; a top-level array (batch), a non-object, a
    /// wrong `jsonrpc`, a forbidden id (null, fraction, bool, object, array), a non-string
    /// method, or an impossible member combination → `-32600`; an object key anywhere that
    /// serde_json's `Value` would read as JSON to parse again
    /// (`$serde_json::private::RawValue`, see `strict`) → `-32603`, since code reading the
    /// message into a `Value` would see another message (or recurse until the stack
    /// overflows). The error carries the id when it could be read and is valid.
    pub fn parse(input: &'a [u8]) -> Result<Self, ParseError> {
        let text = utf8(input)?;
        let msg = Self::parse_text(text)?;
        if crate::strict::holds_reserved_key(text) {
            return Err(ParseError::new(
                msg.id,
                codes::INTERNAL_ERROR,
                "Internal error: a message holding the object key $serde_json::private::RawValue is not read",
            ));
        }
        Ok(msg)
    }

    fn parse_text(text: &'a str) -> Result<Self, ParseError> {
        match text.trim_start().as_bytes().first() {
            Some(b'{') => {}
            Some(b'[') => {
                return Err(ParseError::new(
                    None,
                    codes::INVALID_REQUEST,
                    "Invalid Request: batches are not supported",
                ))
            }
            None => {
                return Err(ParseError::new(
                    None,
                    codes::PARSE_ERROR,
                    "Parse error: empty body",
                ))
            }
            Some(_) => {
                // Valid JSON that is not an object is an invalid request; garbage is a parse error.
                let code = if serde_json::from_str::<&RawValue>(text).is_ok() {
                    codes::INVALID_REQUEST
                } else {
                    codes::PARSE_ERROR
                };
                return Err(ParseError::new(
                    None,
                    code,
                    "Invalid message: not a JSON object",
                ));
            }
        }
        let raw: Raw<'a> = serde_json::from_str(text).map_err(|e| {
            let code = if e.is_data() {
                codes::INVALID_REQUEST
            } else {
                codes::PARSE_ERROR
            };
            ParseError::new(None, code, "Parse error: malformed JSON-RPC message")
        })?;
        Self::from_raw(raw)
    }

    fn from_raw(raw: Raw<'a>) -> Result<Self, ParseError> {
        let id = match raw.id {
            None => None,
            Some(r) => Some(RequestId::from_raw(r).ok_or_else(|| {
                ParseError::new(
                    None,
                    codes::INVALID_REQUEST,
                    "Invalid Request: id must be a string or an integer",
                )
            })?),
        };
        let invalid = |msg| ParseError::new(id.clone(), codes::INVALID_REQUEST, msg);
        if raw.jsonrpc.map(RawValue::get) != Some("\"2.0\"") {
            return Err(invalid("Invalid Request: jsonrpc must be \"2.0\""));
        }
        let method = match raw.method {
            None => None,
            Some(m) => Some(
                plain_json_str(m)
                    .ok_or_else(|| invalid("Invalid Request: method must be a string"))?,
            ),
        };
        let params = match raw.params {
            Some(p) if p.get() == "null" => None,
            Some(p) if !matches!(p.get().as_bytes().first(), Some(b'{' | b'[')) => {
                return Err(invalid("Invalid Request: params must be an object"));
            }
            other => other,
        };
        let kind = match (method, &id, raw.result, raw.error) {
            (Some(_), _, None, None) if id.is_some() => MessageKind::Request,
            (Some(_), _, None, None) => MessageKind::Notification,
            (None, Some(_), Some(_), None) | (None, Some(_), None, Some(_)) => {
                MessageKind::Response
            }
            _ => {
                return Err(invalid(
                    "Invalid Request: not a request, notification or response",
                ))
            }
        };
        Ok(Message {
            kind,
            id,
            method,
            params,
            meta: params.and_then(|p| object_member(p, "_meta")),
            result: raw.result,
            error: raw.error,
        })
    }

    /// Looks up `params._meta[key]` without decoding anything else. `None` when params, `_meta`
    /// or the key is absent, or when either container is not an object.
    pub fn meta(&self, key: &str) -> Option<&'a RawValue> {
        object_member(self.meta?, key)
    }

    /// Looks up a top-level member of `params`.
    pub fn param(&self, key: &str) -> Option<&'a RawValue> {
        object_member(self.params?, key)
    }
}

/// The `error` member of a JSON-RPC error response whose id is `null`: what a peer answers to
/// a line it could not parse (JSON-RPC 2.0 §5.1). [`Message::parse`] refuses such a message,
/// since a null id names no request; whoever wrote the line that failed may still be able to
/// tell that it was theirs.
pub fn null_id_error(input: &[u8]) -> Option<&RawValue> {
    let raw: Raw<'_> = serde_json::from_slice(input).ok()?;
    let shaped = raw.jsonrpc.map(RawValue::get) == Some("\"2.0\"")
        && raw.id.map(RawValue::get) == Some("null")
        && raw.method.is_none()
        && raw.result.is_none();
    raw.error.filter(|_| shaped)
}

/// The value of `key` in a raw JSON object, raw. Walks only the top level of `obj` and
/// allocates nothing unless a key is escaped. With duplicate keys the last one wins, as in most
/// JSON parsers a backend would use. See [`crate::find`] for how.
pub fn object_member<'a>(obj: &'a RawValue, key: &str) -> Option<&'a RawValue> {
    crate::find::member(obj, key)
}

/// Whether the JSON object `json` has a member at `path` (names, outermost first), e.g.
/// `["_meta", "progressToken"]`. For JSON the gateway has already parsed, held as text (a
/// backend's `result`): it walks only what the path passes through and validates nothing
/// again. See [`crate::find`].
pub fn has_member(json: &str, path: &[&str]) -> bool {
    crate::find::has_path(json, path)
}

/// Whether the JSON object `json` has a top-level key that spells `key` in another case
/// (escapes decoded, simple case folding as [`crate::keys_fold_equal`]): what a parser matching keys loosely (Go's `encoding/json`) would take
/// for `key`. The same contract as [`has_member`].
pub fn has_key_variant(json: &str, key: &str) -> bool {
    let mut found = false;
    let _ = crate::find::walk(json, |lit, _| {
        found |=
            crate::find::key_matches_ignoring_case(lit, key) && !crate::find::key_matches(lit, key);
    });
    found
}

/// An object key, borrowed when the JSON spelled it without escapes.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

fn utf8(input: &[u8]) -> Result<&str, ParseError> {
    std::str::from_utf8(input)
        .map_err(|_| ParseError::new(None, codes::PARSE_ERROR, "Parse error: invalid UTF-8"))
}

/// The error for a strict-scan violation.
fn refusal(v: Violation, id: Option<RequestId>) -> ParseError {
    let (code, message) = match v {
        Violation::TooDeep => (codes::INVALID_REQUEST, "Invalid Request: nested too deeply"),
        Violation::DuplicateKey {
            within: Within::Params,
        } => (
            codes::INVALID_PARAMS,
            "Invalid params: an object repeats a key",
        ),
        Violation::DuplicateKey { .. } => (
            codes::INVALID_REQUEST,
            "Invalid Request: an object repeats a key",
        ),
        Violation::NulInKey {
            within: Within::Params,
        } => (
            codes::INVALID_PARAMS,
            "Invalid params: an object key holds U+0000",
        ),
        Violation::NulInKey { .. } => (
            codes::INVALID_REQUEST,
            "Invalid Request: an object key holds U+0000",
        ),
        Violation::NulInValue { .. } => (
            codes::INVALID_PARAMS,
            "Invalid params: a name or uri holds U+0000",
        ),
        Violation::LooseMember {
            within: Within::Params,
        } => (
            codes::INVALID_PARAMS,
            "Invalid params: a protocol member spelled in another case or form",
        ),
        Violation::LooseMember { .. } => (
            codes::INVALID_REQUEST,
            "Invalid Request: a protocol member spelled in another case or form",
        ),
        Violation::ReservedKey {
            within: Within::Params,
        } => (
            codes::INVALID_PARAMS,
            "Invalid params: the object key $serde_json::private::RawValue is reserved",
        ),
        Violation::ReservedKey { .. } => (
            codes::INVALID_REQUEST,
            "Invalid Request: the object key $serde_json::private::RawValue is reserved",
        ),
        Violation::NotStrictJson { .. } => (
            codes::PARSE_ERROR,
            "Parse error: unpaired surrogate escape or number out of range",
        ),
    };
    // An id that is itself not strict JSON cannot be echoed.
    let id = match v {
        Violation::NotStrictJson { within: Within::Id } => None,
        _ => id,
    };
    ParseError::new(id, code, message)
}

/// A JSON string literal whose content needs no unescaping (true of every real method name),
/// returned without its quotes. Escaped method names are refused rather than decoded, which
/// keeps the envelope borrow-only.
fn plain_json_str(raw: &RawValue) -> Option<&str> {
    let s = raw.get();
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

#[cfg(test)]
mod tests;
