//! The environment variables the gateway reads for its configuration (a `${VAR}` reference,
//! an API key's `keyEnv`, its own fixed-name secrets). They are the gateway's: a stdio backend
//! does not inherit them (`StdioConfig::withheld`), so a key or token meant for one party is not
//! handed to every server the gateway starts. A backend that needs one gets it through its own
//! `env` (`env: {TOKEN: "${TOKEN}"}`), which sets it explicitly.
//!
//! Every read goes through [`var`], which records the name; [`withheld`] is what is recorded so
//! far, so it is called when a backend is configured (after the configuration was read).

use parking_lot::Mutex;
use std::collections::BTreeSet;

/// Read for the configuration only when asked for, but the gateway's whenever set.
const FIXED: [&str; 2] = [
    crate::session_store::PASSWORD_ENV,
    crate::replica::SECRET_ENV,
];

/// The basics every process expects. A configuration may name one (`${HOME}`), but they are
/// no secret, and a backend without them would not start.
const BASICS: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TMPDIR", "TERM", "TZ",
];

static READ: Mutex<BTreeSet<String>> = parking_lot::const_mutex(BTreeSet::new());

/// The value of `name` in the process environment, recording that the configuration read it.
pub(crate) fn var(name: &str) -> Option<String> {
    if !BASICS.contains(&name) {
        READ.lock().insert(name.to_owned());
    }
    std::env::var(name).ok()
}

/// The variables a stdio backend must not inherit: the fixed ones and every one read so far.
pub(crate) fn withheld() -> Vec<String> {
    let read = READ.lock();
    let fixed = FIXED.iter().map(|v| (*v).to_owned());
    let mut all: BTreeSet<String> = fixed.collect();
    all.extend(read.iter().cloned());
    all.into_iter().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_is_read_is_withheld_and_the_basics_are_not() {
        let _ = super::var("SWITCHBOARD_TEST_CONFIG_VAR_READ");
        let _ = super::var("PATH");
        let withheld = super::withheld();
        assert!(withheld
            .iter()
            .any(|v| v == "SWITCHBOARD_TEST_CONFIG_VAR_READ"));
        assert!(withheld.iter().any(|v| v == super::FIXED[0]));
        assert!(!withheld.iter().any(|v| v == "PATH"));
    }
}
