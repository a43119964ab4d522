//! `switchboard doctor [CONFIG]`: `validate`'s checks, this host's (`config::host`), then a
//! live start of each backend through the gateway's own startup code (`start_all`, one
//! backend at a time so each gets its own timing), printed as a table with the handshake
//! time and era; every started backend is stopped again. Exit 1 when anything failed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Parser};

use crate::cli::{Cli, Command};
use crate::config::spec::BackendKind;
use crate::start_backends::{start_all, Origin, Shape, StartedSet};

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The config file to check and start (YAML, as `serve --config`).
    #[arg(value_name = "CONFIG", default_value = "switchboard.yaml")]
    pub(crate) config: PathBuf,
}

/// One backend's line of the table.
struct Row {
    name: String,
    kind: &'static str,
    handshake: Option<Duration>,
    era: String,
    outcome: Result<String, String>,
}

pub(crate) async fn run(args: DoctorArgs) -> anyhow::Result<()> {
    let loaded = crate::config::load(&args.config)?;
    println!("{}: valid", loaded.source_name);
    let findings = crate::config::host::findings(&loaded);
    for f in &findings {
        println!("problem: {f}");
    }
    drop(loaded);
    // The file read as `serve` reads it, with `serve`'s defaults for every flag.
    let path = args.config.to_string_lossy().into_owned();
    let Command::Serve(serve) =
        Cli::try_parse_from(["switchboard", "serve", "--config", &path])?.command
    else {
        anyhow::bail!("cannot read {path} as serve does");
    };
    let spec = crate::config::serve_spec(serve, &|_| false)?;
    let options = &spec.options;
    let shape = Shape::of_all(&spec.backends, true);
    let registry = crate::app::gateway_config(options, shape).registry();
    let homes = switchboard_upstream::sandbox::Homes::default();
    homes.add(crate::start_backends::sandbox_homes(&spec.backends));
    let starts = spec.backends.iter().map(|b| {
        let (homes, registry) = (&homes, &registry);
        async move {
            let kind = match &b.kind {
                BackendKind::Stdio(_) => "stdio",
                BackendKind::Remote(_) => "remote",
                BackendKind::OpenApi(_) => "openapi",
            };
            let mut row = Row {
                name: b.name.to_string(),
                kind,
                handshake: None,
                era: "-".to_owned(),
                outcome: Err(String::new()),
            };
            let origin = match Origin::of(options, b, homes) {
                Ok(o) => o,
                Err(e) => {
                    row.outcome = Err(format!("{e:#}"));
                    return row;
                }
            };
            let began = Instant::now();
            match start_all(options, vec![(b.name.clone(), origin)], true, registry).await {
                Ok(set) => {
                    row.handshake = Some(began.elapsed());
                    record(&mut row, set).await;
                }
                Err(e) => row.outcome = Err(why(&e)),
            }
            row
        }
    });
    let rows = futures::future::join_all(starts).await;
    print!("{}", table(&rows));
    let failed = rows.iter().filter(|r| r.outcome.is_err()).count();
    if failed > 0 || !findings.is_empty() {
        anyhow::bail!(
            "{failed} backend(s) did not start, {} problem(s) on this host",
            findings.len()
        );
    }
    println!("all {} backend(s) started", rows.len());
    Ok(())
}

/// What one backend's start gave, and the backend stopped again.
async fn record(row: &mut Row, mut set: StartedSet) {
    if let Some((_, e)) = set.failed.pop() {
        row.handshake = None;
        row.outcome = Err(why(&e));
    } else if let Some((_, backend)) = set.backends.first() {
        row.era = backend.info.era.to_string();
        let server = &backend.info.server_info;
        let name = server["name"].as_str().unwrap_or("?");
        let version = server["version"].as_str().unwrap_or("?");
        row.outcome = Ok(format!(
            "ok: {name} {version}, protocol {}",
            backend.info.protocol_version
        ));
    }
    StartedSet::shutdown(set.processes, set.internals).await;
}

fn table(rows: &[Row]) -> String {
    let width = rows
        .iter()
        .map(|r| r.name.len())
        .chain(["BACKEND".len()])
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "{:width$}  {:7}  {:>9}  {:6}  RESULT\n",
        "BACKEND", "KIND", "HANDSHAKE", "ERA"
    );
    for r in rows {
        let time = r
            .handshake
            .map_or_else(|| "-".to_owned(), |d| format!("{} ms", d.as_millis()));
        let outcome = match &r.outcome {
            Ok(text) => text.clone(),
            Err(why) => format!("FAILED: {}", one_line(why)),
        };
        out += &format!(
            "{:width$}  {:7}  {:>9}  {:6}  {outcome}\n",
            r.name, r.kind, time, r.era
        );
    }
    out
}

/// A start's error without its first context (`backend NAME`, which the row says), each
/// cause once (an error that quotes its source is not followed by it again).
fn why(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain().skip(1).map(|c| c.to_string()) {
        if out.contains(&cause) {
            continue;
        }
        if !out.is_empty() {
            out += ": ";
        }
        out += &cause;
    }
    if out.is_empty() {
        e.to_string()
    } else {
        out
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
