//! The operator flags: backend probes, circuit breakers, readiness, `/status` access, where
//! `/metrics` is served and where traces go. Their config-file keys are `health:`,
//! `metrics:` and `traces:` (`config::merge`); the flag wins.

use std::time::Duration;

use clap::{Args, ValueEnum};

use switchboard_core::{BreakerConfig, HealthConfig, ReadyWhen};

use crate::cli::GatewayArgs;

#[derive(Debug, Clone, Args)]
pub(crate) struct OpsArgs {
    /// Seconds between two health probes of a backend (an MCP `ping`, or `server/discover`
    /// for a Modern-only backend).
    #[arg(long, default_value_t = 10.0)]
    pub(crate) probe_interval: f64,
    /// Seconds a probe may wait for its answer (the next one starts an interval after it).
    #[arg(long, default_value_t = 5.0)]
    pub(crate) probe_timeout: f64,
    /// When GET /readyz answers 200: at least one backend healthy (`any`), or every one.
    #[arg(long, value_enum, default_value_t = ReadyArg::Any)]
    pub(crate) ready_when: ReadyArg,
    /// Failures in a row (calls or probes) that open a backend's circuit breaker.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) breaker_failures: u32,
    /// Share of the last 20 calls (at least 10) failing that opens a breaker (0 to 1).
    #[arg(long, default_value_t = 0.5)]
    pub(crate) breaker_failure_rate: f64,
    /// Seconds an open breaker refuses calls before one trial call (or probe) decides.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) breaker_cool_down: f64,
    /// Serve GET /status and GET /stats without authentication (by default they are behind
    /// /mcp's).
    #[arg(long)]
    pub(crate) status_open: bool,
    /// Serve GET /metrics on this address (HOST:PORT) instead of the main listener.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<String>,
    /// Export traces (OTLP/HTTP, JSON) to this collector, e.g. http://127.0.0.1:4318 (spans
    /// go to its /v1/traces). Off when absent.
    #[arg(long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// The `service.name` of exported spans.
    #[arg(long, value_name = "NAME", default_value = "switchboard")]
    pub(crate) otlp_service_name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReadyArg {
    Any,
    All,
}

impl OpsArgs {
    /// The core's settings.
    pub(crate) fn health(&self) -> HealthConfig {
        let interval = GatewayArgs::secs(self.probe_interval);
        HealthConfig {
            probe_interval: interval,
            // A zero deadline would fail every probe.
            probe_timeout: GatewayArgs::secs(self.probe_timeout).max(Duration::from_millis(10)),
            ready_when: match self.ready_when {
                ReadyArg::Any => ReadyWhen::Any,
                ReadyArg::All => ReadyWhen::All,
            },
            breaker: BreakerConfig {
                consecutive_failures: self.breaker_failures,
                // NaN would switch the rate rule off silently (every comparison false).
                failure_rate: if self.breaker_failure_rate.is_nan() {
                    1.0
                } else {
                    self.breaker_failure_rate.clamp(0.01, 1.0)
                },
                cool_down: GatewayArgs::secs(self.breaker_cool_down).max(Duration::from_millis(10)),
                ..BreakerConfig::default()
            },
        }
    }
}
