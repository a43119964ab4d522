//! A spec's schema as a self-contained JSON Schema: every local `$ref` inlined (a reference
//! back into a schema being inlined is cut: replaced by an open schema that says so), OpenAPI
//! 3.0's dialect turned into JSON Schema (`nullable`, boolean `exclusiveMinimum`/`Maximum`),
//! `oneOf`/`anyOf`/`allOf` kept as they are. Bounded in size and depth, so a spec whose
//! references multiply cannot blow up memory or the stack.

use std::cell::Cell;

use serde_json::{json, Map, Value};

use super::spec::{lookup, Version};

/// Most schema nodes one inlined schema may have.
const MAX_NODES: usize = 20_000;
/// Deepest nesting of an inlined schema (references included).
const MAX_DEPTH: usize = 64;

/// What every inlined schema of one catalog shares: nodes left. At zero the catalog fails
/// (the caller checks [`spent`]): a spec of many operations, each just under the bound of one
/// schema, cannot add up to more.
pub(crate) type Budget = Cell<usize>;

/// Whether `budget` ran out.
pub(crate) fn spent(budget: &Budget) -> bool {
    budget.get() == 0
}

/// Inlines `schema` from `doc`, spending `budget`.
pub(crate) fn inline(
    doc: &Value,
    version: Version,
    schema: &Value,
    budget: &Budget,
) -> Result<Value, String> {
    let mut walk = Walk {
        doc,
        version,
        stack: Vec::new(),
        nodes: 0,
        budget,
    };
    walk.node(schema, 0)
}

struct Walk<'a> {
    doc: &'a Value,
    version: Version,
    /// The references being inlined, outermost first (a cycle is one already here).
    stack: Vec<String>,
    nodes: usize,
    budget: &'a Budget,
}

impl Walk<'_> {
    fn node(&mut self, v: &Value, depth: usize) -> Result<Value, String> {
        let left = self.budget.get();
        if left == 0 {
            return Err(
                "the spec's schemas are too large in all once their $refs are resolved".into(),
            );
        }
        self.budget.set(left - 1);
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(format!(
                "schema has more than {MAX_NODES} nodes once its $refs are resolved"
            ));
        }
        if depth > MAX_DEPTH {
            return Err(format!(
                "schema is nested deeper than {MAX_DEPTH} levels once its $refs are resolved"
            ));
        }
        match v {
            Value::Object(map) => match map.get("$ref").and_then(Value::as_str) {
                Some(reference) => self.reference(reference, map, depth),
                None => self.object(map, depth),
            },
            Value::Array(items) => items
                .iter()
                .map(|i| self.node(i, depth + 1))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            other => Ok(other.clone()),
        }
    }

    fn reference(
        &mut self,
        reference: &str,
        map: &Map<String, Value>,
        depth: usize,
    ) -> Result<Value, String> {
        if self.stack.iter().any(|r| r == reference) {
            return Ok(json!({
                "description": format!("(recursive: {reference}, not expanded)")
            }));
        }
        let target = lookup(self.doc, reference)?;
        self.stack.push(reference.to_owned());
        let resolved = self.node(target, depth + 1);
        self.stack.pop();
        let mut resolved = resolved?;
        // 3.1 allows keywords beside `$ref` (a description, say): they apply too.
        let siblings: Map<String, Value> = map
            .iter()
            .filter(|(k, _)| k.as_str() != "$ref")
            .map(|(k, v)| Ok((k.clone(), self.node(v, depth + 1)?)))
            .collect::<Result<_, String>>()?;
        // Annotations beside it describe the target; any other keyword constrains it as
        // well as the target's own (both hold, as 2020-12 says): an `allOf`, never a merge
        // that would replace the target's `maxLength` or `properties` with the sibling's.
        let (notes, rules): (Map<String, Value>, Map<String, Value>) = siblings
            .into_iter()
            .partition(|(k, _)| ANNOTATIONS.contains(&k.as_str()));
        match resolved.as_object_mut() {
            Some(obj) if rules.is_empty() => {
                obj.extend(notes);
                Ok(resolved)
            }
            _ => {
                let mut all = rules;
                all.extend(notes);
                // The target's type at the top too, where a parameter's style is read.
                if let Some(kind) = resolved.get("type") {
                    all.entry("type").or_insert_with(|| kind.clone());
                }
                all.insert("allOf".into(), json!([resolved]));
                Ok(Value::Object(all))
            }
        }
    }

    fn object(&mut self, map: &Map<String, Value>, depth: usize) -> Result<Value, String> {
        let mut out = Map::new();
        for (k, v) in map {
            out.insert(k.clone(), self.node(v, depth + 1)?);
        }
        if self.version == Version::V30 {
            dialect_30(&mut out);
        }
        Ok(Value::Object(out))
    }
}

