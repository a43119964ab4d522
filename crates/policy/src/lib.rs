//! Cedar authorization for Switchboard: implements `switchboard_core::Authorizer` with the
//! `cedar-policy` crate. Its own crate so that only this one compiles Cedar, and `core` stays
//! testable with any authorizer.
//!
//! Vocabulary (no schema needed):
//!
//! | what           | Cedar                                                                 |
//! |----------------|-----------------------------------------------------------------------|
//! | JWT principal  | `User::"<sub>"` (attributes `iss`, `sub`)                              |
//! | API key        | `ApiKey::"<name>"` (attributes `iss` = `"api-key"`, `sub`)             |
//! | no credential  | `Anonymous::"anonymous"`                                              |
//! | actions        | `Action::"call_tool"`, `"read_resource"`, `"get_prompt"`, `"subscribe"`, `"list_tools"`, `"list_prompts"`, `"list_resources"`, or the MCP method name for anything else (`Action::"tasks/get"`) |
//! | resources      | `Tool::"<name>"`, `Resource::"<uri>"`, `ResourceTemplate::"<uriTemplate>"`, `Prompt::"<name>"`, `Server::"default"` — by the name the client used (the exposed name); a resource's URI with its scheme lower-cased (`Resource::"rema://info"` also for `REMA://info`: schemes are case-insensitive) |
//! | resource attributes | aggregating (`serve`) only: `backend` (the backend serving it) and `original` (that backend's own name or URI), which never change when exposed names do; absent with `run` and on `Server` |
//! | context        | `context.claims`: the JWT's claims (strings, booleans, integers, arrays, objects; other values dropped) |
//!
//! Cedar denies by default; evaluation errors deny (fail closed): a policy that reads
//! `resource.backend` of a target without one errors, so a `permit` that needs it does not
//! apply. Guard `forbid`s with `resource has backend &&` (an erroring `forbid` does not
//! apply either), e.g.
//! `forbid(principal, action == Action::"call_tool", resource) when { resource has backend && resource.backend == "alpha" && resource.original == "exit" };`

use std::collections::{HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{
    Context, Decision, Entities, Entity, EntityId, EntityTypeName, EntityUid, PolicySet, Request,
    RestrictedExpression,
};
use serde_json::{Map, Value};
use tracing::debug;

use switchboard_core::{Origin, Principal, Target};

/// Issuer of principals authenticated by a static API key (must match `switchboard-http`).
const API_KEY_ISSUER: &str = "api-key";

/// A loaded policy set.
#[derive(Debug)]
pub struct CedarAuthorizer {
    policies: PolicySet,
    authorizer: cedar_policy::Authorizer,
}

/// A policy file that could not be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid Cedar policy: {0}")]
pub struct PolicyError(String);

impl CedarAuthorizer {
    /// Parses Cedar policy text.
    pub fn from_text(text: &str) -> Result<Self, PolicyError> {
        let policies = PolicySet::from_str(text).map_err(|e| PolicyError(format!("{e:?}")))?;
        Ok(CedarAuthorizer {
            policies,
            authorizer: cedar_policy::Authorizer::new(),
        })
    }

    /// How many policies (and templates) the set holds.
    pub fn len(&self) -> usize {
        self.policies.policies().count()
    }

    /// Whether the set is empty (which denies everything).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn uid(kind: &str, id: &str) -> Option<EntityUid> {
    let name = EntityTypeName::from_str(kind).ok()?;
    Some(EntityUid::from_type_name_and_id(name, EntityId::new(id)))
}

fn principal_uid(p: &Principal) -> Option<EntityUid> {
    if *p == Principal::anonymous() {
        uid("Anonymous", "anonymous")
    } else if p.issuer == API_KEY_ISSUER {
        uid("ApiKey", &p.subject)
    } else {
        uid("User", &p.subject)
    }
}

fn resource_uid(t: &Target) -> Option<EntityUid> {
    match t {
        Target::Tool(n) => uid("Tool", n),
        Target::Resource(u) => uid("Resource", u),
        Target::ResourceTemplate(u) => uid("ResourceTemplate", u),
        Target::Prompt(n) => uid("Prompt", n),
        Target::Server => uid("Server", "default"),
    }
}

/// Claims as Cedar can take them without a schema: integers only, no nulls or floats, and no
/// `__`-prefixed keys (Cedar's JSON escapes for entities and extensions).
fn sanitize(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Number(n) => n.as_i64().map(Value::from),
        Value::Bool(_) | Value::String(_) => Some(v.clone()),
        Value::Array(a) => Some(Value::Array(a.iter().filter_map(sanitize).collect())),
        Value::Object(o) => Some(Value::Object(sanitize_map(o))),
    }
}

