//! The command line (the CLI contract in DESIGN.md).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Switchboard: one MCP endpoint in front of your MCP servers.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// How log lines on stderr are written: `text` for people, `json` (one object per line,
    /// with its fields and span context) for a log pipeline.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

/// The `--session-store-fallback` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StoreFallback {
    Refuse,
    Memory,
}

/// The `--log-format` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Front an MCP server at http://HOST:PORT/mcp: a stdio command (the built-in fixture if
    /// none) or a remote one (`--url`).
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Serve the backends of a config file (or of an `mcpServers` JSON file) at
    /// http://HOST:PORT/mcp. Flags override the file.
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Check a config file: every error with its path, or a summary of what it serves.
    Validate(ValidateArgs),
    /// Write a config file from the `mcpServers` JSON of Claude Desktop, Cursor, VS Code or
    /// `.mcp.json`.
    Init(InitArgs),
    /// Check a config file and this host, then start each backend once and print a table of
    /// handshake times and eras (exit 1 if anything fails).
    Doctor(crate::doctor::DoctorArgs),
    /// Run the built-in fixture MCP server on stdin/stdout.
    Fixture(FixtureArgs),
    /// Drive an MCP endpoint (or a stdio server directly) with load and report throughput and
    /// latency.
    Bench(crate::bench::BenchArgs),
    /// List, approve or revoke tool pins in a trust state file (a running `serve` picks the
    /// change up within a second).
    Trust(crate::trust_cli::TrustCmdArgs),
    /// List or revoke callers' upstream tokens in the session store's Redis (`sessionStore`
    /// with `tokenStore.encryptionKeyFile`; without them tokens live in the gateway's memory).
    Tokens(crate::tokens_cli::TokensCmdArgs),
    /// Inside a sandbox with a network allow list: bridge 127.0.0.1 to the egress proxy's
    /// socket and run the backend behind it (the gateway starts this itself).
    #[command(name = "sandbox-bridge", hide = true)]
    SandboxBridge(BridgeArgs),
}

/// `sandbox-bridge --socket PATH -- PROGRAM [ARGS…]`.
#[derive(Debug, Args)]
pub(crate) struct BridgeArgs {
    /// The egress proxy's Unix socket.
    #[arg(long)]
    pub(crate) socket: PathBuf,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) command: Vec<std::ffi::OsString>,
}

const RUN_EXAMPLES: &str = "\
Examples:
  # The built-in fixture server on http://127.0.0.1:8080/mcp
  switchboard run

  # A stdio MCP server; clients use /mcp (Streamable HTTP) or /sse (HTTP+SSE, 2024-11-05)
  switchboard run --port 9000 -- npx -y @modelcontextprotocol/server-everything

  # One backend process per session, with its own environment and working directory
  switchboard run --isolation per-session --env API_TOKEN=secret --env LOG=debug \\
      --cwd /srv/tools -- python3 server.py

  # A remote MCP server; each client session gets its own upstream session
  TOKEN=... switchboard run --url https://mcp.example.com/mcp \\
      --header 'Authorization: Bearer ${TOKEN}'

  # Liveness for a load balancer or orchestrator
  curl http://127.0.0.1:8080/healthz";

/// `run`: the gateway's options and one backend, given on the command line.
const SERVE_EXAMPLES: &str = "\
Examples:
  # Convert the servers you already use, then serve them on one endpoint
  switchboard init --from-mcp-json ~/.config/Claude/claude_desktop_config.json
  switchboard serve --config switchboard.yaml

  # Serve an mcpServers file as it is
  switchboard serve --mcp-json .mcp.json --port 9000";

