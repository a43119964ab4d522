//! A Modern request passed through to a Modern backend (route key, progress token and listen
//! tag rewritten), with MRTR's `requestState` sealed for its caller (`relay::sealed`).

use bytes::Bytes;
use tokio::sync::mpsc;

use switchboard_wire::{method, Message, ResultMarks};

use super::{discover_passthrough, passthrough, Adapters, LISTEN};
use crate::modern_listen::Filter;
use crate::resolve::Route;
use crate::send::Outgoing;
use crate::Answer;
use crate::CoreError;

impl Adapters<'_> {
    /// Sends `msg` as it is to the route's Modern backend and answers with its result (for
    /// the virtual server when aggregating). An answer refusing the protocol version on era
    /// grounds is the caller's cue to learn the backend's era again (`Backends::reprobe`).
    pub(crate) async fn pass_through(
        &self,
        (caller, owner, asked_task): (&crate::Principal, Option<&crate::tasks::Owner>, bool),
        msg: &Message<'_>,
        stream: Option<mpsc::Sender<Bytes>>,
        route: &Route,
    ) -> Result<Answer, CoreError> {
        let (Some(id), Some(name)) = (msg.id.as_ref(), msg.method) else {
            return Err(CoreError::UnexpectedResponse);
        };
        let listen = (name == LISTEN).then(|| (Filter::parse(msg.params), caller));
        // The gateway offers no task status on listen streams (`tasks::NOTIFICATION`).
        let listen_params = (name == LISTEN)
            .then(|| {
                msg.params
                    .and_then(crate::tasks::watch::listen_without_task_ids)
            })
            .flatten();
        // MRTR: the backend's own requestState only from a verified gateway token.
        let bound = crate::relay::Bound {
            caller,
            method: name,
            backend: &route.backend,
            params: msg.params,
        };
        let relayed = crate::mrtr::METHODS.contains(&name);
        let unsealed = match relayed {
            true => match (self.mrtr.bridge.relay).open(&self.mrtr.bridge.sealer, &bound, id) {
                Ok(params) => params,
                Err(Ok(refusal)) => return Ok(refusal),
                Err(Err(over_share)) => return Err(over_share),
            },
            false => None,
        };
        let answer = self
            .sender
            .send(Outgoing {
                session: None,
                id,
                name,
                params: (unsealed.as_deref())
                    .or(listen_params.as_deref())
                    .or(msg.params),
                stream,
                listen,
                route,
                credential: caller.credential.as_ref(),
            })
            .await?;
        // One walk of the backend's result answers every question asked of it: a task it
        // created, whether it carries a requestState to seal (only `input_required` does),
        // and whether its resultType reads one way.
        let marks = match answer.is_error() {
            true => ResultMarks::default(),
            false => ResultMarks::of(answer.payload()),
        };
        if marks.ambiguous_type {
            // Not recorded, not passed on: a loose client parser may read another resultType
            // (`input_required`, with questions never checked) than the one the gateway read.
            return Ok(Answer::error(id, &crate::relay::AmbiguousType::error()));
        }
        if marks.ambiguous_task && (asked_task || name == crate::tasks::MAY_CREATE) {
            // Not recorded, not passed on: a loose or first-copy parser could read a task id
            // the gateway never renamed.
            return Ok(Answer::error(id, &crate::tasks::ambiguous_task()));
        }
        let who = (owner, asked_task);
        let created = crate::tasks::created_by(caller, who, name, &answer, &marks);
        if let Some(owner) = created.filter(|_| route.keeps_tasks()) {
            let registry = self.mrtr.registry;
            let tables = registry.tables(&route.backend);
            let sent = (name, unsealed.as_deref().or(msg.params));
            (tables.tasks).record_answer(&registry.sessions, &owner, &answer, sent);
        }
        let sealing = relayed && marks.input_required();
        if name == method::DISCOVER && !answer.is_error() {
            return Ok(discover_passthrough(id, &answer, route.keeps_tasks()));
        }
        let answer = match self.resolver.vmcp {
            // Aggregating: the result speaks for the virtual server, not one backend.
            Some(_) if !answer.is_error() => self.as_gateway(id, &answer),
            _ => passthrough(id, &answer),
        };
        Ok(self.checked_and_sealed(
            &bound,
            id,
            answer,
            (sealing, relayed && marks.request_state),
        ))
    }

    /// A relayed answer as its client gets it: an `input_required`'s questions checked on
    /// their way, as on every other path, and its `requestState` sealed; another result's
    /// `requestState` (in any spelling) stripped.
    fn checked_and_sealed(
        &self,
        bound: &crate::relay::Bound<'_>,
        id: &switchboard_wire::RequestId,
        answer: Answer,
        (sealing, state): (bool, bool),
    ) -> Answer {
        let relay = &self.mrtr.bridge;
        match (sealing, state) {
            (true, _) => {
                let progress = &self.mrtr.registry.progress;
                let answer = crate::guardrails::inputs::input_requests(progress, id, answer);
                (relay.relay).seal(&relay.sealer, bound, id, answer)
            }
            (false, true) => crate::relay::SealedRelay::strip(id, answer),
            (false, false) => answer,
        }
    }
}
