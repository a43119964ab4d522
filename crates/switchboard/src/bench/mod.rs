//! `switchboard bench`: an MCP-aware load driver.
//!
//! It drives either a Streamable HTTP endpoint (`--url`, Legacy sessions or Modern stateless
//! requests) or a stdio server directly (`--stdio -- CMD…`, the physical limit a gateway in
//! front of that server can approach), verifies every answer (id and, for `echo`, payload), and
//! reports throughput and latency percentiles. Layout:
//! - [`payload`]: request bodies and answer verification (pure);
//! - [`hist`]: the latency histogram (pure);
//! - [`http`] / [`stdio`]: the two kinds of target;
//! - [`driver`]: the bounded worker loop and progress line;
//! - [`report`]: the human and `--json` output;
//! - [`fanout`]: the separate `--fanout N` listen-stream measurement.

mod conn;
mod driver;
mod fanout;
mod hist;
mod http;
mod payload;
mod procs;
mod report;
mod stdio;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use driver::{Ids, Stop, Target};
use payload::{Era, Template, Verdict};

/// Options of `switchboard bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// MCP Streamable HTTP endpoint to drive (e.g. http://127.0.0.1:8080/mcp).
    #[arg(long, conflicts_with = "stdio", required_unless_present = "stdio")]
    pub(crate) url: Option<String>,
    /// Drive the stdio MCP server given after `--` directly, over one process.
    #[arg(long, requires = "command")]
    pub(crate) stdio: bool,
    /// Legacy sessions to open; requests are spread over them round-robin. Default: one per
    /// concurrent worker. Ignored for `--stdio` (one process, one handshake) and `--era modern`.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) sessions: Option<u64>,
    /// Requests in flight at once (one worker task each).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) concurrency: u64,
    /// Seconds to measure for (default 10 unless --requests is given).
    #[arg(long, conflicts_with = "requests")]
    pub(crate) duration: Option<f64>,
    /// Total requests to measure, spread over the workers.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) requests: Option<u64>,
    /// Seconds of unmeasured load before measuring (connections, caches, allocator warm).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) warmup: f64,
    /// Protocol era of the requests.
    #[arg(long, value_enum, default_value_t = Era::Legacy)]
    pub(crate) era: Era,
    /// Tool to call.
    #[arg(long, default_value = "echo")]
    pub(crate) tool: String,
    /// Tool arguments (a JSON object). For `echo` without `text`, a unique text is added to
    /// every request and checked in its answer.
    #[arg(long)]
    pub(crate) args: Option<String>,
    /// Check answers as the fixture's `echo` whatever `--tool` is called: for a gateway that
    /// renames tools (a `fixture_echo` prefix), so its answers are still verified per request.
    #[arg(long)]
    pub(crate) echo: bool,
    /// Charge the target for the CPU of this process and all its descendants (a gateway and
    /// the backends it spawned) during the measured phase, read from /proc.
    #[arg(long, conflicts_with = "stdio")]
    pub(crate) target_pid: Option<u32>,
    /// Seconds one request may take before it counts as a `timeout` error.
    #[arg(long, default_value_t = 30.0)]
    pub(crate) timeout: f64,
    /// Leave the Legacy sessions open at the end instead of DELETEing them (to measure what
    /// idle sessions cost the server).
    #[arg(long)]
    pub(crate) keep_sessions: bool,
    /// Instead of request load: open this many Legacy sessions with a listen stream (GET) each,
    /// make the backend emit `tools/list_changed` once (the fixture's `trigger` tool), and
    /// report how long it takes to reach every stream.
    #[arg(long, requires = "url", conflicts_with_all = ["requests", "duration", "era"],
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) fanout: Option<u64>,
    /// Print one JSON object to stdout instead of the human-readable report.
    #[arg(long)]
    pub(crate) json: bool,
    /// The stdio server command, after `--`.
    #[arg(last = true)]
    pub(crate) command: Vec<String>,
}

