//! The gateway's own view of a shared backend: which eras it speaks, and what it declared.
//!
//! At startup the gateway probes Modern first (`server/discover`), then performs the Legacy
//! handshake (`initialize` → `initialized`) once. A backend that answers both is dual-era; one
//! that answers only one is served in that era and bridged for the other. Every client's
//! `initialize` is answered by the gateway from what it learned here, so a strict backend sees
//! exactly one handshake however many clients connect.

use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::info;

use switchboard_upstream::{BackendResponse, Upstream};
use switchboard_wire::classify::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, META_SERVER_INFO,
};
use switchboard_wire::{encode_notification, encode_request, method, version};

use crate::route::RouteKey;
use crate::CoreError;

/// How long the Modern probe may take before the backend is taken to be Legacy-only.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which protocol eras a backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendEra {
    /// Answers `initialize` (2025-11-25 and older).
    pub legacy: bool,
    /// Answers stateless 2026-07-28 requests.
    pub modern: bool,
}

impl std::fmt::Display for BackendEra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (self.legacy, self.modern) {
            (true, true) => "dual",
            (true, false) => "legacy",
            (false, true) => "modern",
            (false, false) => "none",
        })
    }
}

/// What the backend said about itself.
#[derive(Debug, Clone)]
pub struct BackendInfo {
    /// The Legacy version the backend agreed to (or the Modern one for a Modern-only backend).
    pub protocol_version: String,
    /// The backend's capabilities object, offered to clients as the gateway's own.
    pub capabilities: Value,
    /// The backend's `serverInfo`.
    pub server_info: Value,
    /// The backend's `instructions`, if any.
    pub instructions: Option<Value>,
    /// The eras it speaks.
    pub era: BackendEra,
}

impl BackendInfo {
    /// Offers no tasks: neither the 2025-11-25 `tasks` capability nor the Tasks extension
    /// (a backend with replicas keeps none: `destination::Route::keeps_tasks`).
    pub fn without_tasks(&mut self) {
        if let Some(caps) = self.capabilities.as_object_mut() {
            caps.remove("tasks");
            if let Some(ext) = caps.get_mut("extensions").and_then(Value::as_object_mut) {
                ext.remove(crate::tasks::EXTENSION);
            }
        }
    }
}

/// A connected shared backend.
#[derive(Debug, Clone)]
pub struct Backend {
    /// Where requests go.
    pub handle: Upstream,
    /// What the backend declared.
    pub info: BackendInfo,
    /// Where the gateway's own requests go (`tools/list` for the `Mcp-Param-*` designations)
    /// when `handle` cannot serve them: a Legacy-only remote refuses sessionless requests, so
    /// the gateway keeps an upstream session of its own for them, which no client uses.
    pub internal: Option<switchboard_upstream::Upstream>,
    /// Connected Modern first ([`EraPolicy::ModernFirst`]): `info.era` says Modern only, and
    /// whether it also answers `initialize` is not known yet.
    pub legacy_unprobed: bool,
}

/// Which probes to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EraPolicy {
    /// Probe Modern first, then Legacy.
    #[default]
    Auto,
    /// Only the Legacy handshake (for servers that exit on any request before `initialize`).
    LegacyOnly,
    /// Probe Modern; only a backend that does not answer it gets the Legacy handshake now. A
    /// 2026-07-28 client sends a server that speaks it nothing but 2026-07-28 requests, so
    /// whether a Modern remote also speaks Legacy is learned when the first Legacy client
    /// arrives ([`Backend::legacy_unprobed`], `per_session::LegacyProbe`).
    ModernFirst,
}

