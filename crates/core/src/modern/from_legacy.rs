//! A Legacy client's request to a Modern-only backend ([`Adapters::legacy_to_modern`]).

use switchboard_wire::{
    encode_result, method, object_member, with_member, with_members, RequestId,
};

use super::{legacy_answer, legacy_tasks, Adapters};
use crate::resolve::Route;
use crate::send::Outgoing;
use crate::CoreError;

impl Adapters<'_> {
    /// A Legacy client's request to a Modern-only backend: the gateway owns the client's
    /// session and speaks to the backend statelessly under its own `_meta` envelope. Methods
    /// the backend cannot have are answered here (`ping`, `logging/setLevel`) or refused
    /// (subscriptions, which would need a gateway-held listen stream: not built yet).
    pub(crate) async fn legacy_to_modern(
        &self,
        call: crate::Exchange<'_>,
        id: &RequestId,
        name: &str,
        route: &Route,
    ) -> Result<Vec<u8>, CoreError> {
        match name {
            method::PING | method::SET_LEVEL => return Ok(encode_result(id, "{}")),
            method::SUBSCRIBE | method::UNSUBSCRIBE => {
                return Err(CoreError::Unsupported(name.to_owned()))
            }
            // 2025-11-25 tasks, bridged onto the Tasks extension (`legacy_tasks`); the
            // extension has no listing (the gateway lists the caller's tasks it recorded),
            // and `tasks/update` is not a Legacy method.
            "tasks/get" | "tasks/result" | "tasks/cancel" => {
                return self.legacy_task_method(&call, (id, name), route).await
            }
            crate::tasks::LIST => return self.legacy_task_list(&call, id, route).await,
            n if crate::tasks::BY_ID.contains(&n) => {
                return Err(CoreError::Unsupported(name.to_owned()))
            }
            _ => {}
        }
        let envelope = crate::backend::gateway_envelope();
        let base = serde_json::value::RawValue::from_string("{}".to_owned())
            .map_err(|_| CoreError::InvalidParams("params"))?;
        let params = call.msg.params.unwrap_or(&base);
        let meta = object_member(params, "_meta").unwrap_or(&base);
        let values: Vec<(String, String)> = envelope
            .as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.to_string())).collect())
            .unwrap_or_default();
        let set: Vec<(&str, &str)> = values
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let params = with_members(meta, &set, |_| true)
            .and_then(|m| with_member(params, "_meta", m.get()))
            .ok_or(CoreError::InvalidParams("params must be an object"))?;
        if crate::mrtr::METHODS.contains(&name) {
            // Input the backend needs is asked of the client (`relay::legacy_client`).
            let relay = crate::relay::ToLegacy {
                sender: self.sender,
                asks: self.asks,
            };
            let mut params = relay.with_client_caps(&call, params)?;
            let asked = crate::tasks::is_task_request(call.msg.params);
            if asked {
                params = legacy_tasks::declaring_extension(&params)
                    .ok_or(CoreError::InvalidParams("params must be an object"))?;
            }
            let answer = match relay
                .relay_to_legacy(&call, (id, name), route, params)
                .await?
            {
                Ok(answer) => answer,
                Err(instead) => return Ok(instead),
            };
            return Ok(self.legacy_call_answer(&call, (id, asked), route, &answer));
        }
        let answer = self
            .sender
            .send(Outgoing {
                session: call.session(),
                id,
                name,
                params: Some(&params),
                stream: call.stream,
                listen: None,
                route,
                credential: call.caller.credential.as_ref(),
            })
            .await?;
        Ok(legacy_answer(id, &answer))
    }
}
