//! How many tools, prompts and resources each backend offers, for `/status`: the length of
//! its last known list of each kind (what the merged lists are built from), before the
//! gateway's filters. Nothing is fetched for it.

use super::Vmcp;
use crate::catalog::Kind;
use crate::BackendId;

/// One backend's item counts; `None` for a kind never listed from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ItemCounts {
    pub(crate) tools: Option<usize>,
    pub(crate) prompts: Option<usize>,
    pub(crate) resources: Option<usize>,
    pub(crate) resource_templates: Option<usize>,
}

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
