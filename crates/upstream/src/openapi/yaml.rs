//! A YAML spec into a JSON value, counting every node as it is built: YAML aliases are
//! expanded by replaying what they name, so a 100 KB document of aliases of aliases can
//! stand for billions of nodes. The count stops it at [`MAX_NODES`] or eight times the
//! text's length, whichever is less (no alias-free text comes near that), before it is built.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess};
use serde::de::{VariantAccess, Visitor};
use serde_json::{Map, Value};

use super::error::SpecError;

/// Most nodes a YAML spec may have once its aliases are expanded.
pub(crate) const MAX_NODES: usize = 2_000_000;
/// Deepest nesting accepted (JSON text is held to serde_json's own 128).
const MAX_DEPTH: usize = 128;

/// Nodes left, and why the walk stopped (when it was a bound, not the YAML).
struct State {
    left: Cell<usize>,
    stopped: Cell<Option<&'static str>>,
}

/// `text` (YAML) as a JSON value; mapping keys that are scalars become strings.
pub(crate) fn parse(text: &str) -> Result<Value, SpecError> {
    let limit = MAX_NODES.min(text.len().saturating_mul(8).saturating_add(1024));
    let state = State {
        left: Cell::new(limit),
        stopped: Cell::new(None),
    };
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let node = Node {
        state: &state,
        depth: 0,
    };
    node.deserialize(de).map_err(|e| match state.stopped.get() {
        Some("nodes") => SpecError::new(
            "",
            format!("more than {limit} nodes once its YAML aliases are expanded"),
        ),
        Some(why) => SpecError::new("", why),
        None => {
            let at = e
                .location()
                .map(|l| format!("line {}, column {}: ", l.line(), l.column()))
                .unwrap_or_default();
            SpecError::new("", format!("not valid YAML or JSON: {at}{e}"))
        }
    })
}

#[derive(Clone, Copy)]
struct Node<'s> {
    state: &'s State,
    depth: usize,
}

impl Node<'_> {
    fn stop<E: de::Error>(&self, why: &'static str) -> E {
        self.state.stopped.set(Some(why));
        E::custom(why)
    }

    fn child(&self) -> Self {
        Node {
            state: self.state,
            depth: self.depth + 1,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let left = self.state.left.get();
        if left == 0 {
            return Err(self.stop("nodes"));
        }
        self.state.left.set(left - 1);
        if self.depth > MAX_DEPTH {
            return Err(self.stop("nested deeper than 128 levels"));
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.child().deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self.child())? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key_seed(Key)? {
            let v = map.next_value_seed(self.child())?;
            if out.insert(k, v).is_some() {
                return Err(de::Error::custom("a mapping has a key twice"));
            }
        }
        Ok(Value::Object(out))
    }
    /// A tagged value (`!tag value`): the value, its tag ignored.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        let (_, variant) = data.variant::<de::IgnoredAny>()?;
        variant.newtype_variant_seed(self.child())
    }
}

/// A mapping key: a scalar, as a string (`200:` is `"200"`).
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Key {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scalar mapping key")
    }
    fn visit_bool<E>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_unit<E>(self) -> Result<String, E> {
        Ok("null".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_that_multiply_are_refused_before_they_are_built() {
        let items = vec!["x"; 1000].join(",");
        let refs = vec!["*a"; 1000].join(",");
        let text = format!("openapi: 3.0.3\na: &a [{items}]\nb: [{refs}]\n");
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("YAML aliases"), "{e}");
        // A few aliases are fine.
        let v = parse("a: &a {k: 1}\nb: *a\n200: !tagged [1]\n").unwrap();
        assert_eq!(v["b"]["k"], 1);
        assert_eq!(v["200"], serde_json::json!([1]));
        assert!(parse("a: 1\na: 2\n").is_err());
        assert!(parse("? [1]\n: x\n").is_err());
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(parse(&format!("a: {deep}\n")).is_err());
    }
}
