//! MCP method names the gateway interprets. Everything else passes through by name.

/// Legacy handshake request.
pub const INITIALIZE: &str = "initialize";
/// Legacy handshake completion notification.
pub const INITIALIZED: &str = "notifications/initialized";
/// Liveness check (both directions, Legacy only).
pub const PING: &str = "ping";
/// Cancellation of an in-flight request.
pub const CANCELLED: &str = "notifications/cancelled";
/// Progress for a request that carried `_meta.progressToken`.
pub const PROGRESS: &str = "notifications/progress";
/// Log message (Legacy: filtered by `logging/setLevel`).
pub const MESSAGE: &str = "notifications/message";
/// Per-session log level (Legacy).
pub const SET_LEVEL: &str = "logging/setLevel";
/// Resource subscription (Legacy).
pub const SUBSCRIBE: &str = "resources/subscribe";
/// Resource unsubscription (Legacy).
pub const UNSUBSCRIBE: &str = "resources/unsubscribe";
/// A subscribed resource changed.
pub const RESOURCE_UPDATED: &str = "notifications/resources/updated";
/// The tool list changed.
pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
/// The resource list changed.
pub const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
/// The prompt list changed.
pub const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
/// Modern capability/version discovery.
pub const DISCOVER: &str = "server/discover";

/// The client requests a 2026-07-28 server may answer with `input_required` (multi-round-trip
/// requests): the ones that can need the client's input before they finish.
pub const INPUT_CAPABLE: &[&str] = &["tools/call", "prompts/get", "resources/read"];
