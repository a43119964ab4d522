//! Matching a URI against a resource template, for routing `resources/read` and
//! `resources/subscribe` of a URI no backend listed.
//!
//! The subset of RFC 6570 understood (every expression needs a non-empty expansion, except the
//! query forms, which may be absent, as an undefined variable expands to nothing there):
//!
//! | expression | matches |
//! |---|---|
//! | `{var}`, `{a,b}`, `{var:3}` | one or more characters other than `/`, `?`, `#` |
//! | `{+var}` | one or more of any character |
//! | `{#var}` | `#` then one or more of any character |
//! | `{.var}` | `.` then one or more characters other than `/`, `?`, `#` |
//! | `{/var}` | `/` then one or more characters other than `/`, `?`, `#` |
//! | `{/var*}`, `{/a,b}` | `/` then one or more characters other than `?`, `#` |
//! | `{;var}` | `;` then one or more characters other than `/`, `?`, `#` |
//! | `{?a,b}`, `{&a}` | nothing, or `?` (`&`) then any characters other than `#` |
//!
//! Literal text must match exactly (no percent-decoding). A template with an unclosed `{`, an
//! empty expression or a reserved operator (`=,!@|`) matches nothing: routing a URI on a
//! template we cannot read would be a guess. Matching is a set-of-states simulation, linear in
//! the URI's length times the template's (no backtracking, so no input blows it up).

use std::borrow::Cow;

/// `uri` with its scheme lower-cased, the rest kept byte for byte: RFC 3986 (3.1) makes the
/// scheme case-insensitive, and lower case its canonical form. Resources are routed and judged
/// by the policy in this form, so `REMA://x` is `rema://x` everywhere. A URI without a valid
/// scheme (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )` then `:`) is returned as it is.
pub(crate) fn canonical_scheme(uri: &str) -> Cow<'_, str> {
    let Some((scheme, _)) = uri.split_once(':') else {
        return Cow::Borrowed(uri);
    };
    let valid = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !valid || !scheme.bytes().any(|b| b.is_ascii_uppercase()) {
        return Cow::Borrowed(uri);
    }
    Cow::Owned(format!(
        "{}{}",
        scheme.to_ascii_lowercase(),
        &uri[scheme.len()..]
    ))
}

/// Which characters a run may consume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Not `/`, `?`, `#`.
    Segment,
    /// Not `?`, `#`.
    Path,
    /// Anything.
    Any,
}