fn sanitize_map(o: &Map<String, Value>) -> Map<String, Value> {
    o.iter()
        .filter(|(k, _)| !k.starts_with("__"))
        .filter_map(|(k, v)| sanitize(v).map(|v| (k.clone(), v)))
        .collect()
}

/// The principal's entity: its uid with `iss` and `sub`.
fn principal_entity(p: &Principal, uid: EntityUid) -> Option<Entity> {
    let attrs = HashMap::from([
        (
            "iss".to_owned(),
            RestrictedExpression::new_string(p.issuer.clone()),
        ),
        (
            "sub".to_owned(),
            RestrictedExpression::new_string(p.subject.clone()),
        ),
    ]);
    Entity::new(uid, attrs, HashSet::new()).ok()
}

/// The resource's entity when its origin is known: `backend` and `original`. Without one the
/// resource is left out of the entities, as before origins existed (so `has` is false and an
/// attribute read is an error).
fn resource_entity(uid: EntityUid, origin: &Origin) -> Option<Entity> {
    let attrs = HashMap::from([
        (
            "backend".to_owned(),
            RestrictedExpression::new_string(origin.backend.as_str().to_owned()),
        ),
        (
            "original".to_owned(),
            RestrictedExpression::new_string(origin.original.clone()),
        ),
    ]);
    Entity::new(uid, attrs, HashSet::new()).ok()
}

fn context(principal: &Principal) -> Context {
    let claims = Value::Object(sanitize_map(&principal.claims));
    match Context::from_json_value(serde_json::json!({ "claims": claims }), None) {
        Ok(c) => c,
        Err(e) => {
            debug!(error = %e, "claims unusable as Cedar context; evaluating without them");
            Context::empty()
        }
    }
}

impl switchboard_core::Authorizer for CedarAuthorizer {
    fn is_allowed(&self, principal: &Principal, action: &str, target: &Target) -> bool {
        self.is_allowed_at(principal, action, target, None)
    }

