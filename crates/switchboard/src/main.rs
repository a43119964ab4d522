//! `switchboard`: the MCP gateway binary. Thin: parse the command line, set up logging, and
//! hand off to [`app`] (gateway) or the fixture server.

mod app;
mod auth_config;
mod bench;
mod cli;
mod remote;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use cli::{Cli, Command};

/// mimalloc instead of glibc malloc: the request path allocates on one tokio worker and frees
/// on another, which glibc's arenas handle poorly (measured in BENCHMARKS.md). One binary
/// serves as gateway, fixture and load driver, so all three get it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli);
    let runtime = match runtime_for(&cli.command) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchboard: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => app::run(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Fixture(args) => {
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
            }
        }
    });
    // Do not wait for stray blocking tasks (e.g. a stdin read) on the way out.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchboard: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The gateway and the load driver run on a multi-threaded runtime. The fixture reads one
/// stdin stream and answers from one writer, so it runs on a single thread: a multi-threaded
/// runtime only added work-stealing wake-ups to every request (over 100 µs of CPU per request
/// at concurrency 1, measured).
fn runtime_for(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match command {
        Command::Fixture(_) => tokio::runtime::Builder::new_current_thread(),
        Command::Run(args) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if let Some(n) = args.worker_threads {
                b.worker_threads(usize::from(n));
            }
            b
        }
        Command::Bench(_) => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build()
}

fn init_tracing(cli: &Cli) {
    // Logs go to stderr: stdout is the MCP channel for `fixture`, and carries only the
    // human-readable progress lines for `run`.
    let default = match &cli.command {
        Command::Fixture(_) => "warn",
        Command::Run(_) | Command::Bench(_) => "info",
    };
    let filter =
        EnvFilter::try_from_env("SWITCHBOARD_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
