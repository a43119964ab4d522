//! Upstream errors.

/// Why a call to a backend produced no response.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The process could not be started.
    #[error("failed to start backend `{program}`: {reason}")]
    Spawn {
        /// The command.
        program: String,
        /// The OS error text.
        reason: String,
    },
    /// The backend closed its stdout (or could not be written to) while its process was still
    /// running, or no exit status was to be had; every pending call fails with this.
    #[error("backend closed: {0}")]
    Closed(String),
    /// The backend process ended; every pending call fails with this. Displays as "backend
    /// exited with status 3" or "backend killed by signal 9 (SIGKILL)".
    #[error("backend {0}")]
    Exited(crate::Exit),
    /// The write queue to the backend is full (backpressure; the backend is not reading).
    #[error("backend write queue is full")]
    Overloaded,
    /// A remote server failed the exchange (see [`crate::remote::RemoteError`]).
    #[error(transparent)]
    Remote(#[from] crate::remote::RemoteError),
    /// A call was issued under a key that is already pending. Keys are random; this indicates
    /// a bug, and refusing is the only safe answer.
    #[error("duplicate pending key")]
    DuplicateKey,
}

impl UpstreamError {
    /// A remote ended or lost the upstream session (it restarted, or expired it): the client
    /// session that depended on it is over too.
    pub fn is_session_lost(&self) -> bool {
        use crate::remote::RemoteError as R;
        matches!(
            self,
            UpstreamError::Remote(R::SessionLost | R::SessionEndedInFlight)
        )
    }

    /// The remote refused the call for its session (404) without running it: sending it
    /// again on a fresh session cannot run it twice.
    pub fn refused_unseen(&self) -> bool {
        matches!(
            self,
            UpstreamError::Remote(crate::remote::RemoteError::SessionLost)
        )
    }

    /// What a client may be told: fixed words per kind, no text a remote (or the TLS and
    /// DNS layers below it) wrote: an error page, a content type or a certificate name may
    /// quote anything. The details go to the log.
    pub fn client_text(&self) -> String {
        use crate::remote::RemoteError as R;
        match self {
            UpstreamError::Remote(r) => match r {
                R::Status { status, .. } => format!("remote answered HTTP {status}"),
                R::NotJson { status, .. } => {
                    format!("remote answered HTTP {status} with neither JSON nor an event stream")
                }
                R::Transport(_) => "remote unreachable".to_owned(),
                R::Malformed(_) => "remote sent a malformed response".to_owned(),
                other => other.to_string(),
            },
            other => other.to_string(),
        }
    }
}
