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

    /// Puts a checked policy in force; returns the one it replaces (for a rollback).
    pub(crate) fn install(
        &self,
        path: &Path,
        (text, policy): (String, CedarAuthorizer),
    ) -> Installed {
        let policy = std::mem::replace(&mut *self.current.write(), Arc::new(policy));
        let source = std::mem::replace(&mut *self.source.lock(), (path.to_owned(), text));
        Installed { policy, source }
    }

    /// Puts back the policy an [`Self::install`] replaced.
    pub(crate) fn restore(&self, old: Installed) {
        *self.current.write() = old.policy;
        *self.source.lock() = old.source;
    }

    fn now(&self) -> Arc<CedarAuthorizer> {
        self.current.read().clone()
    }
}

/// A policy that was in force, kept while a reload may still be rolled back.
pub(crate) struct Installed {
    policy: Arc<CedarAuthorizer>,
    source: (PathBuf, String),
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

    fn current(&self) -> Option<Arc<dyn Authorizer>> {
        Some(self.now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A request holds the policy it was admitted under: a reload does not change what
    /// that request's later checks (list filtering) decide.
    #[test]
    fn a_request_keeps_the_policy_it_started_with() {
        let dir = std::env::temp_dir().join(format!("sb-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let open = write(&dir, "open.cedar", "permit(principal, action, resource);\n");
        let shut = write(&dir, "shut.cedar", "forbid(principal, action, resource);\n");
        let policy = ReloadablePolicy::load(&open).unwrap();
        let who = Principal::anonymous();
        let target = Target::Tool("echo".into());
        let held = policy.current().unwrap();
        assert!(
            policy.check(&open).unwrap().is_none(),
            "same text: no change"
        );
        let old = policy.install(&shut, policy.check(&shut).unwrap().unwrap());
        assert!(
            !policy.is_allowed(&who, "call_tool", &target),
            "new requests: the new policy"
        );
        assert!(
            held.is_allowed(&who, "call_tool", &target),
            "the held one is unchanged"
        );
        policy.restore(old);
        assert!(policy.is_allowed(&who, "call_tool", &target), "rolled back");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