/// OpenAPI 3.0's keywords as JSON Schema says them.
fn dialect_30(s: &mut Map<String, Value>) {
    if let Some(Value::Bool(nullable)) = s.get("nullable").cloned() {
        s.remove("nullable");
        if nullable {
            allow_null(s);
        }
    }
    for (flag, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if let Some(Value::Bool(exclusive)) = s.get(flag).cloned() {
            s.remove(flag);
            if exclusive {
                if let Some(b) = s.remove(bound) {
                    s.insert(flag.into(), b);
                }
            }
        }
    }
}

fn allow_null(s: &mut Map<String, Value>) {
    match s.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            s.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) if !types.contains(&json!("null")) => types.push(json!("null")),
        Some(_) => {}
        None => {
            let inner = Value::Object(std::mem::take(s));
            s.insert("anyOf".into(), json!([inner, {"type": "null"}]));
            return;
        }
    }
    if let Some(Value::Array(e)) = s.get_mut("enum") {
        if !e.contains(&Value::Null) {
            e.push(Value::Null);
        }
    }
}

/// Whether a schema describes only JSON objects (what MCP requires at an `outputSchema`'s root).
pub(crate) fn is_object(s: &Value) -> bool {
    match s.get("type") {
        Some(t) => t == "object",
        None => {
            s.get("properties").is_some()
                || s.get("allOf")
                    .and_then(Value::as_array)
                    .is_some_and(|all| !all.is_empty() && all.iter().any(is_object))
        }
    }
}

