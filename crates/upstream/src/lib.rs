//! Backends: stdio MCP server processes and remote MCP servers, behind one handle.
//!
//! Architecture invariant: this crate owns processes and connections and knows nothing about
//! the gateway's HTTP server or client sessions. Its API is "send a request under a key, get
//! exactly one answer" ([`Upstream`]), plus an [`InboundSink`] that receives the backend's
//! unsolicited messages (notifications and requests) in the backend's order; `core` implements
//! it and decides what to do with them.

mod answer;
mod credential;
pub mod egress;
mod error;
mod exit;
mod forker;
mod framing;
mod handle;
mod launch;
pub mod openapi;
mod orphan;
pub mod outgoing_auth;
pub mod remote;
pub mod replicated;
pub mod sandbox;
pub mod stdio;
mod supervisor;

pub use answer::{BackendResponse, PendingCall};
pub use credential::Credential;
pub use error::UpstreamError;
pub use exit::Exit;
pub use forker::on_forker;
pub use handle::{spawn_stdio, InboundSink, Upstream, UpstreamOwner};
pub use replicated::{Replicated, MAX_REPLICAS};
pub use stdio::{spawn, StdioConfig, StdioHandle, StdioProcess};
pub use supervisor::{supervise, Stop};