impl Class {
    fn has(self, c: char) -> bool {
        match self {
            Class::Segment => !matches!(c, '/' | '?' | '#'),
            Class::Path => !matches!(c, '?' | '#'),
            Class::Any => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Element {
    Lit(char),
    /// One or more characters of the class.
    Run(Class),
    /// Nothing, or the lead character then any characters but `#`.
    Query(char),
}

/// A compiled resource template (`None` inside: unreadable, matches nothing).
#[derive(Debug, Clone)]
pub(crate) struct Template(Option<Vec<Element>>);

impl Template {
    pub(crate) fn parse(template: &str) -> Self {
        Template(parse(template))
    }

    pub(crate) fn matches(&self, uri: &str) -> bool {
        self.0.as_deref().is_some_and(|elements| run(elements, uri))
    }
}

fn parse(template: &str) -> Option<Vec<Element>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.extend(rest[..open].chars().map(Element::Lit));
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        expression(&after[..close], &mut out)?;
        rest = &after[close + 1..];
    }
    out.extend(rest.chars().map(Element::Lit));
    Some(out)
}

/// Appends the elements for one `{…}` body.
fn expression(body: &str, out: &mut Vec<Element>) -> Option<()> {
    let mut chars = body.chars();
    let first = chars.next()?;
    let (op, vars) = if "+#./;?&=,!@|".contains(first) {
        (Some(first), chars.as_str())
    } else {
        (None, body)
    };
    if vars.is_empty() || vars.contains('{') {
        return None;
    }
    let many = vars.contains(',') || vars.contains('*');
    match op {
        None => out.push(Element::Run(Class::Segment)),
        Some('+') => out.push(Element::Run(Class::Any)),
        Some('#') => out.extend([Element::Lit('#'), Element::Run(Class::Any)]),
        Some('/') if many => out.extend([Element::Lit('/'), Element::Run(Class::Path)]),
        Some(lead @ ('.' | '/' | ';')) => {
            out.extend([Element::Lit(lead), Element::Run(Class::Segment)]);
        }
        Some(lead @ ('?' | '&')) => out.push(Element::Query(lead)),
        // Reserved for future extensions by RFC 6570: unreadable.
        Some(_) => return None,
    }
    Some(())
}

/// Whether `uri` matches `elements`. State `2*i` is "before element i", `2*i + 1` is "inside
/// element i after consuming at least its first character".
fn run(elements: &[Element], uri: &str) -> bool {
    let n = elements.len();
    let mut now = vec![false; 2 * (n + 1)];
    now[0] = true;
    close(elements, &mut now);
    let mut next = vec![false; now.len()];
    for c in uri.chars() {
        next.iter_mut().for_each(|s| *s = false);
        for (i, element) in elements.iter().enumerate() {
            let (before, inside) = (now[2 * i], now[2 * i + 1]);
            match *element {
                Element::Lit(l) if before && c == l => next[2 * (i + 1)] = true,
                Element::Run(class) if (before || inside) && class.has(c) => {
                    next[2 * i + 1] = true;
                }
                Element::Query(lead) if (before && c == lead) || (inside && c != '#') => {
                    next[2 * i + 1] = true;
                }
                _ => {}
            }
        }
        close(elements, &mut next);
        if !next.iter().any(|&s| s) {
            return false;
        }
        std::mem::swap(&mut now, &mut next);
    }
    now[2 * n]
}

/// Adds the states reachable without consuming a character (they only go forward, so one
/// ascending pass is enough).
fn close(elements: &[Element], states: &mut [bool]) {
    for (i, element) in elements.iter().enumerate() {
        let done = match element {
            Element::Lit(_) => false,
            Element::Run(_) => states[2 * i + 1],
            Element::Query(_) => states[2 * i] || states[2 * i + 1],
        };
        if done {
            states[2 * (i + 1)] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(template: &str, uri: &str) -> bool {
        Template::parse(template).matches(uri)
    }

    #[test]
    fn simple_variables_stay_in_one_segment() {
        assert!(m("file:///logs/{name}", "file:///logs/today"));
        assert!(!m("file:///logs/{name}", "file:///logs/a/b"));
        assert!(!m("file:///logs/{name}", "file:///logs/"));
        assert!(m("db://{table}/{id}", "db://users/42"));
        assert!(!m("db://{table}/{id}", "db://users"));
        assert!(m("ui://widget/{id}.html", "ui://widget/chart.html"));
        assert!(!m("ui://widget/{id}.html", "ui://widget/chart.htm"));
    }

    #[test]
    fn operators() {
        assert!(m("file:///{+path}", "file:///a/b/c.txt"));
        assert!(m("repo://x{/seg}", "repo://x/main"));
        assert!(!m("repo://x{/seg}", "repo://x/main/sub"));
        assert!(m("repo://x{/seg*}", "repo://x/main/sub"));
        assert!(m("search://q{?term,page}", "search://q"));
        assert!(m("search://q{?term,page}", "search://q?term=a&page=2"));
        assert!(!m("search://q{?term}", "search://qx"));
        assert!(m("doc://d{#frag}", "doc://d#intro"));
        assert!(m("v://x{.ext}", "v://x.json"));
        assert!(m("m://x{;p}", "m://x;p=1"));
    }

    #[test]
    fn unreadable_templates_match_nothing() {
        for t in ["file:///{name", "x://{}", "x://{=a}", "x://{a{b}}"] {
            assert!(!m(t, "file:///a"), "{t}");
            assert!(!m(t, ""), "{t}");
        }
        assert!(m("plain://exact", "plain://exact"));
        assert!(!m("plain://exact", "plain://exactly"));
    }

    #[test]
    fn only_a_valid_scheme_is_lower_cased() {
        let c = |u: &str| canonical_scheme(u).into_owned();
        assert_eq!(c("remA://Info/X"), "rema://Info/X");
        assert_eq!(c("HTTP+Unix://H/P?Q#F"), "http+unix://H/P?Q#F");
        assert_eq!(c("rema://INFO"), "rema://INFO");
        assert!(matches!(canonical_scheme("rema://x"), Cow::Borrowed(_)));
        for unchanged in [
            "NoScheme",
            "/A:b",
            "1AB://x",
            "{S}://x",
            "",
            ":x",
            "\u{c9}A://x",
        ] {
            assert_eq!(c(unchanged), unchanged);
        }
    }

    proptest! {
        #[test]
        fn never_panics(template in "[a-z:/{}+#./;?&=*,%\u{e9}]{0,40}", uri in "\\PC{0,60}") {
            let _ = m(&template, &uri);
        }

        #[test]
        fn expansions_of_simple_templates_match(a in "[a-z0-9]{1,12}", b in "[a-z0-9]{1,12}") {
            let uri = format!("db://{a}/rows/{b}");
            prop_assert!(m("db://{table}/rows/{id}", &uri), "simple");
            prop_assert!(m("db://{+rest}", &uri), "reserved");
            prop_assert!(!m("db://{table}", &uri), "one segment");
        }
    }
}