/// Converts user-given seconds, refusing what `Duration` cannot hold.
fn secs(what: &str, v: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v)
        .with_context(|| format!("--{what} must be a non-negative number of seconds"))
}

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let timeout = secs("timeout", args.timeout)?;
    let warmup = secs("warmup", args.warmup)?;
    let stop = match (args.requests, args.duration) {
        (Some(n), _) => Stop::Requests(n),
        (None, Some(d)) => Stop::After(secs("duration", d)?),
        (None, None) => Stop::After(Duration::from_secs(10)),
    };
    let concurrency = usize::try_from(args.concurrency)?;
    let template = Arc::new(Template::new(
        args.era,
        &args.tool,
        args.args.as_deref(),
        args.echo,
    )?);

    if let (Some(n), Some(url)) = (args.fanout, &args.url) {
        let n = usize::try_from(n)?;
        let t = http::HttpTarget::connect(url, Era::Legacy, &args.tool, n, n, timeout)
            .await
            .with_context(|| format!("opening sessions at {url}"))?;
        let t = Arc::new(t);
        let mut report = fanout::run(t.clone(), timeout).await?;
        report["target"] = url.as_str().into();
        if args.json {
            println!("{report}");
        } else {
            println!("{report:#}");
        }
        if !args.keep_sessions {
            t.close_sessions(timeout).await;
        }
        return Ok(());
    }

    let (target, label) = if let Some(url) = &args.url {
        let sessions = usize::try_from(args.sessions.unwrap_or(args.concurrency))?;
        let t =
            http::HttpTarget::connect(url, args.era, &args.tool, sessions, concurrency, timeout)
                .await
                .with_context(|| format!("opening sessions at {url}"))?;
        (Target::Http(t), url.clone())
    } else if args.stdio {
        let t = stdio::StdioTarget::spawn(&args.command, args.era, timeout).await?;
        (
            Target::Stdio(t),
            format!("stdio: {}", args.command.join(" ")),
        )
    } else {
        bail!("give a target: --url URL or --stdio -- CMD…");
    };
    let target = Arc::new(target);
    let ids = Arc::new(Ids::new());

    // One request before any load, so a target that does not speak this era (or this tool)
    // fails with its own words instead of as a wall of identical errors.
    match target.exchange(0, &template, ids.next(), timeout).await {
        Verdict::Ok => {}
        Verdict::Wrong(why) => bail!("the probe request got a wrong answer: {why}"),
        Verdict::Error(kind) => bail!(
            "the probe request failed ({kind}): does {label} serve `{}` over the {} era?",
            template.tool(),
            args.era.as_str()
        ),
    }

    if !warmup.is_zero() {
        driver::run_phase(
            &target,
            &template,
            &ids,
            concurrency,
            Stop::After(warmup),
            timeout,
            "warmup",
        )
        .await;
    }
    let server_pid = match &*target {
        Target::Stdio(t) => t.pid(),
        Target::Http(_) => None,
    };
    let cpu = procs::process_cpu;
    let tree = || args.target_pid.and_then(procs::tree_cpu);
    let before = (cpu(None), server_pid.and_then(|p| cpu(Some(p))), tree());
    let outcome =
        driver::run_phase(&target, &template, &ids, concurrency, stop, timeout, "run").await;
    let spent = |after: Option<Duration>, before: Option<Duration>| {
        after.zip(before).map(|(a, b)| a.saturating_sub(b))
    };
    let client_cpu = spent(cpu(None), before.0);
    let server_cpu = spent(server_pid.and_then(|p| cpu(Some(p))), before.1);
    let target_tree = tree()
        .zip(before.2)
        .map(|((a, n), (b, _))| (a.saturating_sub(b), n));

    let sessions = match &*target {
        Target::Http(t) => t.session_count(),
        Target::Stdio(_) => usize::from(args.era == Era::Legacy),
    };
    let stray = match &*target {
        Target::Stdio(t) => t.stray(),
        Target::Http(_) => 0,
    };
    let report = report::Report {
        target: label,
        era: args.era,
        tool: template.tool().to_owned(),
        concurrency,
        sessions,
        warmup_secs: warmup.as_secs_f64(),
        stray,
        client_cpu,
        server_cpu,
        target_tree,
        outcome,
    };
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.human());
    }

    match Arc::try_unwrap(target) {
        Ok(Target::Stdio(t)) => t.shutdown().await,
        Ok(Target::Http(t)) if !args.keep_sessions => t.close_sessions(timeout).await,
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    #[test]
    fn url_target_with_options() {
        let a = parse(&[
            "--url",
            "http://127.0.0.1:1/mcp",
            "--sessions",
            "10000",
            "--concurrency",
            "64",
            "--duration",
            "2.5",
            "--era",
            "modern",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.url.as_deref(), Some("http://127.0.0.1:1/mcp"));
        assert_eq!(
            (a.sessions, a.concurrency, a.duration),
            (Some(10000), 64, Some(2.5))
        );
        assert_eq!(a.era, Era::Modern);
        assert!(a.json && !a.stdio && a.command.is_empty());
        assert_eq!(a.tool, "echo");
    }

    #[test]
    fn stdio_target_takes_the_command_after_dashes() {
        let a = parse(&["--stdio", "--requests", "5", "--", "srv", "--flag", "x"]).unwrap();
        assert!(a.stdio);
        assert_eq!(a.command, ["srv", "--flag", "x"]);
        assert_eq!(a.requests, Some(5));
        assert_eq!(a.warmup, 1.0);
    }

    #[test]
    fn refuses_contradictions() {
        // No target, both targets, stdio without a command, both stop conditions, zero workers.
        assert!(parse(&["--requests", "5"]).is_err());
        assert!(parse(&["--url", "http://x/mcp", "--stdio", "--", "srv"]).is_err());
        assert!(parse(&["--stdio"]).is_err());
        assert!(parse(&["--url", "u", "--requests", "5", "--duration", "1"]).is_err());
        assert!(parse(&["--url", "u", "--concurrency", "0"]).is_err());
        assert!(parse(&["--url", "u", "--era", "future"]).is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(secs("x", 1.5).unwrap(), Duration::from_millis(1500));
        assert!(secs("x", -1.0).is_err());
        assert!(secs("x", f64::NAN).is_err());
    }
}
