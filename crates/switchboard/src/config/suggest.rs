//! "Did you mean": the nearest known word (a key the schema allows at that place, a backend
//! name, a program on `PATH`) to one the file got wrong.

use serde_json::Value;

/// The candidate closest to `word` by edit distance (a swap of two neighbours counts one;
/// case only breaks ties),
/// if it is close enough to be the likely intent: at most a third of the word's length
/// (one edit for short words, never more than three). Ties go to the first candidate.
pub(crate) fn nearest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    let lower = word.to_lowercase();
    let mut best: Option<((usize, usize), &str)> = None;
    for c in candidates {
        if c == word {
            continue;
        }
        // Letters first, case second: `remb` is nearer `remB` than `remA`.
        let d = (
            strsim::osa_distance(&lower, &c.to_lowercase()),
            strsim::osa_distance(word, c),
        );
        if d.0 <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// `message`, with `; did you mean "X"?` when a candidate is near `word`.
pub(crate) fn with_hint<'a>(
    message: impl Into<String>,
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    let message = message.into();
    match nearest(word, candidates) {
        Some(c) => format!("{message}; did you mean \"{c}\"?"),
        None => message,
    }
}

/// The keys the schema names for the object at `path` (the instance path's segments, as
/// strings; array indexes are digits): walked through `properties`, `items`,
/// `additionalProperties` and local `$ref`s. Empty where the walk loses its way.
pub(crate) fn schema_keys(schema: &Value, path: &[String]) -> Vec<String> {
    let mut at = resolve(schema, schema);
    for segment in path {
        let Some(node) = at else { return Vec::new() };
        let next = match node.get("properties").and_then(|p| p.get(segment)) {
            Some(s) => Some(s),
            None if node.get("items").is_some() && segment.parse::<usize>().is_ok() => {
                node.get("items")
            }
            None => node.get("additionalProperties").filter(|a| a.is_object()),
        };
        at = next.and_then(|n| resolve(schema, n));
    }
    at.and_then(|n| n.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Follows `{"$ref": "#/..."}` (a bounded number of times) to the schema it names.
fn resolve<'a>(schema: &'a Value, mut node: &'a Value) -> Option<&'a Value> {
    for _ in 0..16 {
        match node.get("$ref").and_then(Value::as_str) {
            Some(r) => node = schema.pointer(r.strip_prefix('#')?)?,
            None => return Some(node),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_nearest_close_word_is_suggested() {
        let keys = ["command", "args", "env", "cwd", "url"];
        assert_eq!(nearest("comand", keys), Some("command"));
        assert_eq!(nearest("commnad", keys), Some("command"));
        assert_eq!(nearest("Command", keys), Some("command"));
        assert_eq!(nearest("agrs", keys), Some("args"));
        assert_eq!(nearest("zzzzzz", keys), None);
        assert_eq!(nearest("command", keys), None, "an exact word is no typo");
        assert_eq!(nearest("remb", ["remA", "remB"]), Some("remB"));
        assert_eq!(
            with_hint("unknown key", "hots", ["host", "port"]),
            "unknown key; did you mean \"host\"?"
        );
        assert_eq!(with_hint("unknown key", "xyz", ["host"]), "unknown key");
    }

    #[test]
    fn keys_are_found_through_refs_items_and_maps() {
        let schema = json!({
            "properties": {
                "backends": {"items": {"$ref": "#/$defs/backend"}},
                "listen": {"properties": {"host": {}, "port": {}}},
            },
            "$defs": {
                "backend": {"properties": {"command": {}, "tools": {"$ref": "#/$defs/tools"}}},
                "tools": {"additionalProperties": {"properties": {"name": {}, "title": {}}}},
            }
        });
        let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(schema_keys(&schema, &path(&["listen"])), ["host", "port"]);
        assert_eq!(
            schema_keys(&schema, &path(&["backends", "2"])),
            ["command", "tools"]
        );
        assert_eq!(
            schema_keys(&schema, &path(&["backends", "0", "tools", "echo"])),
            ["name", "title"]
        );
        assert!(schema_keys(&schema, &path(&["nowhere"])).is_empty());
        assert_eq!(schema_keys(&schema, &[]), ["backends", "listen"]);
    }
}
