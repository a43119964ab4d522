//! How a backend process ended, in words an operator reads ("exited with status 3", "killed
//! by signal 9 (SIGKILL)"), not `ExitStatus`'s debug form (`unix_wait_status(768)`).

use std::process::ExitStatus;

/// A backend process's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub ExitStatus);

impl Exit {
    /// The exit code, when the process exited on its own.
    pub fn code(&self) -> Option<i32> {
        self.0.code()
    }

    /// The signal that ended the process, when one did.
    pub fn signal(&self) -> Option<i32> {
        #[cfg(unix)]
        {
            std::os::unix::process::ExitStatusExt::signal(&self.0)
        }
        #[cfg(not(unix))]
        {
            None
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code(), self.signal()) {
            (Some(code), _) => write!(f, "exited with status {code}"),
            (None, Some(sig)) => match signal_name(sig) {
                Some(name) => write!(f, "killed by signal {sig} ({name})"),
                None => write!(f, "killed by signal {sig}"),
            },
            (None, None) => write!(f, "ended ({})", self.0),
        }
    }
}

/// Names of the signals a crashing or killed process usually dies of (Linux numbering).
fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => return None,
    })
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn statuses_read_as_words() {
        // Raw wait statuses: exit code in the high byte, terminating signal in the low bits.
        assert_eq!(
            Exit(ExitStatus::from_raw(3 << 8)).to_string(),
            "exited with status 3"
        );
        assert_eq!(
            Exit(ExitStatus::from_raw(9)).to_string(),
            "killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            Exit(ExitStatus::from_raw(64)).to_string(),
            "killed by signal 64"
        );
    }
}
