//! How audit lines are built: the head every line shares, and the bounded pieces
//! (session labels, reasons, client info) that go into them.

use serde_json::{json, Value};
use switchboard_wire::{object_member, Message};

use crate::CoreError;

/// The session as audit logs show it: a prefix, since ids are bearer-like secrets.
pub(crate) fn session_label(s: &str) -> String {
    let prefix = s.get(..8).unwrap_or(s);
    format!("{prefix}…")
}

/// Longest `clientInfo` name or version an audit line keeps, in bytes.
pub(super) const CLIENT_INFO_LIMIT: usize = 256;
/// Longest error text an audit line keeps as its `reason`, in bytes (a backend's refusal of
/// a per-session `initialize` quotes the backend's answer).
pub(super) const REASON_LIMIT: usize = 512;

/// The head every audit line starts with, in this order: `time`; `principal` (issuer,
/// subject), absent when nobody was authenticated; `session` and `era` (label or `stateless`,
/// `legacy`/`modern`) for MCP lines; `what` — `("method", name)` for a client's JSON-RPC
/// method or `("event", kind)` for a gateway event; `outcome`. Every value is a JSON string
/// built by the encoder, so client-chosen text is escaped by construction.
pub(super) fn line(
    principal: Option<(&str, &str)>,
    scope: Option<(&str, &str)>,
    what: (&str, &str),
    outcome: &str,
) -> Value {
    let mut entry = json!({ "time": crate::audit::now_rfc3339() });
    if let Some((iss, sub)) = principal {
        entry["principal"] = json!({ "iss": iss, "sub": sub });
    }
    if let Some((session, era)) = scope {
        entry["session"] = json!(session);
        entry["era"] = json!(era);
    }
    entry[what.0] = json!(what.1);
    entry["outcome"] = json!(outcome);
    entry
}

/// An error as an audit `reason`, bounded.
pub(super) fn reason_of(e: &CoreError) -> Value {
    json!(truncate(&e.to_string(), REASON_LIMIT).0)
}

/// The `clientInfo` `name` and `version` of an `initialize`, each cut to
/// [`CLIENT_INFO_LIMIT`] bytes, and whether one was cut. Absent members (and non-strings)
/// are left out; `None` when neither is there.
pub(super) fn client_info(msg: &Message<'_>) -> Option<(Value, bool)> {
    let info = msg.param("clientInfo")?;
    let mut out = serde_json::Map::new();
    let mut cut = false;
    for key in ["name", "version"] {
        let text =
            object_member(info, key).and_then(|v| serde_json::from_str::<String>(v.get()).ok());
        if let Some(text) = text {
            let (kept, was_cut) = truncate(&text, CLIENT_INFO_LIMIT);
            cut |= was_cut;
            out.insert(key.to_owned(), json!(kept));
        }
    }
    (!out.is_empty()).then_some((Value::Object(out), cut))
}

/// At most `limit` bytes of `s`, cut on a character boundary.
pub(super) fn truncate(s: &str, limit: usize) -> (&str, bool) {
    if s.len() <= limit {
        return (s, false);
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}
