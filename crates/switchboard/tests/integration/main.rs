//! End-to-end tests: the real `switchboard` binary on 127.0.0.1 port 0, its real backend
//! process, driven by raw HTTP and by rmcp's client.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unreachable_pub,
    missing_debug_implementations
)]

mod common;
mod startup;
mod stdout_log;

mod acting;
mod auth;
mod backend_failure;
mod backend_replicas;
mod bench;
mod breaker;
mod cli;
mod config_file;
mod connections;
mod direct_post;
mod everything;
mod fixture_http;
mod fixture_tasks;
mod guardrails;
mod handshake;
mod health;
mod isolation;
mod jwks_log;
mod leaks;
mod legacy_sse;
mod lifecycle;
mod log_format;
mod malformed;
mod modern;
mod mrtr;
mod openapi;
mod openapi_sdk;
mod ops_status;
mod per_session;
mod per_session_sse;
mod quiet_logs;
mod real_remotes;
mod relay;
mod reload;
mod remote_client;
mod remote_era;
mod remote_resume;
mod remote_sse_client;
mod remote_upstream;
mod replicas;
mod resilience;
mod resume;
mod rmcp_client;
mod sandbox;
mod server_push;
mod strict;
mod task_watch;
mod tasks;
mod tokens;
mod tool_headers;
mod traces;
mod trust;
mod ui;
mod ux;
mod vmcp;
mod vmcp_answers;
mod warm;
