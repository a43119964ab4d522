//! A small BM25 index over tool definitions: names, titles, descriptions and the names and
//! descriptions of their input properties, each field weighted by how much it says about
//! what the tool does. A few hundred to a few thousand tools index in well under a
//! millisecond per hundred; the index is rebuilt only when the merged list is.
//!
//! Hand-rolled rather than a search-engine crate: the corpus is small and in memory, and the
//! ranking needs nothing but term frequencies (tantivy would add minutes to every build).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

/// BM25's term-frequency saturation and length normalisation (the usual values).
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// How much one occurrence in each field counts: a word in a tool's name says more about it
/// than one in a property's description.
const NAME: f32 = 3.0;
const TITLE: f32 = 2.0;
const DESCRIPTION: f32 = 1.0;
const PROPERTY: f32 = 1.5;
const PROPERTY_DESCRIPTION: f32 = 0.5;

/// Terms read from one field at most (a hostile 1 MB description must not dominate memory).
const MAX_FIELD_TERMS: usize = 512;

/// Words that say nothing about a tool.
const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "i", "in", "is", "it", "of",
    "on", "or", "that", "the", "this", "to", "with", "me", "my", "some", "can", "you", "want",
];

/// One indexed tool.
#[derive(Debug)]
struct Doc {
    exposed: Arc<str>,
    /// Weighted term frequencies.
    terms: HashMap<String, f32>,
    len: f32,
}

/// The index over one merged tool list.
#[derive(Debug, Default)]
pub(crate) struct Index {
    docs: Vec<Doc>,
    /// Documents containing each term.
    df: HashMap<String, u32>,
    avg_len: f32,
}

impl Index {
    /// Indexes `tools`: (exposed name, the item as listed).
    pub(crate) fn build<'a>(tools: impl Iterator<Item = (&'a Arc<str>, &'a Value)>) -> Self {
        let mut index = Index::default();
        for (exposed, item) in tools {
            let doc = document(exposed, item);
            for term in doc.terms.keys() {
                *index.df.entry(term.clone()).or_default() += 1;
            }
            index.docs.push(doc);
        }
        let total: f32 = index.docs.iter().map(|d| d.len).sum();
        index.avg_len = total / (index.docs.len().max(1) as f32);
        index
    }

    /// The exposed names matching `query`, best first, with their scores (only tools that
    /// share at least one term with it; ties in list order).
    pub(crate) fn search(&self, query: &str) -> Vec<(Arc<str>, f32)> {
        let mut terms = Vec::new();
        tokens(query, &mut |t| terms.push(t));
        terms.sort();
        terms.dedup();
        let n = self.docs.len() as f32;
        let mut hits: Vec<(usize, f32)> = Vec::new();
        for (i, doc) in self.docs.iter().enumerate() {
            let mut score = 0.0;
            for term in &terms {
                let (Some(tf), Some(df)) = (doc.terms.get(term), self.df.get(term)) else {
                    continue;
                };
                let df = *df as f32;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                let norm = K1 * (1.0 - B + B * doc.len / self.avg_len.max(f32::EPSILON));
                score += idf * tf * (K1 + 1.0) / (tf + norm);
            }
            if score > 0.0 {
                hits.push((i, score));
            }
        }
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.into_iter()
            .map(|(i, s)| (self.docs[i].exposed.clone(), s))
            .collect()
    }
}

fn document(exposed: &Arc<str>, item: &Value) -> Doc {
    let mut terms: HashMap<String, f32> = HashMap::new();
    let mut add = |text: &str, weight: f32| {
        let mut n = 0;
        tokens(text, &mut |t| {
            if n < MAX_FIELD_TERMS {
                *terms.entry(t).or_default() += weight;
                n += 1;
            }
        });
    };
    add(exposed, NAME);
    let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default();
    add(text("title"), TITLE);
    add(text("description"), DESCRIPTION);
    let properties = item
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object);
    for (name, schema) in properties.into_iter().flatten().take(MAX_FIELD_TERMS) {
        add(name, PROPERTY);
        let about = schema.get("description").and_then(Value::as_str);
        add(about.unwrap_or_default(), PROPERTY_DESCRIPTION);
    }
    let len = terms.values().sum();
    Doc {
        exposed: exposed.clone(),
        terms,
        len,
    }
}

/// The search terms of `text`: words split at non-alphanumerics and at lower→upper case
/// changes (`listPullRequests`, `list_pull_requests` and `list pull requests` agree),
/// lowercased, stop words dropped, a plural `s` folded.
fn tokens(text: &str, out: &mut impl FnMut(String)) {
    let mut word = String::new();
    let mut prev_lower = false;
    let mut flush = |word: &mut String| {
        if !word.is_empty() {
            let term = fold(word);
            if !STOP.contains(&term.as_str()) {
                out(term);
            }
            word.clear();
        }
    };
    for c in text.chars() {
        if !c.is_alphanumeric() {
            flush(&mut word);
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            flush(&mut word);
        }
        prev_lower = c.is_lowercase() || c.is_numeric();
        word.extend(c.to_lowercase());
    }
    flush(&mut word);
}

/// `issues` → `issue`, `repositories` → `repository`, `address` stays.
fn fold(word: &str) -> String {
    if word.len() > 4 && word.ends_with("ies") {
        return format!("{}y", &word[..word.len() - 3]);
    }
    if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") && !word.ends_with("us") {
        return word[..word.len() - 1].to_owned();
    }
    word.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn terms(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        tokens(text, &mut |t| out.push(t));
        out
    }

    #[test]
    fn names_split_the_same_whatever_their_style() {
        let want = ["list", "pull", "request"];
        assert_eq!(terms("listPullRequests"), want);
        assert_eq!(terms("list_pull_requests"), want);
        assert_eq!(terms("List the pull requests"), want);
        assert_eq!(terms("repositories address"), ["repository", "address"]);
    }

    fn index(tools: &[(&str, Value)]) -> Index {
        let names: Vec<(Arc<str>, Value)> = tools
            .iter()
            .map(|(n, v)| (Arc::from(*n), v.clone()))
            .collect();
        Index::build(names.iter().map(|(n, v)| (n, v)))
    }

    #[test]
    fn the_tool_named_for_the_task_ranks_first() {
        let idx = index(&[
            (
                "list_issues",
                json!({"description": "List issues of a repository"}),
            ),
            (
                "create_pull_request",
                json!({"description": "Open a pull request from a branch"}),
            ),
            (
                "create_issue",
                json!({"description": "Create an issue in a repository",
                    "inputSchema": {"properties": {"title": {}, "body": {}}}}),
            ),
        ]);
        let hits = idx.search("create a new issue");
        assert_eq!(&*hits[0].0, "create_issue", "{hits:?}");
        assert!(hits.iter().all(|(n, _)| &**n != "nothing"));
        let hits = idx.search("pull request");
        assert_eq!(&*hits[0].0, "create_pull_request", "{hits:?}");
        assert!(idx.search("weather forecast").is_empty());
    }

    #[test]
    fn a_huge_description_is_read_only_so_far() {
        let long = "word ".repeat(100_000);
        let idx = index(&[("t", json!({ "description": long }))]);
        assert!(idx.docs[0].len <= NAME + MAX_FIELD_TERMS as f32 * DESCRIPTION);
    }
}
