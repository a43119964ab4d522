//! Cost of the client parse (`Message::parse_client`) against the plain envelope parse, on
//! three bodies: a small `tools/call`, one with 4 KiB of nested arguments, one of 256 KiB.
//! `cargo run --release -p switchboard-wire --example parse_cost` (see BENCHMARKS.md).
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::hint::black_box;
use std::time::Instant;

use switchboard_wire::Message;

fn body(args: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{{"name":"echo","arguments":{args},"_meta":{{"progressToken":"p-1"}}}}}}"#
    )
}

fn nested(n: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"id":{i},"name":"item {i} \u00e9","score":{i}.5,"tags":["a","b"],"ok":true}}"#
            )
        })
        .collect();
    format!(r#"{{"text":"hello","items":[{}]}}"#, items.join(","))
}

fn time(name: &str, input: &[u8], f: fn(&[u8]) -> bool) {
    let iters = (64 * 1024 * 1024 / input.len()).clamp(200, 2_000_000);
    assert!(f(input));
    let start = Instant::now();
    for _ in 0..iters {
        black_box(f(black_box(input)));
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    let mbs = input.len() as f64 / ns * 1e3;
    println!(
        "{name:<24} {:>8} B  {ns:>10.0} ns/op  {mbs:>7.0} MB/s",
        input.len()
    );
}

fn main() {
    let small = body(r#"{"text":"hello"}"#);
    let medium = body(&nested(50));
    let large = body(&format!(
        r#"{{"text":"{}","items":{}}}"#,
        "x".repeat(128 * 1024),
        nested(900)
    ));
    for (label, input) in [
        ("small", &small),
        ("4 KiB nested", &medium),
        ("256 KiB", &large),
    ] {
        time(&format!("parse {label}"), input.as_bytes(), |b| {
            Message::parse(b).is_ok()
        });
        time(&format!("parse_client {label}"), input.as_bytes(), |b| {
            Message::parse_client(b).is_ok()
        });
    }
}