/// `serve`: the backends come from a file; the gateway flags are `run`'s.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The config file (YAML; schema/switchboard.schema.json).
    #[arg(long, value_name = "FILE", required_unless_present = "mcp_json")]
    pub(crate) config: Option<PathBuf>,
    /// Serve the servers of an `mcpServers` (or VS Code `servers`) JSON file directly.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub(crate) mcp_json: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) gateway: GatewayArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// The config file to check.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// Fail (exit 1) when this host lacks something the file needs: a command not on PATH,
    /// a URL that does not parse, a missing file, a secret file others may read. Without it
    /// those are warnings (the file may be meant for another machine).
    #[arg(long)]
    pub(crate) strict: bool,
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// The `mcpServers` JSON to convert.
    #[arg(long, value_name = "FILE")]
    pub(crate) from_mcp_json: PathBuf,
    /// Where to write the config. Its secrets go beside it, in `<stem>.secrets.env` (mode
    /// 0600).
    #[arg(long, value_name = "PATH", default_value = "switchboard.yaml")]
    pub(crate) out: PathBuf,
    /// Replace the config and secrets files if they exist.
    #[arg(long)]
    pub(crate) force: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) gateway: GatewayArgs,
    /// An environment variable for the backend process, KEY=VALUE (repeatable); added to the
    /// gateway's own environment, which the backend inherits.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub(crate) env: Vec<(String, String)>,
    /// Working directory of the backend process (default: the gateway's).
    #[arg(long, value_name = "DIR")]
    pub(crate) cwd: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) remote: Box<crate::remote::RemoteArgs>,
    /// A YAML file with a `guardrails:` list, as in a config file (docs/guardrails.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) guardrails: Option<std::path::PathBuf>,
    /// The stdio MCP server to front, after `--`.
    #[arg(last = true)]
    pub(crate) command: Vec<String>,
}

