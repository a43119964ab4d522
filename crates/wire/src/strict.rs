//! The strict half of the client parse: one pass over a message serde already accepted as
//! JSON, refusing what a backend's parser may read differently from the gateway or not at all.
//!
//! The gateway forwards a client's payload as raw bytes, so whatever it checks (policy on
//! `params.name`, routing on `_meta.progressToken`) must be what the backend will read. That
//! holds only for I-JSON (RFC 7493), so this scan refuses, anywhere in the message:
//! - nesting deeper than the limit (backends choke on depth; see `MAX_CLIENT_DEPTH`);
//! - an object that repeats a key (after unescaping): parsers disagree on which one wins;
//! - a `\u` escape that is an unpaired UTF-16 surrogate: strict parsers refuse the string;
//! - a number with a fraction or exponent that overflows a double (`1e999999`): strict
//!   parsers refuse it. Integers of any size are allowed, since ids and payload integers must
//!   round-trip exactly (invariant 3); I-JSON only advises against them.
//!
//! serde's borrow-only envelope parse already validated the syntax (and `ignore`s nested
//! values without looking at escapes or number ranges), so this scan trusts the structure and
//! looks only at what serde skipped. It replaced the depth scan: still two passes in all.

use std::borrow::Cow;
use std::sync::LazyLock;

use memchr::memchr2;
use memchr::memmem::Finder;

/// What the scan refused, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    /// Nested deeper than allowed.
    TooDeep,
    /// An object repeats a key. `within` is the top-level member it sits in (`None`: the
    /// message object itself).
    DuplicateKey { within: Within },
    /// An unpaired surrogate escape, or a number that overflows to infinity.
    NotStrictJson { within: Within },
    /// A key holding U+0000 (`\u0000`): a parser reading keys as C strings cuts it there, and
    /// takes `"name\u0000"` for `name`.
    NulInKey { within: Within },
    /// A string the policy judges (`params.name`, `params.uri`, `params.ref.*`) holding
    /// U+0000.
    NulInValue { within: Within },
    /// A protocol member the gateway reads, spelled another way (`"Name"`, `"argument\u017f"`):
    /// the gateway, reading `name`, finds none, while a case-insensitive parser (Go's
    /// `encoding/json`) runs it.
    LooseMember { within: Within },
    /// serde_json's private key [`RAW_VALUE_KEY`], in any spelling: the gateway's `Value`
    /// reads an object starting with it as the JSON text in its string, every other parser
    /// as an object holding that key.
    ReservedKey { within: Within },
}

/// The key behind which serde_json's `Value` (built with `raw_value`, as this workspace is)
/// parses a string again as JSON: `{"$serde_json::private::RawValue":"{\"a\":1}"}` is
/// `{"a":1}` to the gateway and an object with one odd key to a backend.
pub(crate) const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// The top-level member a violation sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Within {
    /// The message object itself (one of its keys).
    Envelope,
    /// `id`.
    Id,
    /// `params`.
    Params,
    /// Any other member (`result`, `error`, an unknown one).
    Other,
}

/// The members of a message object.
static ENVELOPE: Spellings =
    Spellings::of(&["jsonrpc", "id", "method", "params", "result", "error"]);

/// The members of a request's `params` the gateway reads to admit, route, guard or rename a
/// request (policy on `name` and `uri`, guardrails on `arguments`, tasks on `task` and
/// `taskId`, MRTR on `requestState` and `inputResponses`, …): one spelling each.
static PARAMS: Spellings = Spellings::of(&[
    "_meta",
    "argument",
    "arguments",
    "capabilities",
    "clientInfo",
    "context",
    "cursor",
    "inputResponses",
    "level",
    "name",
    "notifications",
    "progressToken",
    "protocolVersion",
    "ref",
    "requestId",
    "requestState",
    "task",
    "taskId",
    "uri",
]);

/// The members whose string values the policy judges (of `params` and `params.ref`): a
/// U+0000 in one is refused, since a C-string backend reads only what comes before it.
const JUDGED: &[&str] = &["name", "uri", "type"];

