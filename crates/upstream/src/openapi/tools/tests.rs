use serde_json::{json, Map};

use super::*;

pub(crate) const PETS: &str = r##"
openapi: 3.0.3
info: {title: Pets, version: "1.2"}
servers: [{url: "http://elsewhere.invalid/api"}]
paths:
  /pets:
    get:
      operationId: listPets
      summary: List pets
      parameters:
        - {name: tag, in: query, schema: {type: array, items: {type: string}}}
        - {name: limit, in: query, required: true, schema: {type: integer}}
        - {name: X-Trace, in: header, schema: {type: string}}
        - {name: Accept, in: header, schema: {type: string}}
      responses:
        200:
          description: ok
          content:
            application/json:
              schema: {type: array, items: {$ref: "#/components/schemas/Pet"}}
    post:
      operationId: createPet
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/Pet"}
      responses:
        "201":
          description: made
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Pet"}
  /pets/{petId}:
    parameters:
      - {name: petId, in: path, required: true, schema: {type: string}}
    get:
      responses: {"200": {description: ok}}
    delete:
      operationId: deletePet
      responses: {"204": {description: gone}}
  /upload:
    put:
      operationId: upload
      requestBody:
        required: true
        content: {application/octet-stream: {schema: {type: string}}}
      responses: {"200": {description: ok}}
components:
  schemas:
    Pet:
      allOf:
        - {$ref: "#/components/schemas/Named"}
        - type: object
          properties:
            tag: {type: string, nullable: true}
    Named:
      type: object
      required: [name]
      properties: {name: {type: string}}
"##;

fn catalog() -> (Catalog, Vec<Skipped>) {
    let doc = crate::openapi::parse(PETS).unwrap();
    Catalog::from_document(&doc).unwrap()
}

fn def<'a>(c: &'a Catalog, name: &str) -> &'a Value {
    &c.get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .definition
}

#[test]
fn one_tool_per_operation_named_by_operation_id_else_method_and_path() {
    let (c, skipped) = catalog();
    let names: Vec<&str> = c.names().collect();
    assert_eq!(
        names,
        ["listPets", "createPet", "get_pets_petId", "deletePet"]
    );
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].pointer, "#/paths/~1upload/put");
    assert!(skipped[0].operation.contains("upload"), "{}", skipped[0]);
    assert!(
        skipped[0].why.contains("application/octet-stream"),
        "{}",
        skipped[0]
    );
    assert_eq!(c.title, "Pets");
}

#[test]
fn input_schemas_carry_parameters_and_the_body() {
    let (c, _) = catalog();
    let list = &def(&c, "listPets")["inputSchema"];
    assert_eq!(list["properties"]["tag"]["type"], "array");
    assert_eq!(list["properties"]["X-Trace"]["type"], "string");
    assert!(list["properties"].get("Accept").is_none(), "{list}");
    assert_eq!(list["required"], json!(["limit"]));
    assert_eq!(list["additionalProperties"], false);
    let create = &def(&c, "createPet")["inputSchema"];
    assert_eq!(create["required"], json!(["body"]));
    let body = &create["properties"]["body"];
    assert_eq!(body["allOf"][0]["required"], json!(["name"]));
    assert_eq!(
        body["allOf"][1]["properties"]["tag"]["type"],
        json!(["string", "null"])
    );
    let get = &def(&c, "get_pets_petId")["inputSchema"];
    assert_eq!(get["required"], json!(["petId"]));
}

#[test]
fn output_schemas_and_annotations() {
    let (c, _) = catalog();
    let list = def(&c, "listPets");
    assert_eq!(list["outputSchema"]["type"], "object");
    assert_eq!(
        list["outputSchema"]["properties"]["result"]["type"],
        "array"
    );
    assert!(c.get("listPets").unwrap().wrapped);
    let create = def(&c, "createPet");
    assert_eq!(create["outputSchema"]["type"], "object");
    assert!(!c.get("createPet").unwrap().wrapped);
    assert!(def(&c, "deletePet").get("outputSchema").is_none());
    assert_eq!(list["annotations"]["readOnlyHint"], true);
    assert_eq!(list["annotations"]["idempotentHint"], true);
    assert_eq!(list["title"], "List pets");
    let delete = &def(&c, "deletePet")["annotations"];
    assert_eq!(delete["destructiveHint"], true);
    assert_eq!(delete["readOnlyHint"], false);
    assert_eq!(def(&c, "createPet")["annotations"]["idempotentHint"], false);
}

