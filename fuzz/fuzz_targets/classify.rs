//! The per-request era classifier (`switchboard_wire::classify`) on arbitrary bodies and
//! `MCP-Protocol-Version` headers: never panics, and every outcome agrees with the truth table
//! in its module docs — Modern only with a known version claimed in the body (and mirrored by
//! the header when one is sent) plus capabilities; Legacy only without a claim and without a
//! Modern header; every refusal one of the three spec codes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_wire::classify::{classify, Era, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use switchboard_wire::{version, Message};

fuzz_target!(|input: &[u8]| {
    let Some((&selector, rest)) = input.split_first() else { return };
    // The header: absent, a real Legacy or Modern value, an unknown one, or fuzzer bytes.
    let (header, body): (Option<String>, &[u8]) = match selector % 5 {
        0 => (None, rest),
        1 => (Some("2025-11-25".into()), rest),
        2 => (Some("2026-07-28".into()), rest),
        3 => (Some("2099-01-01".into()), rest),
        _ => {
            let n = rest.len().min(usize::from(selector >> 3));
            (Some(String::from_utf8_lossy(&rest[..n]).into_owned()), &rest[n..])
        }
    };
    let Ok(msg) = Message::parse(body) else { return };
    let outcome = classify(&msg, header.as_deref());
    let claim = msg.meta(META_PROTOCOL_VERSION);
    match outcome {
        Ok(Era::Modern(v)) => {
            assert!(version::is_modern(&v), "Modern with unknown version {v:?}");
            assert!(claim.is_some(), "Modern without a body claim");
            assert!(header.as_deref().is_none_or(|h| h == v), "header {header:?} vs {v:?}");
            assert!(msg.meta(META_CLIENT_CAPABILITIES).is_some_and(|c| c.get().starts_with('{')));
        }
        Ok(Era::Legacy) => {
            assert!(claim.is_none(), "Legacy despite a body claim");
            assert!(!header.as_deref().is_some_and(version::is_modern), "Legacy with a Modern header");
        }
        Err(e) => assert!(matches!(e.code, -32602 | -32020 | -32022), "code {}", e.code),
    }
});
