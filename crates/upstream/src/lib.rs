//! Backends. Today: a stdio MCP server process, shared by every session.
//!
//! Architecture invariant: this crate owns processes and connections and knows nothing about
//! HTTP or client sessions. Its API is "send a request under a key, get exactly one answer",
//! plus an [`InboundSink`] that receives the backend's unsolicited messages (notifications and
//! requests) in stdout order; `core` implements it and decides what to do with them.

mod error;
mod exit;
mod forker;
mod framing;
mod orphan;
pub mod remote;
pub mod stdio;
mod supervisor;

pub use error::UpstreamError;
pub use exit::Exit;
pub use forker::on_forker;
pub use stdio::{
    spawn, BackendResponse, InboundSink, PendingCall, StdioConfig, StdioHandle, StdioProcess,
};
pub use supervisor::supervise;
