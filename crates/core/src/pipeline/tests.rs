//! The size of a request's future: `http` moves it into a box once per request, so every byte
//! the pipeline's state machine holds is copied for every request, the common pass-through
//! included. Rare paths (other adapters, task handles, merged lists, lazy opening, a names
//! refresh) are boxed where they are awaited, so the pipeline's future stays close to the
//! pass-through's own. A layout property, the same in every build profile.

use std::sync::Arc;

use serde_json::json;

use crate::resolve::From;
use crate::tasks::TaskAsk;
use crate::{Backend, BackendEra, BackendInfo, Backends, Era, Exchange, Gateway, GatewayConfig};
use crate::{Principal, Registry};

/// What the pipeline may add to the larger pass-through's future (measured: about 1.5 KiB;
/// before the rare paths were boxed, 4.9 KiB).
const PIPELINE_OVERHEAD: usize = 2048;

fn backend(registry: &Arc<Registry>) -> (Backend, switchboard_upstream::UpstreamOwner) {
    let config = switchboard_upstream::StdioConfig::new("cat", vec![]);
    let era = BackendEra {
        legacy: true,
        modern: false,
    };
    stdio_backend(registry, &config, ("2025-11-25", era, json!({})))
}

/// A backend running `config`'s process, declaring `version`, `era` and `capabilities` (no
/// handshake: the process need not speak MCP).
pub(crate) fn stdio_backend(
    registry: &Arc<Registry>,
    config: &switchboard_upstream::StdioConfig,
    (version, era, capabilities): (&str, BackendEra, serde_json::Value),
) -> (Backend, switchboard_upstream::UpstreamOwner) {
    let (handle, process) =
        switchboard_upstream::spawn_stdio(config, registry.sink()).expect("spawn the backend");
    let info = BackendInfo {
        protocol_version: version.into(),
        capabilities,
        server_info: json!({"name": config.program}),
        instructions: None,
        era,
    };
    let backend = Backend {
        handle,
        info,
        internal: None,
        legacy_unprobed: false,
    };
    (backend, process)
}

#[tokio::test]
async fn a_requests_future_is_little_more_than_a_pass_through() {
    let config = GatewayConfig::default();
    let registry = config.registry();
    let (backend, _process) = backend(&registry);
    let gateway = Gateway::new(Backends::single(backend), registry, config);
    let caller = Principal::anonymous();
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
    let msg = switchboard_wire::Message::parse(body).expect("a request");
    let exchange = || Exchange {
        caller: &caller,
        era: Era::Legacy { session: None },
        msg: &msg,
        stream: None,
    };
    let route = (gateway.resolve(From::Request(None), "tools/call", msg.params))
        .expect("routable")
        .expect("a route");
    let task = TaskAsk::of(&exchange());
    let id = msg.id.clone().expect("an id");

    let pipeline = std::mem::size_of_val(&gateway.handle(exchange()));
    let pass = std::mem::size_of_val(&gateway.sender.pass(exchange(), &id, "x", &route, &task));
    let modern = gateway.modern();
    let pass_modern = modern.pass_through((&caller, None, false), &msg, None, &route);
    let pass_modern = std::mem::size_of_val(&pass_modern);
    let largest_pass = pass.max(pass_modern);
    assert!(
        pipeline <= largest_pass + PIPELINE_OVERHEAD,
        "the pipeline's future is {pipeline} bytes, the larger pass-through's {largest_pass}: \
         box the rare path that grew it where it is awaited"
    );
}
