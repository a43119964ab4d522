//! Pure JSON-RPC / MCP wire vocabulary for Switchboard.
//!
//! Architecture invariant: this crate does no I/O and knows no async runtime. Everything here is
//! a function from bytes to values or values to bytes, so it can be unit-tested, fuzzed and
//! reused by every transport.
//!
//! The forwarding path parses only the *envelope* of a message ([`Message::parse`]): `jsonrpc`,
//! `id`, `method`, and the positions of `params` / `result` / `error` as raw JSON. Payloads are
//! never decoded into typed structures, so an unknown method or a new field passes through
//! untouched, and ids round-trip byte-for-byte ([`RequestId`]).

pub mod classify;
mod encode;
mod envelope;
mod error;
mod find;
pub mod headers;
mod id;
mod marks;
mod members;
pub mod method;
pub mod plain;
pub mod sse;
pub mod sse_decode;
mod strict;
pub mod version;

pub use encode::{
    encode_error, encode_notification, encode_request, encode_result, restore_response,
};
pub use envelope::{
    has_key_variant, has_member, null_id_error, object_member, Message, MessageKind,
    MAX_CLIENT_DEPTH,
};
pub use error::{codes, ErrorObject, ParseError};
pub use id::RequestId;
pub use marks::ResultMarks;
pub use members::{retain_members, with_member, with_members, with_meta_member};
pub use strict::{holds_reserved_key, keys_fold_equal, keys_read_one_way, reads_one_way};