/// The members of a `completion/complete`'s `params.ref` (policy reads them).
static REF: Spellings = Spellings::of(&["type", "name", "uri"]);

/// Members that have one spelling, also held by length (at most three of a length), so that
/// a plain key is compared only with those it could be in another case.
struct Spellings {
    members: &'static [&'static str],
    by_len: [[&'static str; 3]; 16],
}

impl Spellings {
    const fn of(members: &'static [&'static str]) -> Self {
        let mut by_len = [[""; 3]; 16];
        let mut i = 0;
        while i < members.len() {
            let m = members[i];
            let mut slot = 0;
            while !by_len[m.len()][slot].is_empty() {
                slot += 1; // past the row's end (four of one length): a compile error
            }
            by_len[m.len()][slot] = m;
            i += 1;
        }
        Spellings { members, by_len }
    }

    /// Whether the plain (ASCII, unescaped) key `key` is a member in another case. A key
    /// spelled as one member is no other in another case (no two are equal but for case).
    fn misspelled_plain(&self, key: &[u8]) -> bool {
        let Some(same_len) = self.by_len.get(key.len()) else {
            return false;
        };
        if same_len.iter().any(|m| key == m.as_bytes()) {
            return false;
        }
        (same_len.iter()).any(|m| key.eq_ignore_ascii_case(m.as_bytes()))
    }

    /// Whether the (decoded) key `key` is a member to a loose parser (`keys_fold_equal`)
    /// but not to the gateway.
    fn misspelled(&self, key: &str) -> bool {
        (self.members.iter()).any(|m| key != *m && keys_fold_equal(key, m))
    }
}

/// Objects with at most this many keys are checked pairwise; larger ones are sorted, so a
/// body of many keys costs n·log n, not n².
const PAIRWISE_MAX: usize = 16;

/// A key's position in the input, and whether it needs unescaping before comparison.
#[derive(Clone, Copy)]
struct KeySpan {
    /// Byte range of the key's content, without its quotes.
    start: usize,
    end: usize,
    escaped: bool,
    /// ASCII without escapes: compared as it is, ignoring ASCII case.
    plain: bool,
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    /// Per open container: `Some(first key index)` for an object, `None` for an array.
    stack: Vec<Option<usize>>,
    /// Keys of every open object, innermost last.
    keys: Vec<KeySpan>,
    /// Whether the message's protocol members must have their one spelling (a client's
    /// message; not a backend's JSON, which [`reads_one_way`] checks).
    spellings: bool,
    /// Whether a number a double cannot hold is a violation (not for [`keys_read_one_way`]).
    numbers: bool,
    /// The next string is an object key.
    expect_key: bool,
    /// The object open at depth 3 is `params.ref`.
    in_ref: bool,
    within: Within,
}

/// Scans `text`, a client's message (valid JSON: serde parsed it), and returns the first
/// violation.
pub(crate) fn scan(text: &str, max_depth: usize) -> Result<(), Violation> {
    scan_json(text, max_depth, true, true)
}

/// Scans `text` (valid JSON) for what a backend's parser may read differently; `spellings`:
/// also each protocol member of a message in its one spelling.
fn scan_json(
    text: &str,
    max_depth: usize,
    spellings: bool,
    numbers: bool,
) -> Result<(), Violation> {
    let mut s = Scanner {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        stack: Vec::new(),
        keys: Vec::new(),
        spellings,
        numbers,
        expect_key: false,
        in_ref: false,
        within: Within::Envelope,
    };
    s.run(max_depth)
}

