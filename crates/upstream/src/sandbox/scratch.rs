//! How a sandbox's scratch space is shared out among its writable tmpfs.

/// The bounds of one sandbox's writable tmpfs, which hold host memory that no process's
/// address space counts: one budget (the backend's `memory`) shared among them, so that
/// together they hold at most that much. In eighths: `/tmp` two (six without a private
/// home), a private home four (it holds a copy of the backend's home), `/var/tmp` and
/// `/dev/shm` one each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scratch {
    /// `/tmp`.
    pub tmp: u64,
    /// `/var/tmp`.
    pub var_tmp: u64,
    /// `/dev/shm`.
    pub shm: u64,
    /// A private home ([`super::SANDBOX_HOME`]); 0 for the shared process, whose home is on the host.
    pub home: u64,
}

impl Scratch {
    /// `budget` shared out; each share at least a page (a tmpfs of size 0 would be unbounded).
    pub fn of(budget: u64, private: bool) -> Scratch {
        const PAGE: u64 = 4096;
        let eighth = (budget / 8).max(PAGE);
        let (tmp, home) = match private {
            true => (2 * eighth, 4 * eighth),
            false => (6 * eighth, 0),
        };
        Scratch {
            tmp,
            var_tmp: eighth,
            shm: eighth,
            home,
        }
    }
}
