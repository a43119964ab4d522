//! The shipped schema and the serde model describe the same file; the documentation's examples
//! are valid configs; errors carry paths.

use clap::Parser;
use serde_json::{json, Value};

use super::{checked, schema, ConfigError};

const FULL: &str = include_str!("../../tests/fixtures/config/full.yaml");
/// The documentation pages with config examples (`scripts/docs.sh` also runs each through
/// `switchboard validate` with the files it names; this checks the shape at `cargo test` time).
const DOCS: &[(&str, &str)] = &[
    (
        "configuration.md",
        include_str!("../../../../docs/configuration.md"),
    ),
    (
        "getting-started.md",
        include_str!("../../../../docs/getting-started.md"),
    ),
    ("auth.md", include_str!("../../../../docs/auth.md")),
    (
        "virtual-server.md",
        include_str!("../../../../docs/virtual-server.md"),
    ),
    (
        "tool-search.md",
        include_str!("../../../../docs/tool-search.md"),
    ),
    (
        "composite-tools.md",
        include_str!("../../../../docs/composite-tools.md"),
    ),
    (
        "sandboxing.md",
        include_str!("../../../../docs/sandboxing.md"),
    ),
    ("openapi.md", include_str!("../../../../docs/openapi.md")),
    (
        "outgoing-auth.md",
        include_str!("../../../../docs/outgoing-auth.md"),
    ),
    ("trust.md", include_str!("../../../../docs/trust.md")),
    (
        "scale-out.md",
        include_str!("../../../../docs/scale-out.md"),
    ),
];

fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).unwrap()
}

fn lines(errors: &[ConfigError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// Property keys of `schema` that none of `instances` has (a `$ref` followed into `$defs`).
fn uncovered(root: &Value, schema: &Value, instances: &[&Value], at: &str, out: &mut Vec<String>) {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => root.pointer(r.trim_start_matches('#')).unwrap(),
        None => schema,
    };
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, sub) in props {
            let having: Vec<&Value> = instances.iter().filter_map(|i| i.get(key)).collect();
            if having.is_empty() {
                out.push(format!("{at}.{key}"));
            } else {
                uncovered(root, sub, &having, &format!("{at}.{key}"), out);
            }
        }
    }
    if let Some(items) = schema.get("items") {
        let all: Vec<&Value> = instances
            .iter()
            .filter_map(|i| i.as_array())
            .flatten()
            .collect();
        uncovered(root, items, &all, &format!("{at}[]"), out);
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        let all: Vec<&Value> = instances
            .iter()
            .filter_map(|i| i.as_object())
            .flat_map(|m| m.values())
            .collect();
        uncovered(root, extra, &all, &format!("{at}.*"), out);
    }
}

#[test]
fn the_full_example_covers_the_schema_and_the_model_reads_it() {
    let doc = yaml(FULL);
    let schema: Value = serde_json::from_str(schema::SCHEMA).unwrap();
    let mut missing = Vec::new();
    uncovered(&schema, &schema, &[&doc], "", &mut missing);
    assert!(
        missing.is_empty(),
        "keys of the schema that full.yaml lacks: {missing:?}"
    );
    let file = checked(&doc).unwrap_or_else(|e| panic!("{:?}", lines(&e)));
    assert_eq!(file.backends.len(), 5);
    assert_eq!(file.timeouts.unwrap().request.unwrap().0.as_secs(), 60);
}

/// An unknown key anywhere an object is strict is refused by both the schema and the model.
#[test]
fn schema_and_model_refuse_the_same_unknown_keys() {
    let doc = yaml(FULL);
    let mut objects = Vec::new();
    strict_objects(&doc, "", &mut objects);
    assert!(objects.len() > 15, "{objects:?}");
    for pointer in objects {
        let mut bad = doc.clone();
        bad.pointer_mut(&pointer).unwrap()["notAKey"] = json!(1);
        let schema_errors = schema::check(&bad);
        assert!(
            schema_errors
                .iter()
                .any(|e| e.path.ends_with("notAKey") && e.message == "unknown key"),
            "schema accepts notAKey at {pointer}: {:?}",
            lines(&schema_errors)
        );
        assert!(
            serde_json::from_value::<super::model::ConfigFile>(bad).is_err(),
            "the model accepts notAKey at {pointer}"
        );
    }
}

