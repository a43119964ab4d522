//! The `mcpServers` JSON of Claude Desktop, Cursor, `.mcp.json` (and VS Code's `servers`) as
//! a config: one backend per server, in the file's order. Literal `env` and `headers` values
//! become `${NAME}` references whose values are returned apart (for a secrets file, or kept
//! in memory by `serve --mcp-json`), so a converted config never holds a credential.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;
use serde_json::{json, Map, Value};

use switchboard_core::MAX_BACKEND_ID;

/// A converted file.
#[derive(Debug, Default)]
pub(crate) struct Converted {
    /// The config, as the YAML would hold it.
    pub(crate) doc: Value,
    /// `NAME` → value for the references that replaced literals, in order.
    pub(crate) secrets: Vec<(String, String)>,
    /// Original server name → backend name, in order.
    pub(crate) mapping: Vec<(String, String)>,
    /// What was skipped or needs the user (printed).
    pub(crate) notes: Vec<String>,
    /// Server names that could not be backend names as written: (original, backend name).
    pub(crate) renamed: Vec<(String, String)>,
}

impl Converted {
    /// One line per renamed server, saying which character made it change (for stderr).
    pub(crate) fn rename_lines(&self) -> Vec<String> {
        self.renamed
            .iter()
            .map(|(original, name)| {
                format!(
                    "server \"{original}\" is backend \"{name}\": a backend name is at most \
                     {MAX_BACKEND_ID} of A-Z, a-z, 0-9, '_' and '-', unique in the file"
                )
            })
            .collect()
    }
}

pub(crate) fn convert_file(path: &Path) -> anyhow::Result<Converted> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc = parse_jsonc(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    convert(&doc)
}

/// JSON with what editors' `mcp.json` files add to it (JSONC): `//` and `/* */` comments and
/// trailing commas. Nothing else of JSON5 (no single quotes, bare keys or hex numbers), so a
/// file that parses here is one a JSONC editor shows as valid.
pub(crate) fn parse_jsonc(text: &str) -> Result<Value, jsonc_parser::errors::ParseError> {
    let options = jsonc_parser::ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    jsonc_parser::parse_to_serde_value(text, &options)
}

/// Keys of a server entry that the conversion carries over (others are noted).
const KNOWN: [&str; 9] = [
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "serverUrl",
    "type",
    "headers",
    "disabled",
];

pub(crate) fn convert(doc: &Value) -> anyhow::Result<Converted> {
    let servers = doc
        .get("mcpServers")
        .or_else(|| doc.get("servers"))
        .or_else(|| doc.pointer("/mcp/servers"))
        .and_then(Value::as_object)
        .context("no `mcpServers` (or VS Code `servers`) object")?;
    let mut out = Converted::default();
    let mut names = HashSet::new();
    let mut backends = Vec::new();
    for (original, entry) in servers {
        let Some(entry) = entry.as_object() else {
            out.notes
                .push(format!("skipped \"{original}\": not an object"));
            continue;
        };
        if entry.get("disabled").and_then(Value::as_bool) == Some(true) {
            out.notes.push(format!("skipped \"{original}\": disabled"));
            continue;
        }
        let name = unique(&sanitize(original), &mut names);
        match backend(&name, original, entry, &mut out) {
            Some(b) => {
                backends.push(b);
                if name != *original {
                    out.renamed.push((original.clone(), name.clone()));
                }
                out.mapping.push((original.clone(), name));
            }
            None => {
                names.remove(&name);
            }
        }
        let ignored: Vec<&str> = entry
            .keys()
            .map(String::as_str)
            .filter(|k| !KNOWN.contains(k))
            .collect();
        if !ignored.is_empty() {
            out.notes.push(format!(
                "\"{original}\": not carried over: {}",
                ignored.join(", ")
            ));
        }
    }
    out.doc = json!({ "backends": backends });
    Ok(out)
}

fn backend(
    name: &str,
    original: &str,
    e: &Map<String, Value>,
    out: &mut Converted,
) -> Option<Value> {
    let mut b = Map::new();
    b.insert("name".into(), name.into());
    let url = e
        .get("url")
        .or_else(|| e.get("serverUrl"))
        .and_then(Value::as_str);
    let kind = e.get("type").and_then(Value::as_str);
    match (e.get("command").and_then(Value::as_str), url) {
        (Some(command), _) => {
            b.insert("command".into(), command.into());
            if let Some(args) = e.get("args").and_then(Value::as_array) {
                let args: Vec<Value> = args
                    .iter()
                    .map(|a| {
                        a.as_str()
                            .map_or_else(|| a.to_string(), str::to_owned)
                            .into()
                    })
                    .collect();
                if !args.is_empty() {
                    b.insert("args".into(), args.into());
                }
            }
            if let Some(cwd) = e.get("cwd").and_then(Value::as_str) {
                b.insert("cwd".into(), cwd.into());
            }
            if let Some(env) = references(name, e.get("env"), out) {
                b.insert("env".into(), env);
            }
        }
        (None, Some(url)) => {
            b.insert("url".into(), url.into());
            let transport = match kind {
                Some("http" | "streamable-http" | "streamableHttp" | "streamable") => {
                    Some("streamable")
                }
                Some("sse") => Some("sse"),
                None => None,
                Some(other) => {
                    out.notes
                        .push(format!("skipped \"{original}\": unknown type \"{other}\""));
                    return None;
                }
            };
            if let Some(t) = transport {
                b.insert("transport".into(), t.into());
            }
            if let Some(headers) = references(name, e.get("headers"), out) {
                b.insert("headers".into(), headers);
            }
        }
        (None, None) => {
            out.notes
                .push(format!("skipped \"{original}\": neither command nor url"));
            return None;
        }
    }
    Some(Value::Object(b))
}

