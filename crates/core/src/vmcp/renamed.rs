//! The names the virtual server exposes that are not their backend's own: the mapping an
//! operator reads logs and policies with.

use crate::catalog::Kind;
use crate::send::Sender;
use crate::{BackendId, Backends};

use super::Vmcp;

/// A tool or prompt the virtual server exposes under a name of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenamedName {
    /// `tool` or `prompt`.
    pub kind: &'static str,
    /// The name clients see.
    pub exposed: String,
    pub backend: BackendId,
    /// The backend's own name.
    pub original: String,
}

impl Vmcp {
    /// Every tool and prompt exposed under a name other than its backend's own (prefixed,
    /// shortened to the 64-character rule, overridden), from the lists as last built: the
    /// mapping an operator needs to read logs and policies.
    pub(crate) async fn renamed_names(
        &self,
        sender: &Sender,
        backends: &Backends,
    ) -> Vec<RenamedName> {
        for kind in [Kind::Tools, Kind::Prompts] {
            let _ = self.view(kind, sender, backends).await;
        }
        self.renamed_now()
    }

    /// The same from the lists as they are now (nothing fetched).
    pub(crate) fn renamed_now(&self) -> Vec<RenamedName> {
        let vmcp = self;
        let mut out = Vec::new();
        for (kind, label) in [(Kind::Tools, "tool"), (Kind::Prompts, "prompt")] {
            let Some(view) = vmcp.current(kind) else {
                continue;
            };
            out.extend(view.all.renamed().map(|e| RenamedName {
                kind: label,
                exposed: e.exposed.to_string(),
                backend: e.backend.clone(),
                original: e.original.to_string(),
            }));
        }
        out
    }
}