/// JSON pointers of the example's objects whose keys are fixed (not maps such as `env`).
fn strict_objects(v: &Value, at: &str, out: &mut Vec<String>) {
    const MAPS: [&str; 10] = [
        "env",
        "headers",
        "overrides",
        "toolRateLimits",
        "annotations",
        // Composite tools: JSON Schemas and templated values, free-form by design.
        "inputSchema",
        "outputSchema",
        "requestedSchema",
        "arguments",
        "output",
    ];
    match v {
        Value::Object(m) => {
            out.push(at.to_owned());
            for (k, child) in m {
                let child_at = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                if k == "overrides" {
                    for name in child.as_object().unwrap().keys() {
                        out.push(format!("{child_at}/{name}"));
                    }
                } else if !MAPS.contains(&k.as_str()) {
                    strict_objects(child, &child_at, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                strict_objects(item, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_error_is_reported_with_its_path() {
    let doc = yaml(
        r#"
listen: {port: "80", hots: x}
timeouts: {request: 5x, idle: -1}
aggregation: {conflictResolution: first, priority: [a, nobody]}
backends:
  - name: a
    command: x
    headers: {X: y}
  - name: a
    url: ftp://h
    env: {K: v}
  - name: "Bad Name"
  - {}
"#,
    );
    let got = lines(&super::checked(&doc).unwrap_err());
    let want = [
        "listen.hots: unknown key; did you mean \"host\"?",
        "listen.port: expected an integer",
        "timeouts.idle: must be at least 0",
        "timeouts.request: must match ^[0-9]+(\\.[0-9]*)?(ms|s|m|h)?$",
        "aggregation.conflictResolution: expected one of \"conditional\", \"prefix\", \"priority\", \"manual\"",
        "backends[1].url: must match ^https?://",
        "backends[2].name: must match ^[A-Za-z0-9_-]{1,32}$",
        "backends[3].name: required",
        "backends[1].name: \"a\" is already the name of backends[0]",
        "backends[0].headers: only for a url backend",
        "backends[1].env: only for a command backend",
        "backends[2].command: required (or url, for a remote server; or openapi, for a REST API)",
        "backends[3].command: required (or url, for a remote server; or openapi, for a REST API)",
        "aggregation.priority[1]: no backend is named \"nobody\"",
    ];
    for w in want {
        assert!(got.contains(&w.to_owned()), "missing {w:?} in {got:#?}");
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
}

#[test]
fn an_env_key_that_looks_like_an_index_is_a_key() {
    let doc = yaml("backends: [{name: a, command: x, env: {\"1\": 2}}]");
    let got = lines(&super::checked(&doc).unwrap_err());
    assert_eq!(got, ["backends[0].env[\"1\"]: expected a string"]);
}

/// Every ```yaml block of the documentation's pages is a valid config (a block marked
/// `<!-- docs-check: partial -->` on the line before is a fragment, and skipped).
#[test]
fn the_documentation_examples_validate() {
    let mut blocks = 0;
    for (page, text) in DOCS {
        let mut rest = *text;
        while let Some(start) = rest.find("```yaml\n") {
            let partial = rest[..start]
                .trim_end()
                .rsplit('\n')
                .next()
                .is_some_and(|line| line.contains("docs-check: partial"));
            let body = &rest[start + 8..];
            let end = body.find("```").unwrap();
            if !partial {
                let doc = yaml(&body[..end]);
                if let Err(e) = super::checked(&doc) {
                    panic!(
                        "{page}: example {blocks} does not validate: {:?}",
                        lines(&e)
                    );
                }
                blocks += 1;
            }
            rest = &body[end..];
        }
    }
    assert!(
        blocks >= 10,
        "only {blocks} config examples in the documentation"
    );
}

/// Every flag id `serve` merges the file under is one of `serve`'s flags (a misspelt id would
/// silently never let the flag override the file).
#[test]
fn the_merge_asks_only_about_real_flags() {
    use clap::CommandFactory;
    let dir = std::env::temp_dir().join(format!("sb-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.yaml");
    let mut doc = yaml(FULL);
    // Resolution reads these; the rest of the full example is taken as it is.
    let obj = doc.as_object_mut().unwrap();
    obj.remove("secretsFile");
    // The sandbox checks its host and paths (`config::sandbox`'s own tests).
    obj.remove("sandbox");
    doc["backends"][0]
        .as_object_mut()
        .unwrap()
        .remove("sandbox");
    doc["backends"][1]["headers"] = json!({});
    doc["backends"][1]
        .as_object_mut()
        .unwrap()
        .remove("headersFile");
    doc["auth"]["apiKeys"] = json!([]);
    doc["backends"][4]["headers"] = json!({});
    std::fs::create_dir_all(dir.join("specs")).unwrap();
    let spec = "openapi: 3.1.0\npaths: {/pets: {get: {operationId: listPets, responses: {}}}}\n";
    std::fs::write(dir.join("specs/petstore.yaml"), spec).unwrap();
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    let secret = dir.join("keys/sts.secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token_key = dir.join("keys/tokens.key");
    std::fs::write(&token_key, [7u8; 32]).unwrap();
    std::fs::set_permissions(&token_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    doc["tokenStore"]["encryptionKeyFile"] = json!("keys/tokens.key");
    std::fs::write(&path, serde_yaml_ng::to_string(&doc).unwrap()).unwrap();
    let loaded = super::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let asked = std::cell::RefCell::new(Vec::new());
    let given = |id: &str| {
        asked.borrow_mut().push(id.to_owned());
        false
    };
    let cli = crate::cli::Cli::try_parse_from(["switchboard", "serve", "--config", "x"]).unwrap();
    let crate::cli::Command::Serve(args) = cli.command else {
        unreachable!()
    };
    let spec = super::merge::serve_spec(loaded, args.gateway, &given).unwrap();
    assert_eq!(spec.options.port, 8080);
    assert_eq!(
        spec.options.token_store_key_file,
        Some(dir.join("keys/tokens.key"))
    );
    assert_eq!(spec.options.endpoint_prefix, "/gateway");
    assert_eq!(spec.options.request_timeout, 60.0);
    assert_eq!(spec.options.auth.tool_rate_limit, ["*=10/s", "echo=600/m"]);
    let serve = crate::cli::Cli::command();
    let serve = serve.find_subcommand("serve").unwrap();
    let ids: Vec<String> = serve
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    let asked = asked.into_inner();
    assert!(asked.len() > 30, "{asked:?}");
    for id in asked {
        assert!(ids.contains(&id), "serve has no flag {id}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A flag given on the command line wins over the file.
#[test]
fn a_flag_given_overrides_the_file() {
    let dir = std::env::temp_dir().join(format!("sb-override-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.yaml");
    std::fs::write(&path, "listen: {port: 9999}\ntimeouts: {request: 5s}\nbackends: [{name: a, command: x, timeout: 2s}]\n").unwrap();
    let parse = |extra: &[&str]| {
        let mut argv = vec!["switchboard", "serve", "--config", "x"];
        argv.extend_from_slice(extra);
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        let crate::cli::Command::Serve(args) = cli.command else {
            unreachable!()
        };
        args.gateway
    };
    let flags = ["--port", "7777"];
    let spec = super::merge::serve_spec(super::load(&path).unwrap(), parse(&flags), &|id| {
        id == "port"
    })
    .unwrap();
    assert_eq!(spec.options.port, 7777);
    // One backend: its own timeout is the gateway's request timeout.
    assert_eq!(spec.options.request_timeout, 2.0);
    let spec =
        super::merge::serve_spec(super::load(&path).unwrap(), parse(&[]), &|_| false).unwrap();
    assert_eq!(spec.options.port, 9999);
    std::fs::remove_dir_all(&dir).unwrap();
}
