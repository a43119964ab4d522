//! Switchboard's routing core: sessions, route keys, id restore, and the policy for every
//! message a backend sends on its own.
//!
//! Architecture invariants:
//! - Only this crate decides who receives a backend message, and it decides by gateway-minted
//!   keys ([`route::RouteKey`], [`SessionId`], minted progress tokens), never by anything a
//!   client chose.
//! - No HTTP types here: `http` calls [`Gateway`] with parsed envelopes and maps [`CoreError`]
//!   to status codes.

pub mod access;
pub mod audit;
mod backend;
mod backend_id;
mod backends;
pub mod catalog;
mod client_ask;
mod destination;
mod dispatch;
mod drop_log;
mod error;
mod exchange;
mod gateway;
pub mod guardrails;
pub mod health;
mod in_flight;
mod legacy_sse;
mod listen_stream;
mod logging;
mod metrics;
mod modern;
mod modern_listen;
mod mrtr;
mod per_session;
mod pipeline;
mod principal;
mod progress;
pub mod ratelimit;
mod reaper;
mod registry;
mod relay;
mod reload;
mod resolve;
pub mod route;
mod send;
pub mod session;
mod session_ops;
mod session_store;
mod snapshot;
pub mod stream_queue;
mod subscription;
mod tasks;
mod tool_headers;
mod tool_search;
mod trace;
pub mod trust;
mod vmcp;
pub mod workflow;

pub use access::{Access, Authorizer, Origin, Target, Unauthenticated};
pub use backend::{Backend, BackendEra, BackendInfo, EraPolicy};
pub use backend_id::{BackendId, BackendIdError, MAX_BACKEND_ID};
pub use backends::Backends;
pub use error::{BackendFault, CoreError, Gone, ReplicaAt};
pub use exchange::{Answer, Era, Exchange, Initialized};
pub use gateway::{ClientSessions, Gateway, GatewayConfig, Operator, SseEndpoint, SseInit};
pub use health::{BreakerConfig, HealthConfig, HealthState, ReadyWhen};
pub use legacy_sse::{
    SseInitClaim, SseSession, SseStreams, SSE_ANSWER_BYTES, SSE_MAX_REQUESTS, SSE_QUEUE,
    SSE_QUEUE_BYTES,
};
pub use listen_stream::{ListenEvent, ListenStream, LISTEN_QUEUE_BYTES, REPLAY_BYTES};
pub use metrics::hop as record_hop;
pub use metrics::store_call as record_store_call;
pub use per_session::SpawnBackend;
pub use pipeline::Plan;
pub use principal::Principal;
pub use progress::{REQUEST_STREAM, REQUEST_STREAM_BYTES, REQUEST_STREAM_QUEUE};
pub use registry::{PeerDelivery, Registry};
pub use reload::{Reload, ReloadOutcome, Reshape, Reshaped, Retiring};
pub use session::{ClientCaps, ClientReply, MAX_ASKS};
pub use session::{SessionId, Transport};
pub use session_ops::{BackendInstance, Upkeep};
pub use session_store::{
    new_replica_id, Presence, SessionRecords, SessionStore, StoreError, STORE_TIMEOUT,
};
pub use switchboard_upstream::outgoing_auth::oauth;
pub use switchboard_upstream::outgoing_auth::OutgoingAuthError;
pub use switchboard_upstream::remote::RemoteError;
pub use switchboard_upstream::Credential;
pub use switchboard_upstream::UpstreamError;
pub use tasks::unknown_task;
pub use vmcp::{FailureMode, RenamedName, VmcpConfig};
