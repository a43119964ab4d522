//! JSON text into a `serde_json::Value`, reading what the text says and nothing more.
//!
//! `Value`'s own deserializer, with serde_json's `raw_value` feature (which this workspace
//! enables), treats an object whose first key is `$serde_json::private::RawValue` as a
//! string of JSON to parse again: a hostile client, backend or API hides any structure in a
//! string, past a size estimate that does not read strings and with a fresh nesting limit,
//! and what the gateway checks is not what the next reader reads. Here an object is an
//! object and a string a string, whatever its keys. (A client's message never holds that key:
//! the strict scan refuses it.)

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// `text` as a `Value`, keys read as plain strings (a repeated key: the last one's value).
pub fn parse(text: &[u8]) -> Result<Value, serde_json::Error> {
    read(text, Plain { unique: false })
}

/// `text` as a `Value` that holds all of it: an object repeating a key (after unescaping) is
/// refused, since the `Value` would hold one value where the text shows two. For a checker
/// that must see every string a reader of the text may see (guardrails).
pub fn parse_unique(text: &[u8]) -> Result<Value, serde_json::Error> {
    read(text, Plain { unique: true })
}

fn read(text: &[u8], seed: Plain) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(text);
    let value = seed.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The seed (and visitor) of one value; `unique`: a repeated key is an error.
#[derive(Clone, Copy)]
struct Plain {
    unique: bool,
}

impl<'de> DeserializeSeed<'de> for Plain {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Plain {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            if members.insert(key, value).is_some() && self.unique {
                return Err(A::Error::custom("an object repeats a key"));
            }
        }
        Ok(Value::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, parse_unique};
    use serde_json::{json, Value};

    /// JSON is read as written: serde_json's own `Value` (with `raw_value`, as this
    /// workspace builds it) parses a string again as JSON behind the key
    /// `$serde_json::private::RawValue`, in any escaped spelling, past `parsed_size` (which does
    /// not read strings) and with a fresh nesting limit (review HIGH).
    #[test]
    fn a_string_is_a_string_whatever_its_key() {
        let body = br#"{"$serde_json::private::RawValue":"[[0],[0]]","b":{"\u0024serde_json::private::RawValue":"{}"}}"#;
        let plain = parse(body).unwrap();
        assert_eq!(plain["$serde_json::private::RawValue"], "[[0],[0]]");
        assert_eq!(plain["b"]["$serde_json::private::RawValue"], "{}");
        // What it guards against: serde_json's own reading of such a text.
        let alone = br#"{"$serde_json::private::RawValue":"[[0],[0]]"}"#;
        let own: Value = serde_json::from_slice(alone).unwrap();
        assert_eq!(own, json!([[0], [0]]));
        assert_eq!(
            parse(alone).unwrap()["$serde_json::private::RawValue"],
            "[[0],[0]]"
        );
        // Otherwise the same: trailing text refused, nesting bounded, numbers kept.
        assert!(parse(b"[1] x").is_err());
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse(deep.as_bytes()).is_err());
        let numbers = br#"[1,-2,3.5,18446744073709551615,true,null,"s"]"#;
        let own: Value = serde_json::from_slice(numbers).unwrap();
        assert_eq!(parse(numbers).unwrap(), own);
    }

    #[test]
    fn parse_unique_refuses_a_repeated_key_at_any_depth() {
        for text in [r#"{"a":1,"a":2}"#, r#"[{"b":{"a":1,"\u0061":2}}]"#] {
            assert_eq!(
                parse(text.as_bytes())
                    .unwrap()
                    .to_string()
                    .matches("2")
                    .count(),
                1
            );
            assert!(parse_unique(text.as_bytes()).is_err(), "{text}");
        }
        let fine = br#"{"a":{"a":1},"A":[{"a":2}],"$serde_json::private::RawValue":"{}"}"#;
        assert_eq!(parse_unique(fine).unwrap(), parse(fine).unwrap());
    }
}