#[test]
fn names_fit_the_rule_and_stay_unique() {
    assert_eq!(normalise("get /a.b/{c}"), "get_a_b_c");
    assert_eq!(normalise(&"x".repeat(100)).len(), 64);
    assert_eq!(normalise("///"), "operation");
    let long = "a".repeat(70);
    let doc = json!({"openapi": "3.1.0", "paths": {
        "/one": {"get": {"operationId": long, "responses": {}}},
        "/two": {"get": {"operationId": long, "responses": {}}}}});
    let (c, _) = Catalog::from_document(&doc).unwrap();
    let names: Vec<&str> = c.names().collect();
    assert_eq!(names[0].len(), 64);
    assert_eq!(names[1].len(), 64);
    assert!(names[1].ends_with("_2"), "{names:?}");
}

#[test]
fn unconvertible_operations_are_skipped_and_a_spec_without_tools_fails() {
    let doc = json!({"openapi": "3.1.0", "paths": {
        "/a/{id}": {"get": {"operationId": "noParam", "responses": {}}},
        "/b": {"get": {"operationId": "dangling", "parameters": [
            {"name": "q", "in": "query", "schema": {"$ref": "#/components/schemas/Gone"}}],
            "responses": {}}}}});
    let e = Catalog::from_document(&doc).unwrap_err();
    assert_eq!(e.pointer, "#/paths");
    assert!(e.message.contains("no operation"), "{e}");
    let mut doc = doc;
    doc["paths"]["/c"] = json!({"get": {"operationId": "fine", "responses": {}}});
    let (c, skipped) = Catalog::from_document(&doc).unwrap();
    assert_eq!(c.names().collect::<Vec<_>>(), ["fine"]);
    let whys: Vec<String> = skipped.iter().map(ToString::to_string).collect();
    assert!(whys[0].contains("{id} has no parameter"), "{whys:?}");
    assert!(whys[1].contains("does not resolve"), "{whys:?}");
}

#[test]
fn trace_operations_are_skipped_for_they_echo_credentials() {
    let doc = json!({"openapi": "3.1.0", "paths": {
        "/echo": {"get": {"operationId": "echo", "responses": {}},
            "trace": {"operationId": "traceEcho", "responses": {}}}}});
    let (c, skipped) = Catalog::from_document(&doc).unwrap();
    assert_eq!(c.names().collect::<Vec<_>>(), ["echo"]);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].pointer, "#/paths/~1echo/trace");
    assert!(
        skipped[0].why.contains("TRACE echoes the request"),
        "{}",
        skipped[0]
    );
}

/// `n` operations, each with a query parameter, a body and a response of one schema of
/// about `2^depth * 4` nodes (under the bound of one schema).
fn doubling(n: usize, depth: usize) -> Value {
    let mut schemas = Map::new();
    for i in 0..depth {
        let next = format!("#/components/schemas/S{}", i + 1);
        schemas.insert(
            format!("S{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": next}, "b": {"$ref": next}}}),
        );
    }
    schemas.insert(format!("S{depth}"), json!({"type": "string"}));
    let s0 = json!({"$ref": "#/components/schemas/S0"});
    let mut paths = Map::new();
    for i in 0..n {
        paths.insert(
            format!("/p{i}"),
            json!({"post": {"operationId": format!("op{i}"),
            "parameters": [{"name": "q", "in": "query", "schema": s0}],
            "requestBody": {"content": {"application/json": {"schema": s0}}},
            "responses": {"200": {"description": "ok",
                "content": {"application/json": {"schema": s0}}}}}}),
        );
    }
    json!({"openapi": "3.1.0", "paths": paths, "components": {"schemas": schemas}})
}

#[test]
fn the_schemas_of_a_whole_catalog_share_one_node_budget() {
    let limits = Limits {
        nodes: 100_000,
        ..Limits::DEFAULT
    };
    // 3 operations × 3 schemas × ~4k nodes fit; 12 do not, though each schema alone does.
    assert!(Catalog::within(&doubling(3, 9), limits).is_ok());
    let e = Catalog::within(&doubling(12, 9), limits).unwrap_err();
    assert_eq!(e.pointer, "#/paths");
    assert!(e.message.contains("more than 100000 nodes"), "{e}");
}

