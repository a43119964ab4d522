//! CPU accounting from Linux `/proc`: one process, or a whole process tree.
//!
//! A gateway's cost is not only its own process: the stdio backend it spawned, a Node or Python
//! launcher in front of it, workers it forked. Comparing gateways honestly means charging each
//! one for everything it runs, so `--target-pid` sums the tree under the given process.

use std::collections::HashMap;
use std::time::Duration;

/// One `/proc/<pid>/stat` line, the fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pid: u32,
    ppid: u32,
    /// utime + stime, in USER_HZ ticks.
    own: u64,
    /// cutime + cstime: children that exited and were waited for.
    reaped: u64,
}

/// Linux fixes USER_HZ at 100 ticks per second for `/proc`.
const TICK: Duration = Duration::from_millis(10);

fn parse_stat(stat: &str) -> Option<Stat> {
    // `pid (comm) state ppid …`: comm may itself contain spaces and parentheses, so split at
    // the last `)`. After it, state is index 0, ppid 1, utime 11, stime 12, cutime 13, cstime 14.
    let (head, rest) = stat.rsplit_once(')')?;
    let pid = head.split_once(' ')?.0.trim().parse().ok()?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(Stat {
        pid,
        ppid: u32::try_from(num(1)?).ok()?,
        own: num(11)? + num(12)?,
        reaped: num(13)? + num(14)?,
    })
}

fn read_stat(pid: &str) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// User + system CPU time so far of process `pid`, or of this process for `None` (`None` when
/// not on Linux or once the process is gone).
pub(crate) fn process_cpu(pid: Option<u32>) -> Option<Duration> {
    let stat = match pid {
        Some(pid) => read_stat(&pid.to_string())?,
        None => read_stat("self")?,
    };
    Some(TICK * u32::try_from(stat.own).ok()?)
}

/// CPU of the tree rooted at `root` so far: every live descendant's own time plus the time of
/// descendants already reaped (their parents' cutime/cstime), and how many processes the tree
/// has now. A descendant that exits between two readings is still counted once its parent
/// waits for it; a zombie not yet waited for is lost, which a server under load does not leave.
pub(crate) fn tree_cpu(root: u32) -> Option<(Duration, usize)> {
    let stats: Vec<Stat> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name();
            let name = name.to_str()?;
            name.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| read_stat(name))?
        })
        .collect();
    let (ticks, count) = sum_tree(&stats, root)?;
    Some((TICK * u32::try_from(ticks).ok()?, count))
}

/// Ticks and process count of the tree under `root` among `stats` (`None` if `root` is gone).
fn sum_tree(stats: &[Stat], root: u32) -> Option<(u64, usize)> {
    let mut children: HashMap<u32, Vec<&Stat>> = HashMap::new();
    let mut top = None;
    for s in stats {
        if s.pid == root {
            top = Some(s);
        } else {
            children.entry(s.ppid).or_default().push(s);
        }
    }
    let mut todo = vec![top?];
    let (mut ticks, mut count) = (0, 0);
    while let Some(s) = todo.pop() {
        ticks += s.own + s.reaped;
        count += 1;
        todo.extend(children.get(&s.pid).into_iter().flatten());
    }
    Some((ticks, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_name_has_spaces_and_parens() {
        let line = "4242 (node (x) y) S 17 4242 4242 0 -1 4194560 1 0 0 0 120 30 7 3 20 0 11 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                pid: 4242,
                ppid: 17,
                own: 150,
                reaped: 10
            })
        );
        assert_eq!(parse_stat("12 (x) S"), None);
    }

    #[test]
    fn sums_the_tree_and_nothing_else() {
        let s = |pid, ppid, own, reaped| Stat {
            pid,
            ppid,
            own,
            reaped,
        };
        // 1 → 2 → 3 is the tree; 4 is a sibling of 1, 5 a child of 4.
        let stats = [
            s(4, 0, 1000, 0),
            s(3, 2, 5, 0),
            s(1, 0, 10, 2),
            s(2, 1, 20, 0),
            s(5, 4, 7, 0),
        ];
        assert_eq!(sum_tree(&stats, 1), Some((37, 3)));
        assert_eq!(sum_tree(&stats, 2), Some((25, 2)));
        assert_eq!(sum_tree(&stats, 9), None);
    }

    #[test]
    fn reads_this_process() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu(None).is_some());
            let (_, n) = tree_cpu(std::process::id()).unwrap();
            assert!(n >= 1);
        }
    }
}
