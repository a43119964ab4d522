//! The Cedar policy as a value a reload can replace: the gateway holds one
//! [`ReloadablePolicy`] for its whole life (`Access::authorizer`), and each decision asks the
//! policy that is current at that moment. Turning a policy on or off needs a restart (the
//! core takes a faster path when there is none, and the binary says so).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use switchboard_core::{Authorizer, Origin, Principal, Target};
use switchboard_policy::CedarAuthorizer;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct ReloadablePolicy {
    current: parking_lot::RwLock<Arc<CedarAuthorizer>>,
    /// Where it was read from, and the text it was built from (a reload whose text is the
    /// same changes nothing).
    source: parking_lot::Mutex<(PathBuf, String)>,
}

impl ReloadablePolicy {
    /// Reads and compiles the policy at `path`.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        let (text, policy) = read(path)?;
        println!(
            "switchboard: authorization: {} Cedar policies from {}",
            policy.len(),
            path.display()
        );
        Ok(ReloadablePolicy {
            current: parking_lot::RwLock::new(Arc::new(policy)),
            source: parking_lot::Mutex::new((path.to_owned(), text)),
        })
    }

    /// The policy at `path` compiled, when it differs from the one in force; `None` when it
    /// is the same. Changes nothing (see [`Self::install`]).
    pub(crate) fn check(&self, path: &Path) -> anyhow::Result<Option<(String, CedarAuthorizer)>> {
        let (text, policy) = read(path)?;
        let source = self.source.lock();
        Ok((source.0 != path || source.1 != text).then_some((text, policy)))
    }

    /// Puts a checked policy in force.
    pub(crate) fn install(&self, path: &Path, (text, policy): (String, CedarAuthorizer)) {
        *self.current.write() = Arc::new(policy);
        *self.source.lock() = (path.to_owned(), text);
    }

    fn now(&self) -> Arc<CedarAuthorizer> {
        self.current.read().clone()
    }
}

fn read(path: &Path) -> anyhow::Result<(String, CedarAuthorizer)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let policy =
        CedarAuthorizer::from_text(&text).with_context(|| format!("in {}", path.display()))?;
    Ok((text, policy))
}

impl Authorizer for ReloadablePolicy {
    fn is_allowed(&self, principal: &Principal, action: &str, target: &Target) -> bool {
        self.now().is_allowed(principal, action, target)
    }

    fn is_allowed_at(
        &self,
        principal: &Principal,
        action: &str,
        target: &Target,
        origin: Option<&Origin>,
    ) -> bool {
        self.now().is_allowed_at(principal, action, target, origin)
    }
}
