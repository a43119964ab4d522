//! Backends. Today: a stdio MCP server process, shared by every session.
//!
//! Architecture invariant: this crate owns processes and connections and knows nothing about
//! HTTP or client sessions. Its API is "send a request under a key, get exactly one answer" plus
//! a bounded stream of the backend's unsolicited messages (notifications and requests), which
//! `core` decides what to do with.

mod error;
mod framing;
pub mod stdio;

pub use error::UpstreamError;
pub use stdio::{
    spawn, BackendResponse, Inbound, PendingCall, StdioConfig, StdioHandle, StdioProcess,
};