#[test]
fn a_catalog_has_at_most_so_many_tools_and_operations() {
    let mut paths = Map::new();
    for i in 0..6 {
        paths.insert(
            format!("/p{i}"),
            json!({"get": {"operationId": "same", "responses": {}}}),
        );
    }
    let doc = json!({"openapi": "3.1.0", "paths": paths});
    let (c, _) = Catalog::from_document(&doc).unwrap();
    let names: Vec<&str> = c.names().collect();
    assert_eq!(
        names,
        ["same", "same_2", "same_3", "same_4", "same_5", "same_6"]
    );
    let tools = Limits {
        tools: 5,
        ..Limits::DEFAULT
    };
    let e = Catalog::within(&doc, tools).unwrap_err();
    assert_eq!(e.pointer, "#/paths");
    assert!(
        e.message.contains("more than 5 operations can be tools"),
        "{e}"
    );
    let ops = Limits {
        operations: 4,
        ..Limits::DEFAULT
    };
    let e = Catalog::within(&doc, ops).unwrap_err();
    assert!(e.message.contains("more than 4 operations"), "{e}");
}

#[test]
fn a_suffix_never_takes_a_name_already_given() {
    let doc = json!({"openapi": "3.1.0", "paths": {
        "/a": {"get": {"operationId": "x", "responses": {}}},
        "/b": {"get": {"operationId": "x_2", "responses": {}}},
        "/c": {"get": {"operationId": "x", "responses": {}}},
        "/d": {"get": {"operationId": "x", "responses": {}}}}});
    let (c, _) = Catalog::from_document(&doc).unwrap();
    assert_eq!(c.names().collect::<Vec<_>>(), ["x", "x_2", "x_3", "x_4"]);
}

#[test]
fn path_templates_that_could_leave_the_base_path_are_skipped() {
    let op = json!({"get": {"responses": {}}});
    let bad = [
        "/%2e%2e/admin",
        "//x",
        "x",
        "/a?b#c",
        "/a/../b",
        "/a/./b",
        "/a\\b",
        "/a/{id",
    ];
    let mut paths = Map::new();
    for p in bad.iter().chain(&["/ok/", "/"]) {
        paths.insert((*p).to_owned(), op.clone());
    }
    let doc = json!({"openapi": "3.1.0", "paths": paths});
    let (c, skipped) = Catalog::from_document(&doc).unwrap();
    let mut names: Vec<&str> = c.names().collect();
    names.sort_unstable();
    assert_eq!(names, ["get", "get_ok"]);
    assert_eq!(skipped.len(), bad.len(), "{skipped:?}");
    for s in &skipped {
        assert!(s.why.starts_with("path "), "{s}");
    }
}

#[test]
fn what_a_spec_says_is_printed_with_its_control_characters_escaped() {
    let doc = json!({"openapi": "3.1.0", "paths": {
        "/up": {"put": {"operationId": "a\u{1b}[2Jb\nfake line", "responses": {},
            "requestBody": {"required": true,
                "content": {"application/octet-stream": {"schema": {"type": "string"}}}}}},
        "/ok": {"get": {"responses": {}}}}});
    let (_, skipped) = Catalog::from_document(&doc).unwrap();
    let shown = skipped[0].to_string();
    assert!(
        shown.starts_with("PUT /up (operationId a\\u{1b}[2Jb\\nfake line)"),
        "{shown}"
    );
    let bad = json!({"openapi": "4\u{202e}\r", "paths": {}});
    let e = Catalog::from_document(&bad).unwrap_err().to_string();
    assert!(
        !e.contains(['\u{202e}', '\r']) && e.contains("\\u{202e}\\r"),
        "{e}"
    );
}

#[test]
fn header_parameters_the_gateway_reserves_are_left_out() {
    let reserved = [
        "Upgrade",
        "TE",
        "Trailer",
        "Keep-Alive",
        "Proxy-Connection",
        "Expect",
        "Host",
        "Authorization",
        "Cookie",
    ];
    let mut params: Vec<Value> = reserved
        .iter()
        .map(|n| json!({"name": n, "in": "header", "schema": {"type": "string"}}))
        .collect();
    params.push(json!({"name": "X-Fine", "in": "header", "schema": {"type": "string"}}));
    let doc = json!({"openapi": "3.1.0", "paths": {"/h": {"get": {
        "operationId": "h", "parameters": params, "responses": {}}}}});
    let (c, skipped) = Catalog::from_document(&doc).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    let props = def(&c, "h")["inputSchema"]["properties"].clone();
    let names: Vec<&String> = props.as_object().unwrap().keys().collect();
    assert_eq!(names, ["X-Fine"]);
}
