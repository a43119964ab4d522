//! `Gateway::reload`: a reload's new set and the guardrails that came with it are put in
//! force together.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::catalog::{Conflict, Strategy};
use crate::guardrails::Guardrails;
use crate::pipeline::tests::stdio_backend;
use crate::vmcp::VmcpConfig;
use switchboard_upstream::UpstreamOwner;

use crate::{Backend, BackendEra, BackendId, Backends, Gateway, GatewayConfig};

/// A backend listing one tool, `echo`; with a path argument, its `tools/list` is answered
/// only once that file exists (the test holds the reload there). It answers `initialize`;
/// anything else: `{}`.
const ONE_TOOL: &str = r#"
import json, os, sys, time
gate = sys.argv[1] if len(sys.argv) > 1 else None
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    result = {}
    if m["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "one-tool", "version": "1"}}
    if m["method"] == "tools/list":
        while gate and not os.path.exists(gate):
            time.sleep(0.01)
        result = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"#;

fn program(gate: Option<&std::path::Path>) -> switchboard_upstream::StdioConfig {
    let mut args = vec!["-c".to_owned(), ONE_TOOL.to_owned()];
    args.extend(gate.map(|p| p.to_string_lossy().into_owned()));
    switchboard_upstream::StdioConfig::new("python3", args)
}

/// An aggregating gateway serving `a`, and a started backend `x` (its `tools/list` held at
/// `gate` when given) that no set holds yet; the processes stop when dropped.
fn a_and_x(gate: Option<&std::path::Path>) -> (Arc<Gateway>, Backend, [UpstreamOwner; 2]) {
    let config = GatewayConfig {
        vmcp: Some(VmcpConfig::default()),
        ..GatewayConfig::default()
    };
    let registry = config.registry();
    let era = BackendEra {
        legacy: true,
        modern: false,
    };
    let declared = ("2025-11-25", era, json!({"tools": {}}));
    let (a, a_process) = stdio_backend(&registry, &program(None), declared.clone());
    let (x, x_process) = stdio_backend(&registry, &program(gate), declared);
    let backends = Backends::new(vec![(id("a"), a)]).expect("one backend");
    let gateway = Gateway::new(backends, registry, config);
    (gateway, x, [a_process, x_process])
}

fn id(name: &str) -> BackendId {
    BackendId::try_from(name).expect("a backend name")
}

/// Guardrails with a rule of backend `x`'s own.
fn guards_of_x() -> Arc<Guardrails> {
    let check = json!({"secrets": "builtin", "action": "reject"});
    let specs = json!([{"name": "x-own", "on": ["response"], "check": check}]);
    let specs: Vec<switchboard_guard::RuleSpec> = serde_json::from_value(specs).unwrap();
    let mut guards = Guardrails::new(Vec::new());
    guards.set_backend("x", switchboard_guard::compile(&specs).unwrap());
    Arc::new(guards)
}

/// A reload adding backend `x` with rules of its own: from the moment `x` is in the set
/// (reachable, its tools listed), the guardrails in force are the ones with its rules. Held
/// while the reload lists `x`'s tools, the set already holds `x`. Before, the binary put the
/// guardrails in force after the whole reshape, so `x` was served and listed under the
/// rules from before it (review, issue 33). Two workers: the check runs beside the reshape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_a_reload_adds_is_served_only_under_the_guardrails_that_came_with_it() {
    let gate = std::env::temp_dir().join(format!("sb-reload-gate-{}", std::process::id()));
    let _ = std::fs::remove_file(&gate);
    let (gateway, x, _processes) = a_and_x(Some(&gate));
    assert!(gateway.guardrails.load_full().is_none());
    let guards = guards_of_x();
    let plan = crate::reload::Reshape {
        order: vec![id("a"), id("x")],
        started: vec![(id("x"), x)],
        vmcp: VmcpConfig::default(),
        policy_changed: false,
        guardrails: Some(Some(guards.clone())),
    };
    let reloading = gateway.clone();
    let reload = tokio::spawn(async move { reloading.reload().reshape(plan).await.map(|_| ()) });
    // Bounded: the reshape puts `x` in the set, then waits on its `tools/list`.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while gateway.backends.get(&id("x")).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "x never joined the set"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let in_force = gateway.guardrails.load_full();
    let shape = gateway.vmcp().expect("aggregating").shape();
    std::fs::write(&gate, b"").unwrap();
    let reshaped = reload.await.unwrap();
    let _ = std::fs::remove_file(&gate);
    reshaped.expect("the reload applied");
    assert!(
        in_force.is_some_and(|g| Arc::ptr_eq(&g, &guards)),
        "x was in the set under the guardrails from before it"
    );
    let listing = shape.config.guardrails.as_ref();
    assert!(listing.is_some_and(|g| Arc::ptr_eq(g, &guards)));
}

