//! No orphan backends, even when the gateway is killed with SIGKILL.
//!
//! Closing stdin asks a well-behaved stdio server to exit, and `kill_on_drop` covers every
//! orderly exit of the gateway; neither runs when the gateway itself is SIGKILLed. On Linux the
//! child therefore asks the kernel, between `fork` and `exec`, to SIGKILL it when its parent
//! dies (`PR_SET_PDEATHSIG`). The kernel tracks the *thread* that forked: the shared backend is
//! spawned at startup from the main thread, restarts from the runtime's workers, and
//! per-session and per-call backends from [`crate::forker`]'s thread; all of them live as
//! long as the gateway. Never spawn from a thread that may exit first (tokio's blocking pool
//! retires idle threads after ten seconds, and its children would die with them).

use tokio::process::Command;

/// Arranges for the spawned child to be killed when the gateway process dies.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the child after fork and before exec, where only
    // async-signal-safe calls are allowed: `prctl` and `getppid` are system calls that
    // allocate nothing and take no locks.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect: then we are already
            // orphaned (re-parented) and must not start at all. A raw error code: building
            // a message would allocate, which is not allowed here.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Marks every descriptor but stdin, stdout and stderr close-on-exec in the child, so a
/// backend inherits none of the gateway's: not one the gateway itself inherited without
/// close-on-exec (a supervisor's, a shell's), nor one a library opened without it.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn only_stdio(command: &mut Command) {
    // SAFETY: the closure runs in the child after fork and before exec: `close_range`,
    // `getrlimit` and `fcntl` are system calls that allocate nothing and take no locks.
    // Close-on-exec, not closed: the standard library's own error pipe must work until exec.
    unsafe {
        command.pre_exec(|| {
            let all = libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if all != 0 {
                // Kernels before 5.11: each descriptor up to the limit.
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                let max = match libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) {
                    0 => limit.rlim_cur.min(1 << 16) as libc::c_int,
                    _ => 1024,
                };
                for fd in 3..max {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags >= 0 {
                        libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                    }
                }
            }
            Ok(())
        });
    }
}

/// Elsewhere nothing more is done.
#[cfg(not(target_os = "linux"))]
pub(crate) fn only_stdio(_command: &mut Command) {}

/// Elsewhere only the orderly paths (stdin close, `kill_on_drop`) apply.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent(_command: &mut Command) {}

/// Puts the child in a process group of its own, led by it: whatever it starts (`npx`'s
/// `npm exec`, its `sh`, the `node` server) stays in that group, so all of it can be
/// stopped together ([`kill_group`]).
pub(crate) fn own_group(command: &mut Command) {
    command.process_group(0);
}

/// Kills what is left of the process group `leader` led, once the leader has ended (or is
/// being killed): descendants that outlived it would keep running under PID 1 and keep the
/// backend's pipes open in the gateway. While any member lives, the kernel does not hand
/// the group's id to a new process, so the signal reaches only that group; with none left
/// it reaches nothing.
#[allow(unsafe_code)]
pub(crate) fn kill_group(leader: u32) {
    let Ok(group) = i32::try_from(leader) else {
        return;
    };
    if group <= 1 {
        return;
    }
    // SAFETY: `kill` is a plain system call; a negative pid names a process group. It
    // touches no memory of ours.
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
}