impl Scanner<'_> {
    fn run(&mut self, max_depth: usize) -> Result<(), Violation> {
        while let Some(&b) = self.bytes.get(self.pos) {
            match b {
                b'"' => self.string()?,
                b'{' | b'[' => {
                    if self.stack.len() == max_depth {
                        return Err(Violation::TooDeep);
                    }
                    let object = b == b'{';
                    self.stack.push(object.then_some(self.keys.len()));
                    self.expect_key = object;
                    if self.stack.len() == 3 && self.within == Within::Params {
                        // The last key read is the one whose value this object is (an array
                        // there is no `ref`, whatever came before it).
                        self.in_ref =
                            object && self.keys.last().is_some_and(|k| self.decoded(k) == "ref");
                    }
                    self.pos += 1;
                }
                b'}' | b']' => {
                    if let Some(Some(first)) = self.stack.pop() {
                        self.check_keys(first)?;
                        self.keys.truncate(first);
                    }
                    if self.stack.len() == 1 {
                        // Back in the message object: the member's value ended.
                        self.within = Within::Envelope;
                    }
                    self.pos += 1;
                }
                b',' => {
                    self.expect_key = matches!(self.stack.last(), Some(Some(_)));
                    if self.stack.len() == 1 {
                        self.within = Within::Envelope;
                    }
                    self.pos += 1;
                }
                b'-' | b'0'..=b'9' => self.number()?,
                _ => self.pos += 1,
            }
        }
        Ok(())
    }

    /// A string starting at `pos` (its opening quote): checks its escapes, and records it if it
    /// is a key.
    fn string(&mut self) -> Result<(), Violation> {
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        // serde validated the string, so it is closed and its escapes are well-formed.
        while let Some(&b) = self.bytes.get(i) {
            match b {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    if self.bytes.get(i + 1) == Some(&b'u') {
                        i = self.unicode_escape(i)?;
                    } else {
                        i += 2;
                    }
                }
                _ => i += 1,
            }
        }
        self.pos = i + 1;
        if self.expect_key {
            self.expect_key = false;
            let key = KeySpan {
                start,
                end: i,
                escaped,
                plain: !escaped && self.bytes[start..i].is_ascii(),
            };
            if escaped && self.decoded(&key).contains('\0') {
                return Err(Violation::NulInKey {
                    within: self.within_here(),
                });
            }
            if self.is_raw_value_key(&key) {
                return Err(Violation::ReservedKey {
                    within: self.within_here(),
                });
            }
            if let Some(members) = self.one_spelling() {
                if self.misspells(&key, members) {
                    return Err(Violation::LooseMember {
                        within: self.within_here(),
                    });
                }
            }
            if self.stack.len() == 1 {
                // Decoded, as serde reads it: `"par\u0061ms"` is `params`.
                self.within = match &*self.decoded(&key) {
                    "id" => Within::Id,
                    "params" => Within::Params,
                    _ => Within::Other,
                };
            }
            self.keys.push(key);
        } else if escaped && self.stack.len() > 1 && self.is_judged_value() {
            // A protocol member's string (`params.name`, `params.ref.uri`): a backend keeping
            // strings as C strings reads `"exit\u0000x"` as `exit`, which the gateway never
            // judged.
            let value = KeySpan {
                start,
                end: i,
                escaped,
                plain: false,
            };
            if self.decoded(&value).contains('\0') {
                return Err(Violation::NulInValue {
                    within: self.within,
                });
            }
        }
        Ok(())
    }

    /// The `\uXXXX` escape at `i` (its backslash); returns the index after it (and after its
    /// low half, for a surrogate pair). An unpaired surrogate is a violation.
    fn unicode_escape(&self, i: usize) -> Result<usize, Violation> {
        let unit = |at: usize| -> Option<u16> {
            let hex = self.text.get(at + 2..at + 6)?;
            u16::from_str_radix(hex, 16).ok()
        };
        let lone = Violation::NotStrictJson {
            within: self.within_here(),
        };
        match unit(i) {
            Some(0xD800..=0xDBFF) => {
                let paired = self.bytes.get(i + 6..i + 8) == Some(b"\\u")
                    && matches!(unit(i + 6), Some(0xDC00..=0xDFFF));
                if paired {
                    Ok(i + 12)
                } else {
                    Err(lone)
                }
            }
            Some(0xDC00..=0xDFFF) => Err(lone),
            _ => Ok(i + 6),
        }
    }

    /// A number at `pos`: an integer passes whatever its size; a fraction or exponent must
    /// stay finite as a double.
    fn number(&mut self) -> Result<(), Violation> {
        let start = self.pos;
        let mut i = start;
        let mut float = false;
        while let Some(&b) = self.bytes.get(i) {
            match b {
                b'0'..=b'9' | b'-' | b'+' => {}
                b'.' | b'e' | b'E' => float = true,
                _ => break,
            }
            i += 1;
        }
        self.pos = i;
        // Without an exponent, a double overflows only past 309 integer digits.
        let literal = &self.text[start..i];
        let risky = literal.contains(['e', 'E']) || literal.len() > 300;
        if self.numbers && float && risky && !literal.parse::<f64>().is_ok_and(f64::is_finite) {
            return Err(Violation::NotStrictJson {
                within: self.within_here(),
            });
        }
        Ok(())
    }

    /// The members the object being read has in one spelling only: the message, its
    /// `params`, `params.ref`.
    fn one_spelling(&self) -> Option<&'static Spellings> {
        if !self.spellings {
            return None;
        }
        match self.stack.len() {
            1 => Some(&ENVELOPE),
            2 if self.within == Within::Params => Some(&PARAMS),
            3 if self.within == Within::Params && self.in_ref => Some(&REF),
            _ => None,
        }
    }

    /// Whether the value being read is one the policy judges (`params.name`, `params.uri`,
    /// `params.ref.*`; not a tool argument, not an element of an array): a member's own value
    /// in an object with one spelling per member, under a key in [`JUDGED`]. The key is
    /// decoded only then (once per member, never per array element).
    fn is_judged_value(&self) -> bool {
        self.one_spelling().is_some()
            && matches!(self.stack.last(), Some(Some(_)))
            && (self.keys.last()).is_some_and(|k| JUDGED.contains(&&*self.decoded(k)))
    }

    /// Whether `key` is one of `members` in another spelling.
    fn misspells(&self, key: &KeySpan, members: &Spellings) -> bool {
        if key.plain {
            return members.misspelled_plain(&self.bytes[key.start..key.end]);
        }
        members.misspelled(&self.decoded(key))
    }

    /// Where a violation at the current position sits.
    fn within_here(&self) -> Within {
        if self.stack.len() <= 1 && self.expect_key {
            Within::Envelope
        } else {
            self.within
        }
    }

    /// Whether the object whose keys start at `first` repeats one, for *some* parser: equal
    /// after unescaping, or equal but for case. Go's `encoding/json` (many MCP servers)
    /// matches struct fields case-insensitively, so `{"name":"a","Name":"b"}` would be
    /// authorized as `a` here and run as `b` there.
    fn check_keys(&self, first: usize) -> Result<(), Violation> {
        let keys = &self.keys[first..];
        let duplicate = if keys.iter().all(|k| k.plain) {
            self.repeats_plain(keys)
        } else {
            // Each key folded once: folded per comparison, a few long non-ASCII keys made
            // one body cost seconds of a server thread.
            let mut names: Vec<String> = (keys.iter())
                .map(|k| folded(&self.decoded(k)).collect())
                .collect();
            names.sort_unstable();
            names.windows(2).any(|w| w[0] == w[1])
        };
        if !duplicate {
            return Ok(());
        }
        // The innermost object is the message itself when only it was open.
        let within = if self.stack.is_empty() {
            Within::Envelope
        } else {
            self.within
        };
        Err(Violation::DuplicateKey { within })
    }

    /// Whether plain keys (ASCII, unescaped: every key of almost every body) repeat one but
    /// for ASCII case: pairwise while few, sorted (borrowed) beyond.
    fn repeats_plain(&self, keys: &[KeySpan]) -> bool {
        let text = |k: &KeySpan| &self.bytes[k.start..k.end];
        if keys.len() <= PAIRWISE_MAX {
            return (keys.iter().enumerate()).any(|(n, a)| {
                keys[n + 1..]
                    .iter()
                    .any(|b| text(a).eq_ignore_ascii_case(text(b)))
            });
        }
        let mut names: Vec<&[u8]> = keys.iter().map(text).collect();
        names.sort_unstable_by(|a, b| {
            (a.iter().map(u8::to_ascii_lowercase)).cmp(b.iter().map(u8::to_ascii_lowercase))
        });
        names.windows(2).any(|w| w[0].eq_ignore_ascii_case(w[1]))
    }

    /// Whether `key` is [`RAW_VALUE_KEY`] (after unescaping: serde reads `"\u0024serde…"`
    /// as it).
    fn is_raw_value_key(&self, key: &KeySpan) -> bool {
        if key.plain {
            return self.bytes.get(key.start..key.end) == Some(RAW_VALUE_KEY.as_bytes());
        }
        key.escaped && self.decoded(key) == RAW_VALUE_KEY
    }

    /// The key-only pass of [`holds_reserved_key`]: containers and strings, nothing else
    /// checked (a backend's JSON may repeat keys or nest deep; that is not refused here).
    fn reserved_key(&mut self) -> bool {
        while let Some(&b) = self.bytes.get(self.pos) {
            match b {
                b'"' => {
                    let start = self.pos + 1;
                    let (mut i, mut escaped) = (start, false);
                    // Valid JSON: the string is closed, each escape two bytes or more. A
                    // long body is skipped a vector at a time (a short one byte by byte:
                    // a search's set-up costs more there).
                    while let Some(&c) = self.bytes.get(i) {
                        match c {
                            b'"' => break,
                            b'\\' => {
                                escaped = true;
                                i += 2;
                            }
                            _ if i - start >= LONG_STRING => {
                                let rest = self.bytes.get(i..).unwrap_or_default();
                                match memchr2(b'"', b'\\', rest) {
                                    Some(at) => i += at,
                                    None => i = self.bytes.len(),
                                }
                            }
                            _ => i += 1,
                        }
                    }
                    // (Clamped: text that is not JSON must not make this panic.)
                    let i = i.min(self.bytes.len());
                    self.pos = i + 1;
                    if std::mem::take(&mut self.expect_key) {
                        let plain = !escaped && self.bytes[start..i].is_ascii();
                        let key = KeySpan {
                            start,
                            end: i,
                            escaped,
                            plain,
                        };
                        if self.is_raw_value_key(&key) {
                            return true;
                        }
                    }
                }
                b'{' | b'[' => {
                    self.stack.push((b == b'{').then_some(0));
                    self.expect_key = b == b'{';
                    self.pos += 1;
                }
                b'}' | b']' => {
                    self.stack.pop();
                    self.pos += 1;
                }
                b',' => {
                    self.expect_key = matches!(self.stack.last(), Some(Some(_)));
                    self.pos += 1;
                }
                _ => self.pos += 1,
            }
        }
        false
    }

    /// A key's text after unescaping (borrowed when it has no escapes).
    fn decoded(&self, k: &KeySpan) -> Cow<'_, str> {
        // (`get`: the spans of valid JSON always hold; text that is not must not panic.)
        let raw = self.text.get(k.start..k.end).unwrap_or_default();
        if !k.escaped {
            return Cow::Borrowed(raw);
        }
        // The escapes were checked (no lone surrogates), so decoding succeeds; were it to
        // fail, the raw spelling is a safe stand-in (two spellings then compare unequal only
        // if they differ as text).
        let quoted = self.text.get(k.start - 1..=k.end).unwrap_or_default();
        serde_json::from_str::<String>(quoted).map_or(Cow::Borrowed(raw), Cow::Owned)
    }
}

