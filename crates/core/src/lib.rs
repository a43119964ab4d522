//! Switchboard's routing core: sessions, route keys, id restore, and the policy for every
//! message a backend sends on its own.
//!
//! Architecture invariants:
//! - Only this crate decides who receives a backend message, and it decides by gateway-minted
//!   keys ([`route::RouteKey`], [`session::SessionId`]), never by anything a client chose.
//! - No HTTP types here: `http` calls [`Gateway`] with parsed envelopes and maps [`CoreError`]
//!   to status codes.

mod backend;
mod dispatch;
mod drop_log;
mod error;
mod gateway;
pub mod route;
pub mod session;

pub use backend::{Backend, BackendInfo};
pub use error::CoreError;
pub use gateway::{Gateway, GatewayConfig, Initialized};
pub use session::SessionId;
pub use switchboard_upstream::UpstreamError;
