//! Where an aggregated target is served, for admission, list filtering and audit
//! (`access::Origins`): read from the current merged lists, the same ones calls route by.

use switchboard_wire::Message;

use super::route::kinds_for;
use super::Vmcp;
use crate::access::{Origin, Origins, Target};
use crate::catalog::{self, Kind};
use crate::destination::Name;

impl Origins for Vmcp {
    fn of_request(&self, msg: &Message<'_>, target: &Target) -> Option<Origin> {
        let method = msg.method?;
        let exposed = target.name()?;
        if kinds_for(method).is_empty() {
            return None;
        }
        // Exactly the routing decision, so the policy judges what the call will reach.
        let pick = self.pick(method, msg.params).ok()?;
        let original = match &pick.name {
            Name::AsClient => exposed,
            Name::Renamed(original) | Name::RenamedRef(original) => original,
        };
        Some(Origin {
            backend: pick.backend,
            original: original.to_owned(),
        })
    }

    fn of_item(&self, target: &Target) -> Option<Origin> {
        let (kind, exposed) = match target {
            Target::Tool(n) => (Kind::Tools, n),
            Target::Prompt(n) => (Kind::Prompts, n),
            Target::ResourceTemplate(u) => (Kind::ResourceTemplates, u),
            Target::Resource(u) => {
                // As `resources/read` routes: the exact URI, then the first matching template.
                let (resources, templates) = (
                    self.current(Kind::Resources)?,
                    self.current(Kind::ResourceTemplates)?,
                );
                let backend = catalog::route_uri(&resources.all, &templates.all, u)?;
                return Some(Origin {
                    backend: backend.clone(),
                    original: u.clone(),
                });
            }
            Target::Server => return None,
        };
        let view = self.current(kind)?;
        let (backend, original) = view.all.lookup(exposed)?;
        Some(Origin {
            backend: backend.clone(),
            original: original.to_owned(),
        })
    }

    fn own_tool(&self, tool: &str) -> bool {
        self.tool_search().is_some() && crate::tool_search::is_own_tool(tool)
    }

    fn masks_denials(&self) -> bool {
        self.tool_search().is_some()
    }

    fn composite(&self, tool: &str) -> bool {
        self.composites.contains(tool)
    }

    fn any_item_of(
        &self,
        backend: &crate::BackendId,
        judge: &mut dyn FnMut(Target, Origin) -> bool,
    ) -> bool {
        type Wrap = fn(String) -> Target;
        let wrap: [(Kind, Wrap); 4] = [
            (Kind::Tools, Target::Tool),
            (Kind::Prompts, Target::Prompt),
            (Kind::Resources, Target::resource),
            (Kind::ResourceTemplates, Target::ResourceTemplate),
        ];
        wrap.into_iter().any(|(kind, target)| {
            let Some(view) = self.current(kind) else {
                return false;
            };
            let of = view.all.entries().iter().filter(|e| e.backend == *backend);
            of.into_iter().any(|e| {
                let origin = Origin {
                    backend: backend.clone(),
                    original: e.original.to_string(),
                };
                judge(target(e.exposed.to_string()), origin)
            })
        })
    }
}