/// Keywords that describe a schema without constraining it.
const ANNOTATIONS: [&str; 9] = [
    "description",
    "title",
    "example",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn inline(doc: &Value, version: Version, schema: &Value) -> Result<Value, String> {
        super::inline(doc, version, schema, &Cell::new(1_000_000))
    }

    fn doc() -> Value {
        json!({"components": {"schemas": {
            "Node": {"type": "object", "properties": {
                "value": {"type": "integer"},
                "next": {"$ref": "#/components/schemas/Node"}}},
            "Pet": {"allOf": [{"$ref": "#/components/schemas/Base"},
                {"type": "object", "properties": {"tag": {"type": "string", "nullable": true}}}]},
            "Base": {"type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"}, "age": {"type": "integer",
                    "minimum": 0, "exclusiveMinimum": true}}},
            "Bomb": {"type": "array", "items": [
                {"$ref": "#/components/schemas/Bomb2"}, {"$ref": "#/components/schemas/Bomb2"}]},
            "Bomb2": {"type": "array", "items": [
                {"$ref": "#/components/schemas/Bomb3"}, {"$ref": "#/components/schemas/Bomb3"}]},
            "Bomb3": {"type": "string"}
        }}})
    }

    #[test]
    fn references_are_inlined_and_cycles_cut() {
        let d = doc();
        let node = inline(
            &d,
            Version::V31,
            &json!({"$ref": "#/components/schemas/Node"}),
        )
        .unwrap();
        assert_eq!(node["properties"]["value"]["type"], "integer");
        let cut = &node["properties"]["next"];
        assert!(
            cut["description"].as_str().unwrap().contains("recursive"),
            "{cut}"
        );
        assert!(cut.get("$ref").is_none());
    }

    #[test]
    fn the_30_dialect_becomes_json_schema_and_all_of_is_kept() {
        let d = doc();
        let pet = inline(
            &d,
            Version::V30,
            &json!({"$ref": "#/components/schemas/Pet"}),
        )
        .unwrap();
        let base = &pet["allOf"][0];
        assert_eq!(base["required"], json!(["name"]));
        assert_eq!(base["properties"]["age"]["exclusiveMinimum"], 0);
        assert!(base["properties"]["age"].get("minimum").is_none());
        assert_eq!(
            pet["allOf"][1]["properties"]["tag"]["type"],
            json!(["string", "null"])
        );
        assert!(is_object(&pet));
        let same = inline(
            &d,
            Version::V31,
            &json!({"$ref": "#/components/schemas/Bomb"}),
        );
        assert!(same.is_ok());
    }

    /// Review: keywords beside a `$ref` replaced the target's (`maxLength: 64` over its 4,
    /// `properties: {note}` over its `amount`): both must hold.
    #[test]
    fn keywords_beside_a_reference_constrain_with_the_target() {
        let d = json!({"components": {"schemas": {
            "Id": {"type": "string", "maxLength": 4, "pattern": "^[a-z]+$"},
            "Transfer": {"type": "object", "required": ["amount"],
                "properties": {"amount": {"type": "integer"}}}}}});
        let id = json!({"$ref": "#/components/schemas/Id", "maxLength": 64, "pattern": "^.*$",
            "description": "id"});
        let id = inline(&d, Version::V31, &id).unwrap();
        let check = jsonschema::validator_for(&id).unwrap();
        assert!(!check.is_valid(&json!("UPPER-and-long-XYZ")), "{id}");
        assert!(check.is_valid(&json!("abc")), "{id}");
        assert_eq!(id["type"], "string", "{id}");
        assert_eq!(id["description"], "id", "{id}");
        let transfer = json!({"$ref": "#/components/schemas/Transfer",
            "properties": {"note": {"type": "string"}}});
        let transfer = inline(&d, Version::V31, &transfer).unwrap();
        let check = jsonschema::validator_for(&transfer).unwrap();
        assert!(
            check.is_valid(&json!({"amount": 5, "note": "x"})),
            "{transfer}"
        );
        assert!(!check.is_valid(&json!({"note": "x"})), "{transfer}");
        // A description alone is merged: the schema stays as plain as it was.
        let plain = json!({"$ref": "#/components/schemas/Id", "description": "d"});
        let plain = inline(&d, Version::V31, &plain).unwrap();
        assert!(
            plain.get("allOf").is_none() && plain["maxLength"] == 4,
            "{plain}"
        );
    }

    #[test]
    fn dangling_and_external_references_are_errors() {
        let d = doc();
        assert!(inline(
            &d,
            Version::V31,
            &json!({"$ref": "#/components/schemas/Nope"})
        )
        .is_err());
        assert!(inline(&d, Version::V31, &json!({"$ref": "x.yaml#/A"})).is_err());
    }

    #[test]
    fn references_that_multiply_are_bounded() {
        let mut schemas = Map::new();
        for i in 0..40 {
            let next = format!("#/components/schemas/S{}", i + 1);
            schemas.insert(
                format!("S{i}"),
                json!({"type": "object", "properties": {
                "a": {"$ref": next}, "b": {"$ref": next}}}),
            );
        }
        schemas.insert("S40".into(), json!({"type": "string"}));
        let d = json!({"components": {"schemas": schemas}});
        let e = inline(
            &d,
            Version::V31,
            &json!({"$ref": "#/components/schemas/S0"}),
        )
        .unwrap_err();
        assert!(e.contains("nodes") || e.contains("deeper"), "{e}");
    }
}