/// The `_meta` envelope the gateway sends on its own Modern requests.
pub(crate) fn gateway_envelope() -> Value {
    json!({
        META_PROTOCOL_VERSION: version::MODERN[0],
        META_CLIENT_CAPABILITIES: {},
        META_CLIENT_INFO: {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")},
    })
}

impl Backend {
    /// Learns the backend's eras and performs the Legacy handshake when it has one.
    pub async fn connect(
        handle: Upstream,
        deadline: Duration,
        policy: EraPolicy,
    ) -> Result<Backend, CoreError> {
        let started = std::time::Instant::now();
        let discovered = match policy {
            EraPolicy::Auto | EraPolicy::ModernFirst => {
                probe_modern(&handle, deadline.min(PROBE_TIMEOUT)).await
            }
            EraPolicy::LegacyOnly => None,
        };
        if let (EraPolicy::ModernFirst, Some(d)) = (policy, &discovered) {
            let info = from_discover(d.clone());
            info!(era = %info.era, version = %info.protocol_version, server = %info.server_info, "backend connected (Legacy not probed)");
            return Ok(Backend {
                handle,
                info,
                internal: None,
                legacy_unprobed: true,
            });
        }
        let legacy = initialize(&handle, deadline).await;
        // A backend already committed to Modern that was slow to start missed the first
        // probe and refuses `initialize` naming its version: Modern, not failed. It is
        // asked again, within what is left of the startup deadline.
        let discovered = match (&legacy, discovered) {
            (Ok(Err(refusal)), None) if policy == EraPolicy::Auto && names_modern(refusal) => {
                let left = deadline.saturating_sub(started.elapsed());
                probe_modern(&handle, left.max(PROBE_TIMEOUT)).await
            }
            (_, discovered) => discovered,
        };
        let legacy = legacy.and_then(|answer| answer.map_err(refused_initialize));
        let info = match (legacy, discovered) {
            (Ok(mut info), discovered) => {
                info.era.modern = discovered.is_some();
                // Extensions are declared to Modern clients only (`server/discover`); the
                // Legacy answer has no place for them.
                let extensions = discovered
                    .and_then(|mut d| d["capabilities"]["extensions"].take().as_object().cloned());
                if let (Some(ext), Some(caps)) = (extensions, info.capabilities.as_object_mut()) {
                    caps.insert("extensions".into(), Value::Object(ext));
                }
                info
            }
            (Err(_), Some(d)) => from_discover(d),
            (Err(e), None) => return Err(e),
        };
        info!(era = %info.era, version = %info.protocol_version, server = %info.server_info, "backend connected");
        Ok(Backend {
            handle,
            info,
            internal: None,
            legacy_unprobed: false,
        })
    }
}

impl Backend {
    /// A backend the gateway could not probe on its own (a remote that needs each caller's
    /// authorization): Legacy assumed, a tools capability, and the version this gateway
    /// speaks; the callers' own requests meet the real server.
    pub fn unprobed(handle: Upstream) -> Backend {
        Backend {
            handle,
            info: BackendInfo {
                protocol_version: "2025-11-25".to_owned(),
                capabilities: serde_json::json!({"tools": {}}),
                server_info: serde_json::json!({"name": "switchboard-remote", "version": "0"}),
                instructions: None,
                era: BackendEra {
                    legacy: true,
                    modern: false,
                },
            },
            internal: None,
            legacy_unprobed: false,
        }
    }

    /// Makes a restarted process (`standby`, not yet installed) usable: the Legacy handshake
    /// when the backend has one (a Modern-only backend needs none).
    pub(crate) async fn reinitialize(
        &self,
        standby: &Upstream,
        deadline: Duration,
    ) -> Result<(), CoreError> {
        if self.info.era.legacy {
            legacy_handshake(standby, deadline).await?;
        }
        Ok(())
    }
}

pub(crate) async fn call(
    handle: &Upstream,
    name: &str,
    params: Value,
    deadline: Duration,
) -> Result<BackendResponse, CoreError> {
    call_as(handle, name, params, deadline, None).await
}

/// `initialize` (with `capabilities`) and `initialized`, then the log level if asked for;
/// on behalf of the caller whose `credential` it is when the process (or upstream
/// session) is that caller's alone (`None`: the gateway's own).
pub(crate) async fn handshake(
    handle: &Upstream,
    capabilities: Value,
    level: Option<&Value>,
    credential: Option<&switchboard_upstream::Credential>,
    deadline: Duration,
) -> Result<(), CoreError> {
    let init = json!({
        "protocolVersion": switchboard_wire::version::LATEST_LEGACY,
        "capabilities": capabilities,
        "clientInfo": {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")},
    });
    let answer = call_as(handle, method::INITIALIZE, init, deadline, credential).await?;
    if answer.is_error() {
        return Err(CoreError::BackendInit(refused(
            method::INITIALIZE,
            answer.payload(),
        )));
    }
    handle
        .send_line(encode_notification(method::INITIALIZED, None))
        .await?;
    if let Some(level) = level.filter(|l| l.is_string()) {
        let logging: Value = serde_json::from_str(answer.payload()).unwrap_or(Value::Null);
        if logging["capabilities"].get("logging").is_some() {
            let params = json!({ "level": level });
            let _ = call_as(handle, method::SET_LEVEL, params, deadline, credential).await;
        }
    }
    Ok(())
}

/// [`call`] on behalf of the caller whose `credential` it is (`None`: the gateway's own), for
/// a handle that caller alone uses (its partition, a process of its call's own).
pub(crate) async fn call_as(
    handle: &Upstream,
    name: &str,
    params: Value,
    deadline: Duration,
    credential: Option<&switchboard_upstream::Credential>,
) -> Result<BackendResponse, CoreError> {
    let params = RawValue::from_string(params.to_string())
        .map_err(|e| CoreError::BackendInit(e.to_string()))?;
    let key = RouteKey::mint();
    let line = encode_request(&key.to_request_id(), name, Some(&params));
    let pending = handle.call_as(key.as_str(), line, credential).await?;
    tokio::time::timeout(deadline, pending)
        .await
        .map_err(|_| no_answer(name, deadline))?
        .map_err(CoreError::from)
}

/// A backend's JSON-RPC error answer to the gateway's own `method`, as logs, the audit log and
/// startup errors tell it: the error code, never the message or data (a remote may quote the
/// credential it was sent: `denied auth=<the header>`).
pub(crate) fn refused(method: &str, error: &str) -> String {
    let code = RawValue::from_string(error.to_owned())
        .ok()
        .and_then(|raw| switchboard_wire::object_member(&raw, "code").map(|c| c.get().to_owned()))
        .filter(|c| c.parse::<i64>().is_ok());
    match code {
        Some(code) => format!("backend refused {method} (JSON-RPC error {code})"),
        None => format!("backend refused {method}"),
    }
}

/// One page of a list the gateway asked for itself (`method`), as its result's JSON; why not,
/// in words for the log (never the backend's own: [`refused`]).
pub(crate) fn list_page(
    method: &str,
    answer: Result<BackendResponse, CoreError>,
) -> Result<serde_json::Value, String> {
    let answer = answer.map_err(|e| format!("{method} failed: {e}"))?;
    if answer.is_error() {
        return Err(refused(method, answer.payload()));
    }
    serde_json::from_str(answer.payload())
        .map_err(|e| format!("{method} answered unreadable JSON: {e}"))
}

/// A backend that let a handshake step pass unanswered.
pub(crate) fn no_answer(name: &str, limit: Duration) -> CoreError {
    CoreError::BackendInit(format!(
        "backend did not answer {name} within {} s",
        limit.as_secs_f64()
    ))
}

/// Whether the backend answers `server/discover` with a version the gateway speaks.
pub(crate) async fn speaks_modern(handle: &Upstream) -> bool {
    probe_modern(handle, PROBE_TIMEOUT).await.is_some()
}

/// `server/discover` with the gateway's envelope; `Some(result)` if the backend is Modern.
/// A `-32022` naming a Modern version the gateway speaks is retried once with it (the
/// corrective retry a client owes a server that refused the version it was sent).
async fn probe_modern(handle: &Upstream, timeout: Duration) -> Option<Value> {
    let started = std::time::Instant::now();
    let discover = || {
        call(
            handle,
            method::DISCOVER,
            json!({"_meta": gateway_envelope()}),
            timeout.saturating_sub(started.elapsed()),
        )
    };
    let mut answer = discover().await.ok()?;
    if answer.is_error() && offers_our_version(answer.payload()) {
        answer = discover().await.ok()?;
    }
    if answer.is_error() {
        return None;
    }
    let result: Value = serde_json::from_str(answer.payload()).ok()?;
    let speaks_ours = result["supportedVersions"]
        .as_array()
        .is_some_and(|v| v.iter().any(|v| v.as_str().is_some_and(version::is_modern)));
    speaks_ours.then_some(result)
}

async fn legacy_handshake(handle: &Upstream, deadline: Duration) -> Result<BackendInfo, CoreError> {
    initialize(handle, deadline)
        .await?
        .map_err(refused_initialize)
}

/// A refused `initialize`, in the gateway's words (its code, never the backend's text).
fn refused_initialize(error: String) -> CoreError {
    CoreError::BackendInit(refused(method::INITIALIZE, &error))
}

/// Whether a refused `initialize` says the backend speaks a Modern version instead
/// (`-32022`; `-32020`, a Modern server holding it to the Modern headers; or its error
/// naming one).
fn names_modern(error: &str) -> bool {
    let code = serde_json::from_str::<Value>(error)
        .ok()
        .and_then(|e| e["code"].as_i64());
    let modern_codes = [
        switchboard_wire::codes::UNSUPPORTED_PROTOCOL_VERSION,
        switchboard_wire::codes::HEADER_MISMATCH,
    ];
    code.is_some_and(|c| modern_codes.iter().any(|m| i64::from(*m) == c))
        || version::MODERN.iter().any(|v| error.contains(v))
}

/// Whether a refused `server/discover` is `-32022` whose `data.supported` lists the Modern
/// version the gateway sends (so sending it again is the corrective retry).
fn offers_our_version(error: &str) -> bool {
    let Ok(error) = serde_json::from_str::<Value>(error) else {
        return false;
    };
    let unsupported = i64::from(switchboard_wire::codes::UNSUPPORTED_PROTOCOL_VERSION);
    error["code"].as_i64() == Some(unsupported)
        && error["data"]["supported"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v.as_str() == Some(version::MODERN[0])))
}

/// Whether the backend answers a Legacy `initialize` (the gateway's own, on `handle`, an
/// upstream session used for nothing else): `Ok(false)` only for a refusal that says so (the
/// error names a Modern version or its codes, or the method is unknown); `Err` when the
/// answer says nothing either way (unreachable, no answer in time, any other error).
pub(crate) async fn answers_legacy(
    handle: &Upstream,
    deadline: Duration,
) -> Result<bool, CoreError> {
    match initialize(handle, deadline).await? {
        Ok(_) => Ok(true),
        Err(refusal) if names_modern(&refusal) || unknown_method(&refusal) => Ok(false),
        Err(refusal) => Err(refused_initialize(refusal)),
    }
}

/// Whether a JSON-RPC error is "method not found".
fn unknown_method(error: &str) -> bool {
    serde_json::from_str::<Value>(error)
        .ok()
        .and_then(|e| e["code"].as_i64())
        == Some(i64::from(switchboard_wire::codes::METHOD_NOT_FOUND))
}

/// The Legacy handshake: the backend's info, or its refusal (the JSON-RPC error's text).
async fn initialize(
    handle: &Upstream,
    deadline: Duration,
) -> Result<Result<BackendInfo, String>, CoreError> {
    let params = json!({
        "protocolVersion": version::LATEST_LEGACY,
        // Shared mode cannot attribute sampling, elicitation or roots to a client, so the
        // gateway declares none of them.
        "capabilities": {},
        "clientInfo": {"name": "switchboard", "version": env!("CARGO_PKG_VERSION")},
    });
    let answer = call(handle, method::INITIALIZE, params, deadline).await?;
    if answer.is_error() {
        return Ok(Err(answer.payload().to_owned()));
    }
    let info = parse_info(answer.payload())?;
    handle
        .send_line(encode_notification(method::INITIALIZED, None))
        .await?;
    Ok(Ok(info))
}

fn from_discover(mut d: Value) -> BackendInfo {
    BackendInfo {
        protocol_version: version::MODERN[0].to_owned(),
        capabilities: d
            .get_mut("capabilities")
            .map(Value::take)
            .unwrap_or_else(|| json!({})),
        // Where 2026-07-28 puts it (`_meta`); earlier drafts put it in the result.
        server_info: match d["_meta"][META_SERVER_INFO].take() {
            Value::Null => d.get_mut("serverInfo").map(Value::take).unwrap_or_default(),
            info => info,
        },
        instructions: d.get_mut("instructions").map(Value::take),
        era: BackendEra {
            legacy: false,
            modern: true,
        },
    }
}

fn parse_info(result: &str) -> Result<BackendInfo, CoreError> {
    let bad = |what: &str| CoreError::BackendInit(format!("initialize result {what}"));
    let mut v: Value = serde_json::from_str(result).map_err(|_| bad("is not JSON"))?;
    let obj = v.as_object_mut().ok_or_else(|| bad("is not an object"))?;
    let protocol_version = obj
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("has no protocolVersion"))?
        .to_owned();
    let capabilities = obj
        .remove("capabilities")
        .filter(Value::is_object)
        .ok_or_else(|| bad("has no capabilities object"))?;
    let server_info = obj
        .remove("serverInfo")
        .filter(Value::is_object)
        .ok_or_else(|| bad("has no serverInfo object"))?;
    Ok(BackendInfo {
        protocol_version,
        capabilities,
        server_info,
        instructions: obj.remove("instructions"),
        era: BackendEra {
            legacy: true,
            modern: false,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_real_result_and_refuses_broken_ones() {
        let ok = r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"x","version":"1"},"instructions":"hi"}"#;
        let info = parse_info(ok).unwrap();
        assert_eq!(info.protocol_version, "2025-06-18");
        assert_eq!(info.instructions, Some(json!("hi")));
        for bad in [
            "[]",
            "{}",
            r#"{"protocolVersion":"x","capabilities":[],"serverInfo":{}}"#,
            "nope",
        ] {
            assert!(parse_info(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn modern_only_info_comes_from_discover() {
        let d = json!({"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},
            "_meta":{META_SERVER_INFO:{"name":"m","version":"2"}},"ttlMs":0,"cacheScope":"public"});
        let info = from_discover(d);
        assert_eq!(info.server_info["name"], "m");
        assert_eq!(info.era.to_string(), "modern");
    }

    #[test]
    fn era_evidence_in_refusals_and_discover_answers() {
        let unsupported = |supported: Value| {
            json!({"code": -32022, "message": "no", "data": {"supported": supported}}).to_string()
        };
        assert!(offers_our_version(&unsupported(json!(["2026-07-28"]))));
        assert!(!offers_our_version(&unsupported(json!(["2025-11-25"]))));
        assert!(!offers_our_version(r#"{"code":-32601,"message":"no"}"#));
        assert!(names_modern(
            r#"{"code":-32020,"message":"Missing MCP-Protocol-Version header"}"#
        ));
        assert!(names_modern(r#"{"code":-32022,"message":"no"}"#));
        assert!(!names_modern(r#"{"code":-32601,"message":"no"}"#));
        // An earlier draft's serverInfo, in the result rather than `_meta`.
        let d = json!({"supportedVersions": ["2026-07-28"], "capabilities": {},
            "serverInfo": {"name": "old", "version": "1"}});
        assert_eq!(from_discover(d).server_info["name"], "old");
    }

    #[test]
    fn a_refusal_names_the_code_never_the_backends_words() {
        let error = r#"{"code":-32001,"message":"denied auth=Bearer s3cret","data":"s3cret"}"#;
        let text = refused("initialize", error);
        assert_eq!(text, "backend refused initialize (JSON-RPC error -32001)");
        assert_eq!(
            refused("tools/list", "\"s3cret\""),
            "backend refused tools/list"
        );
        let odd = r#"{"code":"s3cret"}"#;
        assert_eq!(refused("initialize", odd), "backend refused initialize");
    }
}
