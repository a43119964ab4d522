//! The built-in scanners: every pattern in one `RegexSet` run once over a payload's raw
//! bytes (which kinds occur at all), and the same patterns one by one, with their checksums,
//! only over the decoded strings of a payload that had a hit.

use std::sync::LazyLock;

use regex::bytes::RegexSet;
use regex::Regex;

/// What a built-in pattern finds. Its [`Kind::name`] is what `[REDACTED:kind]`, audit lines
/// and metrics say; never the matched text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    AwsAccessKey,
    GcpApiKey,
    GithubToken,
    SlackToken,
    SlackWebhook,
    StripeKey,
    Jwt,
    PrivateKey,
    Email,
    Phone,
    Iban,
    CreditCard,
    Injection,
}

/// Every kind, in [`PATTERNS`] order (a kind's bit in a [`Kinds`] is its index here).
pub const ALL: [Kind; 13] = [
    Kind::AwsAccessKey,
    Kind::GcpApiKey,
    Kind::GithubToken,
    Kind::SlackToken,
    Kind::SlackWebhook,
    Kind::StripeKey,
    Kind::Jwt,
    Kind::PrivateKey,
    Kind::Email,
    Kind::Phone,
    Kind::Iban,
    Kind::CreditCard,
    Kind::Injection,
];

/// Separators an injection phrase may use: whitespace, or (in raw JSON) an escaped one.
const SEP: &str = r"(?:\s|\\[nrt])+";

/// A word boundary by ASCII word characters. Unicode's `\b` cannot run on the regex
/// engines' DFA over non-ASCII text: scanning it was some 40 times slower (a unit test prints
/// the timing). Every pattern's edges are ASCII (digits, Latin letters, ASCII phrases), and a
/// letter of another script next to one is, if anything, one more match.
const B: &str = r"(?-u:\b)";

/// A JSON number with an exponent and enough digits to be a card number in disguise
/// (`4.111111111111111e15`, `41111111111111110000e-4`).
const EXPONENT: &str = r"[0-9][0-9.]{12,}[eE][+-]?[0-9]{1,3}";

fn pattern(kind: Kind) -> String {
    match kind {
        Kind::AwsAccessKey => r"(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}".into(),
        Kind::GcpApiKey => r"AIza[0-9A-Za-z_\-]{35}".into(),
        Kind::GithubToken => {
            r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})".into()
        }
        Kind::SlackToken => r"xox[abposr]-[A-Za-z0-9-]{10,}".into(),
        Kind::SlackWebhook => r"https://hooks\.slack\.com/services/[A-Za-z0-9/_]{8,}".into(),
        Kind::StripeKey => r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}".into(),
        Kind::Jwt => r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}".into(),
        // The whole block where its end is in the same string, else to the string's end.
        Kind::PrivateKey => {
            r"-----BEGIN[A-Z ]{0,32} PRIVATE KEY( BLOCK)?-----(?s:.*?)(?:-----END[A-Z ]{0,32} PRIVATE KEY( BLOCK)?-----|\z)"
                .into()
        }
        Kind::Email => r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}".into(),
        // Digits are ASCII digits (`\d` is every script's, and the checksums read ASCII).
        Kind::Phone => format!(
            r"(?:\+[0-9]{{1,3}}[ .-]?)?\(?{B}[0-9]{{3}}\)?[ .-][0-9]{{3}}[ .-][0-9]{{4}}{B}"
        ),
        Kind::Iban => {
            format!(r"{B}[A-Z]{{2}}[0-9]{{2}}(?: ?[A-Z0-9]{{4}}){{2,7}}(?: ?[A-Z0-9]{{1,4}})?{B}")
        }
        Kind::CreditCard => format!(r"{B}[0-9](?:[ -]?[0-9]){{12,18}}{B}"),
        Kind::Injection => format!(
            r"(?i){B}(?:(?:ignore|disregard|forget|override){SEP}(?:all{SEP}|any{SEP})?(?:the{SEP})?(?:previous|prior|above|earlier|preceding|system){SEP}(?:instructions|prompts?|rules|messages)|you{SEP}are{SEP}now{SEP}(?:in{SEP})?(?:developer|dan|jailbreak)|reveal{SEP}(?:your|the){SEP}system{SEP}prompt|do{SEP}not{SEP}(?:tell|inform){SEP}the{SEP}user){B}|<\|im_start\|>|<\s*/?\s*(?:system|instructions)\s*>"
        ),
    }
}

impl Kind {
    /// Whether `secrets: builtin` covers it: a credential, not personal data or an
    /// injection phrase.
    pub fn is_secret(self) -> bool {
        matches!(
            self,
            Kind::AwsAccessKey
                | Kind::GcpApiKey
                | Kind::GithubToken
                | Kind::SlackToken
                | Kind::SlackWebhook
                | Kind::StripeKey
                | Kind::Jwt
                | Kind::PrivateKey
        )
    }

    /// The kind as `[REDACTED:kind]`, audit lines and configs name it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AwsAccessKey => "aws_access_key",
            Kind::GcpApiKey => "gcp_api_key",
            Kind::GithubToken => "github_token",
            Kind::SlackToken => "slack_token",
            Kind::SlackWebhook => "slack_webhook",
            Kind::StripeKey => "stripe_key",
            Kind::Jwt => "jwt",
            Kind::PrivateKey => "private_key",
            Kind::Email => "email",
            Kind::Phone => "phone",
            Kind::Iban => "iban",
            Kind::CreditCard => "credit_card",
            Kind::Injection => "injection",
        }
    }

    fn bit(self) -> u32 {
        let i = ALL.iter().position(|k| *k == self).unwrap_or(0);
        1 << i
    }

    /// A match the pattern found that its checksum confirms (card numbers: Luhn; IBANs:
    /// ISO 7064 mod 97).
    fn confirms(self, text: &str) -> bool {
        match self {
            Kind::CreditCard => luhn(text),
            Kind::Iban => iban_checksum(text),
            _ => true,
        }
    }
}