/// A reload whose lists no longer merge (a `manual` collision the new backend brings) is
/// rolled back, and the guardrails that came with it go with it: the old ones (none) are in
/// force again, for requests and for the lists.
#[tokio::test]
async fn a_rolled_back_reload_takes_its_guardrails_back() {
    let (gateway, x, _processes) = a_and_x(None);
    gateway.warm_catalog().await;
    let manual = VmcpConfig {
        strategy: Strategy {
            conflict: Conflict::Manual,
            ..Strategy::default()
        },
        ..VmcpConfig::default()
    };
    let plan = crate::reload::Reshape {
        order: vec![id("a"), id("x")],
        started: vec![(id("x"), x)],
        vmcp: manual,
        policy_changed: false,
        guardrails: Some(Some(guards_of_x())),
    };
    let refused = gateway.reload().reshape(plan).await;
    assert!(
        refused.is_err(),
        "both backends list `echo`: the merge fails"
    );
    assert!(gateway.backends.get(&id("x")).is_none());
    assert!(gateway.guardrails.load_full().is_none());
    let shape = gateway.vmcp().expect("aggregating").shape();
    assert!(shape.config.guardrails.is_none());
}

/// A supervisor of a backend that a reload replaced under the same name revives nothing of
/// the new one: its restarted process is refused (`false`, never installed), and the new
/// backend's state (here its era: the old program answers `server/discover`, which would
/// have set it) is untouched. The supervisor of the new backend revives it. Before, revival
/// went by name, so the old keeper's restart, in the window before the reload retires it,
/// handshook against the new entry and set its era, cleared its task table and half-opened
/// its breaker (review LOW).
#[tokio::test]
async fn a_replaced_backends_restart_revives_nothing_of_its_successor() {
    let (gateway, _x, _processes) = a_and_x(None);
    let upkeep = gateway.upkeep();
    let old = upkeep.instance_of(&id("a")).expect("a is served");
    let era = BackendEra {
        legacy: true,
        modern: false,
    };
    let declared = ("2025-11-25", era, json!({"tools": {}}));
    let (new_a, _new_process) = stdio_backend(&gateway.registry, &program(None), declared);
    let plan = crate::reload::Reshape {
        order: vec![id("a")],
        started: vec![(id("a"), new_a)],
        vmcp: VmcpConfig::default(),
        policy_changed: false,
        guardrails: None,
    };
    let reshaped = gateway
        .reload()
        .reshape(plan)
        .await
        .expect("the reload applied");
    assert_eq!(reshaped.retired.len(), 1, "the old `a` is retired");
    let standby = || {
        let spawned = switchboard_upstream::spawn(&program(None), gateway.registry.sink());
        spawned.expect("spawn a standby")
    };
    let (old_standby, _old_process) = standby();
    assert!(
        !upkeep
            .revive_backend_instance(&old, None, old_standby)
            .await
    );
    let entry = gateway.backends.get(&id("a")).expect("the new a");
    assert!(
        !entry.modern_now(),
        "the old keeper's restart set the new a's era"
    );
    let new = upkeep.instance_of(&id("a")).expect("the new a");
    let (new_standby, _new_standby_process) = standby();
    assert!(
        upkeep
            .revive_backend_instance(&new, None, new_standby)
            .await
    );
}