/// `env` or `headers`: each literal value becomes `${BACKEND_KEY}` (its value goes to the
/// secrets); a value that already refers to a variable (`${VAR}`, Cursor's and VS Code's
/// `${env:VAR}`) stays a reference. VS Code's `${input:ID}` prompts have no value to carry:
/// they become `${ID}`, noted for the user to fill in.
fn references(backend: &str, map: Option<&Value>, out: &mut Converted) -> Option<Value> {
    let map = map?.as_object()?;
    let mut refs = Map::new();
    for (key, value) in map {
        let text = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        let reference = if text.contains("${") {
            rewrite_references(&text, backend, key, out)
        } else {
            let var = var_name(backend, key, out);
            out.secrets.push((var.clone(), text));
            format!("${{{var}}}")
        };
        refs.insert(key.clone(), reference.into());
    }
    (!refs.is_empty()).then_some(Value::Object(refs))
}

fn rewrite_references(text: &str, backend: &str, key: &str, out: &mut Converted) -> String {
    let mut result = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        result.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            result.push_str(&rest[start..]);
            return result;
        };
        let inner = &after[..end];
        let var = if let Some(v) = inner.strip_prefix("env:") {
            v.to_owned()
        } else if let Some(id) = inner.strip_prefix("input:") {
            let var = shout(id);
            out.notes.push(format!(
                "backend \"{backend}\" {key}: VS Code input \"{id}\" has no value here; set {var} in the environment or the secrets file"
            ));
            var
        } else {
            inner.to_owned()
        };
        result.push_str(&format!("${{{var}}}"));
        rest = &after[end + 1..];
    }
    result.push_str(rest);
    result
}

