//! `switchboard`: the MCP gateway binary. Thin: parse the command line, set up logging, and
//! hand off to [`app`] (gateway), [`config`] (`validate`, `init`) or the fixture server.

mod app;
mod auth_config;
mod bench;
mod cli;
mod config;
mod config_vars;
mod doctor;
mod guardrails;
mod ops_args;
mod reload;
mod remote;
mod replica;
mod running;
mod session_store;
mod start_backends;
mod start_replicas;
mod token_store;
mod tokens_cli;
mod traces;
mod trust_cli;

use std::future::Future;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use tracing_subscriber::EnvFilter;

use cli::{Cli, Command};

/// mimalloc instead of glibc malloc: the request path allocates on one tokio worker and frees
/// on another, which glibc's arenas handle poorly (measured in BENCHMARKS.md). One binary
/// serves as gateway, fixture and load driver, so all three get it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Parsed through `ArgMatches` so `serve` can tell a flag given on the command line (which
    // overrides the config file) from a default.
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    init_tracing(&cli);
    match cli.command {
        // These never serve, so they need no async runtime.
        Command::Validate(args) => exit(config::validate(&args)),
        Command::Init(args) => exit(config::init(&args)),
        Command::Trust(args) => exit(trust_cli::run(&args)),
        Command::Serve(args) => {
            let sub = matches.subcommand_matches("serve");
            let given =
                |id: &str| sub.and_then(|m| m.value_source(id)) == Some(ValueSource::CommandLine);
            // The files are read before the runtime starts: its size may come from them.
            match config::serve_spec(args, &given) {
                Ok(spec) => {
                    let threads = spec.options.worker_threads;
                    block_on(multi_thread(threads), app::serve(spec))
                }
                Err(e) => exit(Err(e)),
            }
        }
        Command::Run(args) => {
            let threads = args.gateway.worker_threads;
            block_on(multi_thread(threads), app::run(args))
        }
        Command::Bench(args) => block_on(multi_thread(None), bench::run(args)),
        Command::Doctor(args) => block_on(multi_thread(None), doctor::run(args)),
        Command::Tokens(args) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            block_on(rt, tokens_cli::run(args))
        }
        Command::SandboxBridge(args) => bridge(&args),
        Command::Fixture(args) => {
            // The fixture reads one stdin stream and answers from one writer, so it runs on a
            // single thread: a multi-threaded runtime only added work-stealing wake-ups to
            // every request (over 100 µs of CPU per request at concurrency 1, measured).
            // Over HTTP, `--threads N` asks for N workers: the HTTP floor on many cores.
            let rt = match args.threads {
                Some(n) => multi_thread(Some(n)),
                None => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build(),
            };
            block_on(rt, async move {
                let opts = switchboard_fixture::FixtureOptions {
                    era: args.era.into(),
                };
                let served = if args.http {
                    let http = switchboard_fixture::HttpOptions {
                        host: args.host,
                        port: args.port,
                    };
                    switchboard_fixture::run_http(opts, http).await
                } else {
                    switchboard_fixture::run_stdio(opts).await
                };
                served.map_err(anyhow::Error::from)
            })
        }
    }
}

/// The bridge in a sandbox (`switchboard_upstream::egress::bridge`): one thread (it counts
/// against the backend's process limit), the backend's exit status as its own.
fn bridge(args: &cli::BridgeArgs) -> std::process::ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let Some((program, rest)) = args.command.split_first() else {
        return std::process::ExitCode::FAILURE;
    };
    let ran = rt.and_then(|rt| {
        rt.block_on(switchboard_upstream::egress::bridge::run(
            &args.socket,
            program,
            rest,
        ))
    });
    match ran {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("switchboard sandbox-bridge: {e}");
            std::process::ExitCode::from(70)
        }
    }
}

/// The gateway and the load driver run on a multi-threaded runtime.
fn multi_thread(worker_threads: Option<u16>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads {
        b.worker_threads(usize::from(n));
    }
    b.enable_all().build()
}

fn block_on(
    runtime: std::io::Result<tokio::runtime::Runtime>,
    work: impl Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchboard: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(work);
    // Do not wait for stray blocking tasks (e.g. a stdin read) on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    exit(result)
}

fn exit(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchboard: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_tracing(cli: &Cli) {
    // Logs go to stderr: stdout is the MCP channel for `fixture`, and carries only the
    // human-readable progress lines for `run`.
    let default = match &cli.command {
        Command::Fixture(_) => "warn",
        Command::Validate(_)
        | Command::Init(_)
        | Command::Trust(_)
        | Command::Tokens(_)
        | Command::Doctor(_)
        | Command::SandboxBridge(_) => "warn",
        Command::Run(_) | Command::Serve(_) | Command::Bench(_) => "info",
    };
    let filter =
        EnvFilter::try_from_env("SWITCHBOARD_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    match cli.log_format {
        cli::LogFormat::Text => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        // Fields flattened to the top level, so `session` (always a label, never the id),
        // `backend` and `error` are plain keys a pipeline can index.
        cli::LogFormat::Json => fmt.json().flatten_event(true).with_ansi(false).init(),
    }
}
