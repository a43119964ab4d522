//! Which backend an aggregated request goes to, and under which name: the part of
//! `resolve::Resolver::choose_backend` that reads the merged lists. Tools and prompts route by
//! their exposed name, resources by URI (then by template), completions by their reference. A name
//! the merged list does not hold — unknown, filtered, or dropped by the strategy — is refused
//! the same way in both eras, before any backend sees it.

use crate::error::{clip, clip_uri};
use serde_json::value::RawValue;
use switchboard_wire::{method, object_member};

use super::{View, Vmcp};
use crate::catalog::{self, Kind};
use crate::destination::{Name, Pick, Picker};
use crate::BackendId;
use crate::CoreError;

/// The lists a method's routing reads (empty: it does not route by name).
pub(crate) fn kinds_for(method: &str) -> &'static [Kind] {
    match method {
        "tools/call" => &[Kind::Tools],
        "prompts/get" => &[Kind::Prompts],
        "resources/read" | method::SUBSCRIBE | method::UNSUBSCRIBE => {
            &[Kind::Resources, Kind::ResourceTemplates]
        }
        "completion/complete" => &[Kind::Prompts, Kind::ResourceTemplates],
        _ => &[],
    }
}

/// Whether the aggregating gateway routes `method` to a backend; every other method it
/// answers itself (lists, `ping`, discovery) or refuses. The same methods [`Vmcp::pick`]
/// has a backend for.
pub(crate) fn routable(method: &str) -> bool {
    !kinds_for(method).is_empty()
        || method == crate::modern::LISTEN
        || crate::tasks::concerns_tasks(method)
}

/// The list method a request is, if it is one.
pub(crate) fn list_kind(method: &str) -> Option<Kind> {
    super::KINDS.into_iter().find(|k| k.list_method() == method)
}

impl Picker for Vmcp {
    fn pick(&self, method: &str, params: Option<&RawValue>) -> Result<Pick, CoreError> {
        Vmcp::pick(self, method, params)
    }
    fn serving(&self, uri: &str) -> Option<BackendId> {
        Vmcp::serving(self, uri)
    }
}

impl Vmcp {
    /// Where a client's request goes, from the current merged lists.
    pub(crate) fn pick(&self, method: &str, params: Option<&RawValue>) -> Result<Pick, CoreError> {
        let view = |kind| self.current(kind).ok_or(CoreError::ListsNotBuilt);
        match method {
            "tools/call" => {
                let name = str_param(params, "name");
                let pick = by_name(&*view(Kind::Tools)?, name.clone(), "tool")?;
                let original = match &pick.name {
                    Name::Renamed(original) => original.as_ref(),
                    _ => name.as_str(),
                };
                self.refuse_quarantined(&pick.backend, original)?;
                Ok(pick)
            }
            "prompts/get" => by_name(&*view(Kind::Prompts)?, str_param(params, "name"), "prompt"),
            "resources/read" | method::SUBSCRIBE | method::UNSUBSCRIBE => {
                let uri = str_param(params, "uri");
                let (resources, templates) =
                    (view(Kind::Resources)?, view(Kind::ResourceTemplates)?);
                match catalog::route_uri(&resources.all, &templates.all, &uri) {
                    Some(backend) => Ok(Pick {
                        backend: backend.clone(),
                        name: Name::AsClient,
                    }),
                    None => Err(CoreError::UnknownName("resource", clip_uri(&uri))),
                }
            }
            "completion/complete" => self.pick_completion(params),
            // A Modern listen stays with the primary (whose registries serve it). Task methods
            // naming a handle never get here (`pipeline/tasks.rs` pins them to the task's
            // backend); any other task name goes to the primary, where it names nothing of the
            // caller's and gets the unknown-task answer.
            m if m == crate::modern::LISTEN || crate::tasks::concerns_tasks(m) => Ok(Pick {
                backend: self.shape().order[0].0.clone(),
                name: Name::AsClient,
            }),
            other => Err(CoreError::Unsupported(format!(
                "{other} (not routable across several backends)"
            ))),
        }
    }

    /// The backend that serves `uri` (as `resources/read` routes it), from the current lists.
    pub(crate) fn serving(&self, uri: &str) -> Option<BackendId> {
        let (resources, templates) = (
            self.current(Kind::Resources)?,
            self.current(Kind::ResourceTemplates)?,
        );
        catalog::route_uri(&resources.all, &templates.all, uri).cloned()
    }

    fn pick_completion(&self, params: Option<&RawValue>) -> Result<Pick, CoreError> {
        let reference = params.and_then(|p| object_member(p, "ref"));
        let kind_of = reference.and_then(|r| str_member(r, "type"));
        match kind_of.as_deref() {
            Some("ref/prompt") => {
                let name = reference
                    .and_then(|r| str_member(r, "name"))
                    .unwrap_or_default();
                let view = self
                    .current(Kind::Prompts)
                    .ok_or(CoreError::ListsNotBuilt)?;
                let pick = by_name(&view, name, "prompt")?;
                Ok(Pick {
                    name: match pick.name {
                        Name::Renamed(original) => Name::RenamedRef(original),
                        other => other,
                    },
                    ..pick
                })
            }
            Some("ref/resource") => {
                let uri = reference
                    .and_then(|r| str_member(r, "uri"))
                    .unwrap_or_default();
                let view = self
                    .current(Kind::ResourceTemplates)
                    .ok_or(CoreError::ListsNotBuilt)?;
                match view
                    .all
                    .lookup(&uri)
                    .map(|(b, _)| b)
                    .or_else(|| view.all.route_uri(&uri))
                {
                    Some(backend) => Ok(Pick {
                        backend: backend.clone(),
                        name: Name::AsClient,
                    }),
                    None => Err(CoreError::UnknownName("resource template", clip_uri(&uri))),
                }
            }
            _ => Err(CoreError::InvalidParams("ref")),
        }
    }
}

fn by_name(view: &View, name: String, what: &'static str) -> Result<Pick, CoreError> {
    match view.all.lookup(&name) {
        Some((backend, original)) => Ok(Pick {
            backend: backend.clone(),
            name: if original == name {
                Name::AsClient
            } else {
                Name::Renamed(original.into())
            },
        }),
        None => Err(CoreError::UnknownName(what, clip(&name))),
    }
}

fn str_param(params: Option<&RawValue>, key: &str) -> String {
    params.and_then(|p| str_member(p, key)).unwrap_or_default()
}

fn str_member(raw: &RawValue, key: &str) -> Option<String> {
    object_member(raw, key).and_then(|v| serde_json::from_str::<String>(v.get()).ok())
}

impl Vmcp {
    /// Refuses a call to a quarantined tool (`original`: its backend's own name).
    pub(crate) fn refuse_quarantined(
        &self,
        backend: &BackendId,
        original: &str,
    ) -> Result<(), CoreError> {
        match &self.trust {
            Some(trust) if trust.blocks(backend.as_str(), original) => {
                Err(CoreError::Quarantined {
                    backend: backend.clone(),
                    tool: original.chars().take(128).collect(),
                })
            }
            _ => Ok(()),
        }
    }
}
