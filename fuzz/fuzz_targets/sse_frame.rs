//! SSE framing: whatever bytes a payload holds, `frame` produces exactly one event whose
//! fields decode (per the WHATWG SSE rules) back to the event name, the id and the payload with
//! CR/LF folded to spaces — so a payload can never inject a field or a second event.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_wire::sse;

/// Event names and ids the gateway itself uses: those are trusted, the payload is not.
const EVENTS: &[&str] = &["message", "endpoint"];
const IDS: &[Option<&str>] = &[None, Some("0"), Some("s1-42"), Some("/messages?session_id=x")];

/// Splits an SSE stream into (field, value) lines per the spec: lines end at CRLF, LF or CR;
/// the value follows the first colon, minus one leading space.
fn fields(stream: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n' || b == b'\r').unwrap_or(rest.len());
        let line = &rest[..end];
        let mut skip = end + 1;
        if rest.get(end) == Some(&b'\r') && rest.get(end + 1) == Some(&b'\n') {
            skip += 1;
        }
        rest = rest.get(skip..).unwrap_or_default();
        if line.is_empty() {
            out.push((Vec::new(), Vec::new())); // event boundary
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &line[line.len()..]),
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        out.push((name.to_vec(), value.to_vec()));
    }
    out
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, data)) = input.split_first() else { return };
    let event = EVENTS[usize::from(selector) % EVENTS.len()];
    let id = IDS[usize::from(selector / 2) % IDS.len()];
    let framed = if selector & 0x80 == 0 {
        sse::frame(event, id, data)
    } else {
        sse::message(data)
    };
    let (event, id) = if selector & 0x80 == 0 { (event, id) } else { ("message", None) };

    assert!(framed.ends_with(b"\n\n"));
    let got = fields(&framed);
    let mut want: Vec<(Vec<u8>, Vec<u8>)> = vec![(b"event".to_vec(), event.as_bytes().to_vec())];
    if let Some(id) = id {
        want.push((b"id".to_vec(), id.as_bytes().to_vec()));
    }
    let folded: Vec<u8> = data.iter().map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }).collect();
    want.push((b"data".to_vec(), folded));
    want.push((Vec::new(), Vec::new()));
    assert_eq!(got, want, "one event, exactly these fields");
});
