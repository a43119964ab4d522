//! How many tools, prompts and resources each backend offers, for `/status`: the length of
//! its last known list of each kind (what the merged lists are built from), before the
//! gateway's filters. Nothing is fetched for it.

use super::Vmcp;
use crate::catalog::Kind;
use crate::health::ItemCounts;
use crate::BackendId;

impl Vmcp {
    /// `id`'s counts, from the lists the gateway holds now.
    pub(crate) fn item_counts(&self, id: &BackendId) -> ItemCounts {
        let state = self.state.lock();
        let count = |kind| state.lists.get(&(id.clone(), kind)).map(|c| c.items.len());
        ItemCounts {
            tools: count(Kind::Tools),
            prompts: count(Kind::Prompts),
            resources: count(Kind::Resources),
            resource_templates: count(Kind::ResourceTemplates),
        }
    }
}