    fn is_allowed_at(
        &self,
        principal: &Principal,
        action: &str,
        target: &Target,
        origin: Option<&Origin>,
    ) -> bool {
        let (Some(p), Some(a), Some(r)) = (
            principal_uid(principal),
            uid("Action", action),
            resource_uid(target),
        ) else {
            return false;
        };
        let Some(mut entities) = principal_entity(principal, p.clone()).map(|e| vec![e]) else {
            return false;
        };
        // `Server` has no backend: one the gateway named for it would be a lie to policies.
        if let Some(origin) = origin.filter(|_| *target != Target::Server) {
            let Some(resource) = resource_entity(r.clone(), origin) else {
                return false;
            };
            entities.push(resource);
        }
        let Ok(entities) = Entities::from_entities(entities, None) else {
            return false;
        };
        let Ok(request) = Request::new(p, a, r, context(principal), None) else {
            return false;
        };
        let response = self
            .authorizer
            .is_authorized(&request, &self.policies, &entities);
        let errors = response.diagnostics().errors().count();
        if errors > 0 {
            debug!(
                errors,
                action, "Cedar evaluation errors (treated as not permitting)"
            );
        }
        response.decision() == Decision::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_core::Authorizer as _;

    fn user(sub: &str, claims: Value) -> Principal {
        Principal {
            issuer: "https://idp.example".into(),
            subject: sub.into(),
            claims: claims.as_object().cloned().unwrap_or_default(),
            credential: None,
        }
    }

    #[test]
    fn permits_what_the_policy_names_and_nothing_else() {
        let a = CedarAuthorizer::from_text(
            r#"
            permit(principal, action == Action::"list_tools", resource);
            permit(principal == User::"alice", action == Action::"call_tool", resource == Tool::"echo");
            permit(principal is ApiKey, action, resource);
            permit(principal, action == Action::"get_prompt", resource)
              when { context.claims has groups && context.claims.groups.contains("writers") };
            forbid(principal, action == Action::"call_tool", resource == Tool::"exit");
            "#,
        )
        .unwrap();
        let alice = user(
            "alice",
            serde_json::json!({"groups": ["writers"], "score": 1.5, "__entity": {"type":"X","id":"y"}}),
        );
        let bob = user("bob", serde_json::json!({}));
        let echo = Target::Tool("echo".into());
        assert!(a.is_allowed(&alice, "call_tool", &echo));
        assert!(!a.is_allowed(&bob, "call_tool", &echo));
        assert!(!a.is_allowed(&alice, "call_tool", &Target::Tool("add".into())));
        assert!(a.is_allowed(&bob, "list_tools", &Target::Server));
        assert!(a.is_allowed(&alice, "get_prompt", &Target::Prompt("p".into())));
        assert!(!a.is_allowed(&bob, "get_prompt", &Target::Prompt("p".into())));
        assert!(!a.is_allowed(&alice, "tasks/get", &Target::Server));
        let key = Principal {
            issuer: API_KEY_ISSUER.into(),
            subject: "admin".into(),
            claims: Map::new(),
            credential: None,
        };
        assert!(a.is_allowed(&key, "tasks/get", &Target::Server));
        assert!(!a.is_allowed(&key, "call_tool", &Target::Tool("exit".into())));
        assert!(!a.is_allowed(&Principal::anonymous(), "list_tools_x", &Target::Server));
    }

    fn from(backend: &str, original: &str) -> Origin {
        Origin {
            backend: switchboard_core::BackendId::try_from(backend).unwrap(),
            original: original.into(),
        }
    }

    #[test]
    fn resources_carry_their_backend_and_original_name_when_known() {
        let a = CedarAuthorizer::from_text(
            r#"
            permit(principal, action == Action::"call_tool", resource);
            forbid(principal, action == Action::"call_tool", resource)
              when { resource has backend && resource.backend == "alpha" && resource.original == "exit" };
            permit(principal, action == Action::"get_prompt", resource)
              when { resource.backend == "beta" };
            "#,
        )
        .unwrap();
        let p = Principal::anonymous();
        let call = |name: &str, origin: Option<&Origin>| {
            a.is_allowed_at(&p, "call_tool", &Target::Tool(name.into()), origin)
        };
        // Whatever the exposed name, alpha's `exit` is forbidden; others' are not.
        assert!(!call("exit", Some(&from("alpha", "exit"))));
        assert!(!call("alpha_exit", Some(&from("alpha", "exit"))));
        assert!(!call("a_exit", Some(&from("alpha", "exit"))));
        assert!(call("gamma_exit", Some(&from("gamma", "exit"))));
        assert!(call("alpha_echo", Some(&from("alpha", "echo"))));
        // No origin (`run`): the guarded forbid does not apply, as before.
        assert!(call("exit", None));
        assert!(a.is_allowed(&p, "call_tool", &Target::Tool("exit".into())));
        // A permit reading `resource.backend` of a target without one errors: denied.
        let prompt = Target::Prompt("p".into());
        assert!(!a.is_allowed_at(&p, "get_prompt", &prompt, None));
        assert!(!a.is_allowed_at(&p, "get_prompt", &prompt, Some(&from("alpha", "p"))));
        assert!(a.is_allowed_at(&p, "get_prompt", &prompt, Some(&from("beta", "p"))));
        // `Server` never gets a backend, even if one is passed.
        let listing = CedarAuthorizer::from_text(
            r#"permit(principal, action, resource) when { resource has backend };"#,
        )
        .unwrap();
        let origin = from("beta", "x");
        assert!(!listing.is_allowed_at(&p, "list_tools", &Target::Server, Some(&origin)));
        assert!(listing.is_allowed_at(&p, "call_tool", &Target::Tool("x".into()), Some(&origin)));
    }

    #[test]
    fn bad_policies_are_refused() {
        assert!(CedarAuthorizer::from_text("permit(principal, action, resource").is_err());
    }
}