/// Everything about the gateway itself (not its backend): shared by `run` and `serve`, where a
/// flag given on the command line overrides the config file.
#[derive(Debug, Args)]
pub(crate) struct GatewayArgs {
    /// Address to listen on. Loopback by default; a non-loopback address needs authentication
    /// (or `--allow-anonymous-non-loopback`).
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: String,
    /// Port to listen on; 0 picks a free one (printed on startup).
    #[arg(long, default_value_t = 8080)]
    pub(crate) port: u16,
    /// How backend processes are shared between clients.
    #[arg(long, value_enum, default_value_t = Isolation::Shared)]
    pub(crate) isolation: Isolation,
    /// Seconds a request may wait for the backend before it is failed with 504.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) request_timeout: f64,
    /// Seconds a request may take in all, from its start: progress from the backend restarts
    /// --request-timeout, up to this bound.
    #[arg(long, default_value_t = 3600.0)]
    pub(crate) max_request_time: f64,
    /// Seconds of inactivity after which a session expires.
    #[arg(long, default_value_t = 1800.0)]
    pub(crate) session_ttl: f64,
    /// Most concurrent sessions (more get 503). Default: 100000 in shared mode; 256 in
    /// per-session mode, where each session is a process.
    #[arg(long)]
    pub(crate) max_sessions: Option<usize>,
    /// Most concurrent sessions one authenticated principal may hold; more get HTTP 429.
    /// Default: no per-principal limit (only --max-sessions).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_sessions_per_principal: Option<u64>,
    /// Per-session mode: most Modern calls one principal may have running on dedicated
    /// backend processes or parked waiting for client input (MRTR); more get HTTP 429 with
    /// `retryAfterSeconds`. Default: an eighth of that pool (min(128, --max-sessions)), at
    /// least 1. Anonymous callers are one principal.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) mrtr_per_principal: Option<u64>,
    /// Per-session mode: seconds a warm backend process for a principal's Modern requests may
    /// stay unused before it is stopped.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) partition_idle: f64,
    /// Seconds a sealed `requestState` the gateway relays from a Modern backend to a Modern
    /// client stays valid (whole seconds, 1 to 86400: its nonce is remembered that long).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub(crate) relay_state_ttl: u64,
    /// Keep Streamable HTTP sessions in Redis, `redis://[:PASSWORD@]HOST:PORT[/DB]`, so any
    /// replica on the same Redis serves any session and a restart loses none (default: in
    /// memory, this process only). The password may instead come from
    /// `SWITCHBOARD_SESSION_STORE_PASSWORD` or `--session-store-password-file`.
    #[arg(long, value_name = "URL")]
    pub(crate) session_store: Option<String>,
    /// A file whose first line is the session store's password (mode 0600 or stricter).
    #[arg(long, value_name = "FILE")]
    pub(crate) session_store_password_file: Option<std::path::PathBuf>,
    /// Prefix of the session store's keys (replicas of one deployment share it; another
    /// deployment on the same Redis uses its own).
    #[arg(long, value_name = "PREFIX", default_value = "switchboard")]
    pub(crate) session_store_prefix: String,
    /// When the session store cannot take a new session (Redis down): `refuse` it (503, the
    /// client retries) or serve it from `memory`, this process only (lost if it restarts).
    #[arg(long, value_enum, default_value_t = StoreFallback::Refuse)]
    pub(crate) session_store_fallback: StoreFallback,
    /// With `--session-store`: a file whose first line is the secret every replica of the
    /// deployment shares (at least 32 bytes, mode 0600), so replicas forward requests to the
    /// one serving a session — needed for backends that give each session an upstream of its
    /// own (`--isolation per-session`, Legacy-only remotes), and for resuming a listen
    /// stream through another replica. Or `SWITCHBOARD_REPLICA_SECRET`.
    #[arg(long, value_name = "FILE")]
    pub(crate) replica_secret_file: Option<std::path::PathBuf>,
    /// The token vault's key: a file of exactly 32 random bytes, mode 0600 or stricter
    /// (`tokenStore.encryptionKeyFile`). Per-user upstream tokens are sealed with it, in
    /// memory or (with `--session-store`) in Redis, where every replica needs the same key.
    /// Without it a random key is used, held in memory: tokens are lost on restart.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_store_key_file: Option<std::path::PathBuf>,
    /// Where the other replicas reach this one for forwarded requests, `http://HOST:PORT`
    /// (default: the address it listens on, when that is not a wildcard such as 0.0.0.0).
    #[arg(long, value_name = "URL")]
    pub(crate) replica_url: Option<String>,
    /// Seconds a write to a client may make no progress before the connection is closed: a
    /// client that keeps a stream open but reads nothing would otherwise pin what is queued
    /// for it (and an HTTP+SSE session) for as long as it stays connected.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) send_timeout: f64,
    /// Seconds a client may take to send a request's headers, from their first byte (from
    /// the accept for a connection's first request); slower connections are closed.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) header_read_timeout: f64,
    /// Seconds a connection may stay open with no request in progress (a response being
    /// streamed, SSE included, is one); then it is closed.
    #[arg(long, default_value_t = 120.0)]
    pub(crate) idle_timeout: f64,
    /// Most open client connections. At the bound the oldest idle one is closed to make room;
    /// when all are busy a new one gets 503. Default: 10000, or fewer if the open-file limit
    /// (`ulimit -n`) minus what the backends need does not allow that many.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_connections: Option<u64>,
    /// Most POSTs being handled or streaming their answer at once; more get 503 at once.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) max_in_flight: usize,
    /// Largest accepted request body in bytes.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub(crate) max_body_bytes: usize,
    /// Longest accepted backend stdout line in bytes.
    #[arg(long, default_value_t = 16 * 1024 * 1024)]
    pub(crate) max_line_bytes: usize,
    /// Seconds a backend process may take to answer initialize: the shared one at startup,
    /// and each session's own in per-session mode.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) startup_timeout: f64,
    /// Per-session mode: seconds a session may live without the listen stream it had opened
    /// (and with nothing in flight) before it and its process are reaped.
    #[arg(long, default_value_t = 60.0)]
    pub(crate) listen_grace: f64,
    /// Seconds in-flight requests get to finish on shutdown.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) shutdown_grace: f64,
    /// Seconds between keep-alive comments on SSE streams.
    #[arg(long, default_value_t = 15.0)]
    pub(crate) keep_alive: f64,
    /// Accepted `Host` names (comma-separated; `*` accepts any). Default: loopback names when
    /// bound to loopback, any otherwise.
    #[arg(long, value_delimiter = ',')]
    pub(crate) allowed_hosts: Vec<String>,
    /// Accepted `Origin`s (`scheme://host[:port]` or bare host names; `*` accepts any).
    /// Default as for `--allowed-hosts`.
    #[arg(long, value_delimiter = ',')]
    pub(crate) allowed_origins: Vec<String>,
    /// Path prefix for the HTTP+SSE `endpoint` event's URI (`<prefix>/messages?session_id=…`),
    /// for a gateway mounted under a path by a reverse proxy that strips it.
    #[arg(long, default_value = "", value_parser = parse_prefix)]
    pub(crate) endpoint_prefix: String,
    /// Take that prefix from the request's `X-Forwarded-Prefix` header instead. Only behind a
    /// proxy that sets (or strips) the header: otherwise clients choose it.
    #[arg(long)]
    pub(crate) trust_forwarded_prefix: bool,
    #[command(flatten)]
    pub(crate) auth: Box<crate::auth_config::AuthArgs>,
    #[command(flatten)]
    pub(crate) ops: crate::ops_args::OpsArgs,
    #[command(flatten)]
    pub(crate) trust: crate::trust_cli::TrustArgs,
    /// Async worker threads (default: one per CPU core). On a small machine the gateway shares
    /// with its backends, fewer threads cost less CPU per request (fewer cross-thread
    /// wake-ups); BENCHMARKS.md has the numbers.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) worker_threads: Option<u16>,
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got `{raw}`")),
    }
}