/// Past this many bytes of a string, the key-only pass searches for its end rather than
/// stepping to it.
const LONG_STRING: usize = 32;

/// Whether `text` (valid JSON: serde parsed it; for other text the answer means nothing, but
/// it does not panic) holds an object key that is
/// [`RAW_VALUE_KEY`] in any spelling, at any depth. Every message a backend sends is checked
/// (`Message::parse`), so no `Value` read from one expands a string: cheap first, since every
/// spelling holds `RawValue` as written or a `\u` escape (the key has no `/`, the only other
/// escape a key character could take).
pub fn holds_reserved_key(text: &str) -> bool {
    // Built once: building a searcher costs more than searching a short message with it.
    static PLAIN: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"RawValue"));
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));
    let bytes = text.as_bytes();
    // An escape first: where there is one (early, mostly) the scan is needed anyway, and the
    // other search is saved.
    if ESCAPE.find(bytes).is_none() && PLAIN.find(bytes).is_none() {
        return false;
    }
    let mut s = Scanner {
        text,
        bytes,
        pos: 0,
        stack: Vec::new(),
        keys: Vec::new(),
        spellings: false,
        numbers: false,
        expect_key: false,
        in_ref: false,
        within: Within::Envelope,
    };
    s.reserved_key()
}

/// Whether JSON the gateway already parsed (a backend's params, before they reach a client)
/// reads one way to every parser the client scan guards against: nested at most
/// [`crate::MAX_CLIENT_DEPTH`] deep, no object repeating a key in any spelling
/// ([`keys_fold_equal`]), no key holding U+0000 or being [`RAW_VALUE_KEY`], no unpaired
/// surrogate.
pub fn reads_one_way(value: &serde_json::value::RawValue) -> bool {
    scan_json(value.get(), crate::MAX_CLIENT_DEPTH, false, true).is_ok()
}

