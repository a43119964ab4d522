//! The policy's decision for one message: which action on which target it needs (`gate`),
//! whether the caller may, and how a refusal is answered (hidden is missing, see
//! [`refusal`]).

use switchboard_wire::Message;

use super::gate::{self, denial, gate, Gate};
use super::{Authorizer, Origin, Origins, Principal, Target};
use crate::CoreError;

/// The policy's decision for `msg` (no rate limit, no audit), the operation's target, and
/// where it is served (when aggregating and known).
pub(super) fn decide(
    policy: Option<&dyn Authorizer>,
    principal: &Principal,
    msg: &Message<'_>,
    origins: Option<&dyn Origins>,
) -> (Target, Option<Origin>, Result<(), CoreError>) {
    // Without a policy the target is still needed (rate limits, audit).
    match gate(msg) {
        Gate::Open => (Target::Server, None, Ok(())),
        Gate::Check(action, target) => {
            if let (Some(o), Target::Tool(name)) = (origins, &target) {
                if o.own_tool(name) {
                    // The gateway's own tool shows only what the caller may call: using
                    // it needs no more than listing tools.
                    let verdict = if allowed(policy, principal, "list_tools", &Target::Server, None)
                    {
                        Ok(())
                    } else {
                        Err(CoreError::Forbidden(denial("list_tools")))
                    };
                    return (target, None, verdict);
                }
            }
            let origin = origins.and_then(|o| o.of_request(msg, &target));
            let verdict = if allowed(policy, principal, &action, &target, origin.as_ref()) {
                Ok(())
            } else {
                let seen = origins.is_none() || origin.is_some();
                Err(refusal(
                    policy,
                    principal,
                    msg,
                    &action,
                    &target,
                    seen,
                    origin.as_ref(),
                ))
            };
            (target, origin, verdict)
        }
        // A C-string backend would subscribe `file:///secret` for `file:///secret\u0000x`,
        // a URI the policy never judged (the strict scan checks `params.uri`, not a list).
        Gate::Listen(uris) if uris.iter().any(|u| u.contains('\0')) => (
            Target::Server,
            None,
            Err(CoreError::InvalidParams(
                "a listen's resource URI holds U+0000",
            )),
        ),
        Gate::Listen(uris) => {
            // A URI the caller may not even read is hidden: the listen leaves it out of its
            // acknowledgement, as it leaves out one no backend serves (`aggregated_listen`).
            // Only a visible one it may not subscribe to is refused (403).
            let denied = uris.into_iter().find_map(|u| {
                let target = Target::resource(u);
                let origin = origins.and_then(|o| o.of_item(&target));
                let allowed = allowed(policy, principal, "subscribe", &target, origin.as_ref());
                let visible = || {
                    (origins.is_none() || origin.is_some())
                        && self::allowed(
                            policy,
                            principal,
                            "read_resource",
                            &target,
                            origin.as_ref(),
                        )
                };
                (!allowed && visible()).then_some((target, origin))
            });
            match denied {
                None => (Target::Server, None, Ok(())),
                Some((target, origin)) => (
                    target,
                    origin,
                    Err(CoreError::Forbidden(denial("subscribe"))),
                ),
            }
        }
    }
}

/// Why a denied operation on `target` is refused. An item the caller's lists do not show
/// (for a tool, prompt or resource: the caller may not call, get or read it; aggregating,
/// also one no backend serves) is answered exactly as a missing one: the same `unknown …`
/// error. A 403 is kept for what the caller can see but not do (subscribing to a resource it
/// may read, a list or server method it may not use), where it reveals nothing.
fn refusal(
    policy: Option<&dyn Authorizer>,
    principal: &Principal,
    msg: &Message<'_>,
    action: &str,
    target: &Target,
    listed: bool,
    origin: Option<&Origin>,
) -> CoreError {
    let visible = match target {
        Target::Server => return CoreError::Forbidden(denial(action)),
        // The action that makes it visible was the one denied: no second evaluation.
        t if gate::item_action(t) == action => false,
        t => listed && allowed(policy, principal, gate::item_action(t), t, origin),
    };
    if visible {
        return CoreError::Forbidden(denial(action));
    }
    use crate::error::{clip, clip_uri};
    let completion = msg.method == Some("completion/complete");
    // The URI as the client sent it (the target's scheme is folded), as routing quotes it.
    let sent = |uri: &str| {
        let holder = if completion {
            msg.param("ref")
        } else {
            msg.params
        };
        let sent = gate::str_member(holder, "uri");
        clip_uri(if sent.is_empty() { uri } else { &sent })
    };
    match target {
        Target::Tool(name) => CoreError::UnknownName("tool", clip(name)),
        Target::Prompt(name) => CoreError::UnknownName("prompt", clip(name)),
        // As routing names a missing one: a completion's reference is a template.
        Target::Resource(uri) | Target::ResourceTemplate(uri) if completion => {
            CoreError::UnknownName("resource template", sent(uri))
        }
        Target::Resource(uri) | Target::ResourceTemplate(uri) => {
            CoreError::UnknownName("resource", sent(uri))
        }
        Target::Server => CoreError::Forbidden(denial(action)),
    }
}

pub(super) fn allowed(
    policy: Option<&dyn Authorizer>,
    principal: &Principal,
    action: &str,
    target: &Target,
    origin: Option<&Origin>,
) -> bool {
    policy.is_none_or(|a| {
        let allowed = a.is_allowed_at(principal, action, target, origin);
        crate::metrics::policy_evaluated(allowed);
        allowed
    })
}