fn parse_prefix(raw: &str) -> Result<String, String> {
    switchboard_http::clean_prefix(raw)
        .ok_or_else(|| "expected an absolute path like /gateway (plain path characters)".to_owned())
}

impl GatewayArgs {
    pub(crate) fn secs(v: f64) -> Duration {
        Duration::try_from_secs_f64(v.max(0.001))
            .unwrap_or(Duration::from_secs(u64::from(u32::MAX)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Isolation {
    /// One backend process multiplexed by every session.
    Shared,
    /// One backend process per Legacy session (sampling, elicitation, roots and logging reach
    /// their session); sessionless requests use a shared process, Modern ones (Legacy-only
    /// backend) a warm process per principal and declared capabilities.
    PerSession,
}

#[derive(Debug, Args)]
pub(crate) struct FixtureArgs {
    /// Which protocol eras the fixture speaks.
    #[arg(long, value_enum, default_value_t = Era::Dual)]
    pub(crate) era: Era,
    /// Serve over HTTP instead of stdio: Streamable HTTP at /mcp, HTTP+SSE at /sse.
    #[arg(long)]
    pub(crate) http: bool,
    /// Address to bind with --http.
    #[arg(long, default_value = "127.0.0.1", requires = "http")]
    pub(crate) host: String,
    /// Port to bind with --http (0: any free port; the bound URL is printed).
    #[arg(long, default_value_t = 0, requires = "http")]
    pub(crate) port: u16,
    /// With --http: serve on N worker threads (a multi-threaded runtime), so the HTTP floor
    /// scales with cores like a gateway can; default one thread. 1 to 1024.
    #[arg(long, value_name = "N", requires = "http",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) threads: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Era {
    /// Both 2025-11-25 sessions and 2026-07-28 stateless requests.
    Dual,
    /// Only the `initialize` handshake era.
    Legacy,
    /// Only 2026-07-28.
    Modern,
}

impl From<Era> for switchboard_fixture::Era {
    fn from(e: Era) -> Self {
        match e {
            Era::Dual => switchboard_fixture::Era::Dual,
            Era::Legacy => switchboard_fixture::Era::LegacyOnly,
            Era::Modern => switchboard_fixture::Era::ModernOnly,
        }
    }
}