/// Whether no object in JSON the gateway already parsed repeats a key in any spelling (nor
/// holds a key with U+0000 or [`RAW_VALUE_KEY`]), however deep and whatever its numbers: what
/// a filter that judges items by their members needs, so that no parser reads another member
/// or name than the one judged.
pub fn keys_read_one_way(value: &serde_json::value::RawValue) -> bool {
    // serde's own nesting limit (128) bounds what reached here; this one only makes room.
    scan_json(value.get(), 256, false, false).is_ok()
}

/// Whether two (decoded) object keys name the same member for a parser that matches keys
/// case-insensitively (or stops a key at U+0000), under the case folding strict JSON uses for
/// duplicate keys: `reque\u{17f}tState` is `requestState` for Go's `encoding/json`.
pub fn keys_fold_equal(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        // Equal up to where both end or hold U+0000: one pass, which a key and the name it is
        // checked against mostly leave at their first byte.
        let (x, y) = (a.as_bytes(), b.as_bytes());
        let same = (x.iter().zip(y))
            .take_while(|(c, d)| **c != 0 && c.eq_ignore_ascii_case(d))
            .count();
        let ends = |k: &[u8]| k.get(same).is_none_or(|&c| c == 0);
        return ends(x) && ends(y);
    }
    folded(a).eq(folded(b))
}

/// A key as a parser reading keys as C strings (cJSON) takes it: up to its first U+0000.
fn before_nul(key: &str) -> &str {
    key.split('\0').next().unwrap_or(key)
}

/// A key's characters as the loosest key-matching parser reads them: each character
/// lowercased, uppercased and lowercased again (so U+017F long s is `s`, U+0131 dotless i is
/// `i`, U+212A Kelvin sign is `k`, ß and ẞ meet, and σ/ς, µ/μ and the like fold together, as
/// Go's `EqualFold` and Java's `equalsIgnoreCase` take them; expansions such as ß → `ss` also
/// match what code comparing upper-cased keys reads), and U+0307 combining dot above dropped
/// right after an `i`: U+0130 lowercases to `i` + U+0307 (JavaScript, Python), and Java takes
/// it for `i`. Up to the first U+0000.
fn folded(key: &str) -> impl Iterator<Item = char> + '_ {
    before_nul(key)
        .chars()
        .flat_map(char::to_lowercase)
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .scan('\0', |before, c| {
            let dot_on_i = c == '\u{307}' && *before == 'i';
            *before = c;
            Some((!dot_on_i).then_some(c))
        })
        .flatten()
}

#[cfg(test)]
mod tests;
