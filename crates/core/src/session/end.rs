//! Why a session ended.

/// Why a session ended, as its audit line says (`reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndReason {
    /// The client's DELETE.
    Deleted,
    /// Idle past the TTL (reaper).
    Expired,
    /// Per-session mode: its backend process had exited (noticed at the session's next
    /// request).
    BackendExited,
    /// Per-session mode: its listen stream was gone past the grace period (reaper).
    ListenLost,
    /// HTTP+SSE: its stream closed (client gone, or evicted for not reading).
    StreamClosed,
    /// Gateway shutdown.
    Shutdown,
    /// Per-session mode: its `initialize` failed, or the client left during it. The client
    /// never had the session, and the `initialize` line already records the outcome, so no
    /// line of its own.
    NeverOpened,
}

impl EndReason {
    pub(crate) fn audit(self) -> Option<&'static str> {
        Some(match self {
            EndReason::Deleted => "deleted",
            EndReason::Expired => "expired",
            EndReason::BackendExited => "backend_exited",
            EndReason::ListenLost => "listen_lost",
            EndReason::StreamClosed => "stream_closed",
            EndReason::Shutdown => "shutdown",
            EndReason::NeverOpened => return None,
        })
    }
}
