//! A real client of someone else's, the official Python SDK 1.x in each era, lists and calls
//! an OpenAPI backend's generated tools through `serve`, beside an MCP backend; the REST API
//! (the OpenAPI tests' recording server) received exactly those calls.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::TestGateway;
use crate::vmcp::driver::Client;
use crate::vmcp::{stdio, Dir, SB};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/integration/openapi");

#[tokio::test]
async fn python_sdk_clients_list_and_call_generated_tools_in_both_eras() {
    let mut rest = tokio::process::Command::new("python3")
        .arg(format!("{DIR}/rest.py"))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    let mut lines = BufReader::new(rest.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("rest.py did not start")
        .unwrap()
        .unwrap();
    let port: u16 = line.strip_prefix("listening ").unwrap().parse().unwrap();
    let spec = std::fs::read_to_string(format!("{DIR}/petstore.yaml"))
        .unwrap()
        .replace("VERSION", "3.1.0")
        .replace("DECOY", "http://127.0.0.1:1/")
        .replace("TAG_SCHEMA", r#"{type: [string, "null"]}"#);
    let dir = Dir::new("openapi-sdk");
    dir.write("pets.yaml", &spec);
    let yaml = format!(
        "backends:\n{}  - name: pets\n    openapi: {{spec: pets.yaml, baseUrl: \"http://127.0.0.1:{port}/v1\"}}\n",
        stdio("fix", "")
    );
    let config = dir.write("sb.yaml", &yaml);
    let mut cmd = tokio::process::Command::new(SB);
    cmd.args(["serve", "--config", config.to_str().unwrap()])
        .args(["--host", "127.0.0.1", "--port", "0"]);
    let gw = TestGateway::start_command(cmd).await;

    for (era, mut client) in [
        ("legacy", Client::python_legacy(&gw.url).await),
        ("modern", Client::python_modern(&gw.url).await),
    ] {
        let listed = client.list().await.unwrap();
        for name in ["listPets", "getPetById", "echo"] {
            assert!(
                listed.tools.iter().any(|t| t == name),
                "{era} {name}: {listed:?}"
            );
        }
        let pet = client
            .call("getPetById", json!({"petId": format!("rex-{era}")}))
            .await
            .unwrap();
        let pet: Value = serde_json::from_str(&pet).unwrap_or(Value::Null);
        assert_eq!(pet["name"], format!("rex-{era}"), "{era}");
        let echoed = client.call("echo", json!({"text": era})).await.unwrap();
        assert_eq!(echoed, era);
    }
    let log: Value = reqwest::get(format!("http://127.0.0.1:{port}/__log"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths: Vec<&str> = log
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["path"].as_str())
        .collect();
    assert_eq!(
        paths,
        ["/v1/pets/rex-legacy", "/v1/pets/rex-modern"],
        "{log}"
    );
}