/// A set of kinds (a bit per kind).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kinds(u32);

impl Kinds {
    pub const NONE: Kinds = Kinds(0);

    /// Every secret pattern (`secrets: builtin`).
    pub fn secrets() -> Kinds {
        ALL.into_iter().filter(|k| k.is_secret()).collect()
    }

    pub fn with(self, kind: Kind) -> Kinds {
        Kinds(self.0 | kind.bit())
    }

    pub fn union(self, other: Kinds) -> Kinds {
        Kinds(self.0 | other.0)
    }

    pub fn meet(self, other: Kinds) -> Kinds {
        Kinds(self.0 & other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, kind: Kind) -> bool {
        self.0 & kind.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Kind> {
        ALL.into_iter().filter(move |k| self.contains(*k))
    }
}

impl FromIterator<Kind> for Kinds {
    fn from_iter<I: IntoIterator<Item = Kind>>(iter: I) -> Self {
        iter.into_iter().fold(Kinds::NONE, Kinds::with)
    }
}

/// One confirmed match in a decoded string: byte offsets and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub start: usize,
    pub end: usize,
    pub kind: Kind,
}

/// The compiled patterns (built once per process).
#[derive(Debug)]
pub struct Scanner {
    set: RegexSet,
    each: Vec<Regex>,
}

static BUILTIN: LazyLock<Option<Scanner>> = LazyLock::new(Scanner::compile);

impl Scanner {
    /// The built-in patterns. `None` only if they failed to compile (a unit test pins that
    /// they do); callers then treat every payload as a hit of every kind they scan for.
    pub fn builtin() -> Option<&'static Scanner> {
        BUILTIN.as_ref()
    }

    fn compile() -> Option<Scanner> {
        let sources: Vec<String> = ALL.iter().map(|k| pattern(*k)).collect();
        // The raw pass also takes a number written with an exponent for a possible card
        // number (its digits are only seen once decoded).
        let raw: Vec<String> = ALL
            .iter()
            .zip(&sources)
            .map(|(k, s)| match k {
                Kind::CreditCard => format!("{s}|{EXPONENT}"),
                _ => s.clone(),
            })
            .collect();
        let set = regex::bytes::RegexSetBuilder::new(&raw)
            .size_limit(64 << 20)
            .build()
            .ok()?;
        let each = sources
            .iter()
            .map(|s| Regex::new(s))
            .collect::<Result<Vec<_>, _>>()
            .ok()?;
        Some(Scanner { set, each })
    }

    /// The kinds among `wanted` that occur anywhere in `raw`: one pass over the bytes.
    pub fn raw_hits(&self, wanted: Kinds, raw: &[u8]) -> Kinds {
        if wanted.is_empty() {
            return Kinds::NONE;
        }
        self.set
            .matches(raw)
            .iter()
            .filter_map(|i| ALL.get(i).copied())
            .filter(|k| wanted.contains(*k))
            .collect()
    }

    /// Every confirmed match of `wanted` in `text`, in order; overlapping matches are merged.
    pub fn find(&self, wanted: Kinds, text: &str) -> Vec<Found> {
        let mut out = Vec::new();
        for kind in wanted.iter() {
            let Some(re) = ALL
                .iter()
                .position(|k| *k == kind)
                .and_then(|i| self.each.get(i))
            else {
                continue;
            };
            for m in re.find_iter(text) {
                if kind.confirms(m.as_str()) {
                    out.push(Found {
                        start: m.start(),
                        end: m.end(),
                        kind,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        let mut kept: Vec<Found> = Vec::with_capacity(out.len());
        for f in out {
            match kept.last_mut() {
                // Overlapping matches become one span (the first one's kind), so nothing
                // of either is left.
                Some(last) if f.start < last.end => last.end = last.end.max(f.end),
                _ => kept.push(f),
            }
        }
        kept
    }
}

/// Whether a raw JSON payload could hide a match from the raw pass: any escape (`\u0041KIA…`
/// decodes to `AKIA…`; after `\n` a card number follows the letter `n` in the raw text, so
/// no word boundary precedes it), or more than one `text` member (items of `content`,
/// `contents`, embedded resources, messages), whose texts a client may read as one (a secret
/// split across them).
pub fn may_hide(raw: &[u8]) -> bool {
    if memchr::memchr(b'\\', raw).is_some() {
        return true;
    }
    let members = memchr::memmem::find_iter(raw, b"\"text\"").filter(|at| {
        let after = raw.get(at + 6..).unwrap_or_default();
        after.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b':')
    });
    members.take(2).count() == 2
}

/// The Luhn checksum of a card number's digits (separators ignored).
pub fn luhn(text: &str) -> bool {
    let digits: Vec<u32> = text.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| match i % 2 {
            1 if *d * 2 > 9 => *d * 2 - 9,
            1 => *d * 2,
            _ => *d,
        })
        .sum();
    sum.is_multiple_of(10)
}

/// ISO 13616 IBAN check digits (mod 97 == 1), spaces ignored.
pub fn iban_checksum(text: &str) -> bool {
    let compact: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let rotated = compact[4..].iter().chain(compact[..4].iter());
    let mut rem: u32 = 0;
    for c in rotated {
        let v = match c.to_digit(36) {
            Some(v) => v,
            None => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

#[cfg(test)]
mod tests;