/// `BACKEND_KEY` in upper case, unique among the names taken so far.
fn var_name(backend: &str, key: &str, out: &Converted) -> String {
    let base = shout(&format!("{backend}_{key}"));
    let taken = |n: &str| out.secrets.iter().any(|(v, _)| v == n);
    let mut name = base.clone();
    let mut n = 2;
    while taken(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

fn shout(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A server name as a backend name, kept as written where it can be: anything outside
/// `[A-Za-z0-9_-]` → `-`, no leading or trailing `-`, at most 32 characters (`server` if
/// nothing is left). Case is kept: a backend's name prefixes its tools' names.
pub(crate) fn sanitize(original: &str) -> String {
    let mapped: String = original
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if mapped == original && !original.is_empty() && original.len() <= MAX_BACKEND_ID {
        return mapped;
    }
    // Runs of replaced characters read as one separator: "Linear (remote)" → Linear-remote.
    let mut collapsed = String::with_capacity(mapped.len());
    for c in mapped.chars() {
        if !(c == '-' && collapsed.ends_with('-')) {
            collapsed.push(c);
        }
    }
    let cut: String = collapsed
        .trim_matches('-')
        .chars()
        .take(MAX_BACKEND_ID)
        .collect();
    let cut = cut.trim_end_matches('-');
    if cut.is_empty() {
        "server".to_owned()
    } else {
        cut.to_owned()
    }
}

/// `name`, or `name-2`, `name-3`… (shortened to fit) if taken.
fn unique(name: &str, taken: &mut HashSet<String>) -> String {
    let mut candidate = name.to_owned();
    let mut n = 2;
    while taken.contains(&candidate) {
        let suffix = format!("-{n}");
        let keep = MAX_BACKEND_ID - suffix.len();
        candidate = format!("{}{suffix}", &name[..name.len().min(keep)]);
        n += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_backend_rule_and_stay_unique() {
        assert_eq!(sanitize("remA"), "remA");
        assert_eq!(sanitize("-lead_ing-"), "-lead_ing-");
        assert_eq!(sanitize("GitHub Server"), "GitHub-Server");
        assert_eq!(sanitize("Linear (remote)"), "Linear-remote");
        assert_eq!(sanitize("  @scope/pkg.v2 "), "scope-pkg-v2");
        assert_eq!(sanitize("Ünïcode"), "n-code");
        assert_eq!(sanitize("!!!"), "server");
        assert_eq!(sanitize(&"a".repeat(40)), "a".repeat(32));
        let mut taken = HashSet::new();
        assert_eq!(unique("x", &mut taken), "x");
        assert_eq!(unique("x", &mut taken), "x-2");
        assert_eq!(unique("x", &mut taken), "x-3");
        let long = "b".repeat(32);
        assert_eq!(unique(&long, &mut taken), long);
        assert_eq!(unique(&long, &mut taken), format!("{}-2", "b".repeat(30)));
        for name in taken {
            assert!(
                name.parse::<switchboard_core::BackendId>().is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn literals_become_references_and_references_stay() {
        let doc = json!({"mcpServers": {
            "A": {"command": "x", "env": {"TOKEN": "s3cret", "HOME_DIR": "${env:HOME}"}},
            "b": {"url": "https://h/mcp", "type": "http",
                  "headers": {"Authorization": "Bearer ${input:tok}", "X-Key": "k3y"}},
            "c": {"command": "y", "disabled": true},
        }});
        let c = convert(&doc).unwrap();
        let text = c.doc.to_string();
        assert!(!text.contains("s3cret") && !text.contains("k3y"), "{text}");
        assert_eq!(c.doc["backends"][0]["env"]["TOKEN"], "${A_TOKEN}");
        assert_eq!(c.doc["backends"][0]["env"]["HOME_DIR"], "${HOME}");
        assert_eq!(c.doc["backends"][1]["transport"], "streamable");
        assert_eq!(
            c.doc["backends"][1]["headers"]["Authorization"],
            "Bearer ${TOK}"
        );
        assert_eq!(c.doc["backends"][1]["headers"]["X-Key"], "${B_X_KEY}");
        assert_eq!(
            c.secrets,
            vec![
                ("A_TOKEN".into(), "s3cret".into()),
                ("B_X_KEY".into(), "k3y".into())
            ]
        );
        assert_eq!(
            c.mapping,
            vec![("A".into(), "A".into()), ("b".into(), "b".into())]
        );
        assert!(c.renamed.is_empty(), "{:?}", c.renamed);
        assert!(
            c.notes.iter().any(|n| n.contains("\"c\": disabled")),
            "{:?}",
            c.notes
        );
        assert!(c.notes.iter().any(|n| n.contains("TOK")), "{:?}", c.notes);
    }

    #[test]
    fn names_are_kept_and_renames_are_listed() {
        let doc = json!({"mcpServers": {
            "remA": {"command": "x"},
            "Linear (remote)": {"url": "https://h/mcp"},
            "rema": {"command": "y"},
        }});
        let c = convert(&doc).unwrap();
        let names: Vec<&str> = c.mapping.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["remA", "Linear-remote", "rema"]);
        assert_eq!(
            c.renamed,
            vec![("Linear (remote)".into(), "Linear-remote".into())]
        );
        let lines = c.rename_lines();
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("server \"Linear (remote)\" is backend \"Linear-remote\""),
            "{lines:?}"
        );
    }

    #[test]
    fn jsonc_comments_and_trailing_commas_are_read() {
        let text = r#"{
  // VS Code's mcp.json
  "servers": {
    /* a block
       comment */
    "remA": {"command": "x", "args": ["http://h/a//b", "/* not a comment */",],},
  },
}"#;
        let doc = parse_jsonc(text).unwrap();
        assert_eq!(
            doc,
            json!({"servers": {"remA": {"command": "x",
                "args": ["http://h/a//b", "/* not a comment */"]}}})
        );
        // Only JSONC: JSON5's single quotes and bare keys stay errors, with a position.
        let err = parse_jsonc("{\n  'a': 1}").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(parse_jsonc("{a: 1}").is_err());
    }

    proptest::proptest! {
        /// Whatever JSON a file holds, the JSONC reader reads it as JSON does.
        #[test]
        fn jsonc_reads_plain_json_as_json(value in json_value()) {
            let text = serde_json::to_string_pretty(&value).unwrap();
            proptest::prop_assert_eq!(parse_jsonc(&text).unwrap(), value);
        }

        /// A sanitized name is a backend name, and a backend name is kept as written.
        #[test]
        fn sanitized_names_are_backend_names(name in "\\PC{0,40}") {
            let s = sanitize(&name);
            proptest::prop_assert!(s.parse::<switchboard_core::BackendId>().is_ok(), "{}", s);
            proptest::prop_assert_eq!(sanitize(&s), s.clone());
            if name.parse::<switchboard_core::BackendId>().is_ok() {
                proptest::prop_assert_eq!(s, name);
            }
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            Just(Value::from("// /* */ \\\" ,]")),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::vec(("\\PC{0,6}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }
}
