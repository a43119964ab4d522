use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchboard_wire::Message;

use super::*;
use crate::{spawn, InboundSink, StdioConfig};

fn host(run_as: bool) -> Host {
    Host {
        bwrap: "/usr/bin/bwrap".into(),
        prlimit: "/usr/bin/prlimit".into(),
        sh: "/bin/sh".into(),
        cp: "/bin/cp".into(),
        run_as: run_as.then(|| RunAs {
            setpriv: "/usr/bin/setpriv".into(),
            uid: 65534,
            gid: 65534,
        }),
    }
}

fn sandbox(home: &Path) -> Sandbox {
    Sandbox {
        read: vec!["/srv/data".into()],
        write: vec!["/srv/out".into()],
        masked: Vec::new(),
        hidden: Vec::new(),
        home: home.to_path_buf(),
        limits: Limits {
            memory: Some(256 << 20),
            pids: Some(64),
            open_files: Some(128),
            cpu: None,
        },
        host: host(false),
        egress: None,
    }
}

fn argv(launch: &Launch) -> Vec<String> {
    std::iter::once(launch.program.to_string_lossy().into_owned())
        .chain(launch.args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect()
}

/// The flags in their order: namespaces first, the read-only root, the masks, the listed
/// paths over them, the home, then the limits tool and the command.
#[test]
fn the_argv_masks_first_and_binds_the_listed_paths_over_the_masks() {
    let s = sandbox(Path::new("/var/cache/sb/files"));
    let all = argv(&s.launch("npx", &["-y".into(), "pkg".into()], None, false, &[], None));
    let text = all.join(" ");
    // /dev read-only (nothing to fill), its /dev/shm an eighth of `memory` (256 MiB).
    assert!(
        text.starts_with(
            "/usr/bin/bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --new-session --cap-drop ALL --ro-bind / / --dev /dev --size 33554432 --tmpfs /dev/shm --remount-ro /dev --proc /proc --size 16777216 --tmpfs "
        ),
        "{text}"
    );
    // The scratch masks share `memory` with /dev/shm (/tmp six eighths, /var/tmp one), the
    // others (meant to stay empty) hold 16 MiB.
    assert!(text.contains("--size 201326592 --tmpfs /tmp "), "{text}");
    if Path::new("/var/tmp").is_dir() {
        assert!(text.contains("--size 33554432 --tmpfs /var/tmp "), "{text}");
    }
    assert!(text.contains("--size 16777216 --tmpfs /root "), "{text}");
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    assert!(at("--tmpfs /tmp") < at("--ro-bind /srv/data /srv/data"));
    assert!(at("--ro-bind /srv/data /srv/data") < at("--bind /srv/out /srv/out"));
    assert!(at("--bind /srv/out /srv/out") < at("--bind /var/cache/sb/files /home/switchboard"));
    assert!(text.ends_with(
        "--chdir /home/switchboard -- /usr/bin/prlimit --as=268435456 --nproc=64 --nofile=128 --core=0 -- npx -y pkg"
    ), "{text}");
}

/// A process serving one caller: its home is a bounded tmpfs inside the sandbox, the
/// backend's home is bound read-only at the seed's place (never writable, never at the
/// home), and the command first copies the seed with the host's `cp`, then runs the program.
#[test]
fn a_private_home_is_a_bounded_tmpfs_seeded_inside() {
    let s = sandbox(Path::new("/var/cache/sb/files"));
    let all = argv(&s.launch("npx", &["-y".into(), "pkg".into()], None, true, &[], None));
    let text = all.join(" ");
    assert!(
        text.contains(
            "--bind /srv/out /srv/out --size 134217728 --tmpfs /home/switchboard --ro-bind /var/cache/sb/files /run/switchboard/seed --remount-ro "
        ),
        "{text}"
    );
    // The masks meant to stay empty are sealed once everything under them is laid; the
    // scratch ones stay writable.
    let seed = text
        .find("/run/switchboard/seed --remount-ro")
        .expect("sealed");
    assert!(text[seed..].contains(" --remount-ro /run "), "{text}");
    assert!(!text.contains("--remount-ro /tmp"), "{text}");
    assert!(!text.contains("--remount-ro /var/tmp"), "{text}");
    // The home takes half of `memory`, /tmp keeps a quarter.
    assert!(text.contains("--size 67108864 --tmpfs /tmp "), "{text}");
    assert!(!text.contains("--bind /var/cache/sb/files /home"), "{text}");
    let limits = all.iter().position(|a| a == "--core=0").expect("limits");
    assert_eq!(all[limits + 1..limits + 3], ["--", "/bin/sh"]);
    assert_eq!(all[limits + 3], "-c");
    let script = &all[limits + 4];
    assert!(
        script.starts_with(
            r#""$1" -R --no-dereference --preserve=mode,timestamps,links /run/switchboard/seed/. /home/switchboard/ || {"#
        ),
        "{script}"
    );
    assert!(
        script.ends_with(r#"exit 70; }; shift; exec "$@""#),
        "{script}"
    );
    assert_eq!(all[limits + 5..], ["sh", "/bin/cp", "npx", "-y", "pkg"]);
}

/// The writable tmpfs hold at most the budget together (none unbounded, however small it
/// is), with a private home or without.
#[test]
fn the_scratch_tmpfs_share_one_budget() {
    for budget in [1 << 30, 256 << 20, 100_000_007, 64 << 10] {
        for private in [false, true] {
            let s = Scratch::of(budget, private);
            let sum = s.tmp + s.var_tmp + s.shm + s.home;
            assert!(sum <= budget.max(8 * 4096), "{budget} {private}: {s:?}");
            assert!(s.tmp > 0 && s.var_tmp > 0 && s.shm > 0, "{s:?}");
            assert_eq!(s.home > 0, private, "{s:?}");
        }
    }
}

/// A root gateway drops to nobody before bwrap; a configured directory is where it starts.
#[test]
fn root_drops_to_nobody_and_cwd_is_kept() {
    let mut s = sandbox(Path::new("/var/cache/sb/files"));
    s.host = host(true);
    let all = argv(&s.launch("srv", &[], Some(Path::new("/srv/data")), false, &[], None));
    assert_eq!(
        all[..6],
        [
            "/usr/bin/setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "/usr/bin/bwrap"
        ]
    );
    assert!(all.join(" ").contains("--chdir /srv/data --"));
}

/// With an allow list, the gateway binary and the proxy's socket are bound in after every
/// mask (over `/run`'s), and the bridge runs first, before the limits: the program it
/// starts is limited as without it. Without a socket (no allow list) nothing of it.
#[test]
fn an_allow_list_binds_the_bridge_and_runs_it_before_the_limits() {
    let mut s = sandbox(Path::new("/var/cache/sb/files"));
    let allow = crate::egress::AllowList::parse(&["api.github.com:443"]).unwrap();
    let limits = crate::egress::Limits::default();
    let egress = crate::egress::Egress::new("files", allow, limits, "/opt/sb/switchboard".into());
    s.egress = Some(Arc::new(egress));
    let sock = Path::new("/tmp/switchboard-egress-1-ab/proxy.sock");
    let text = argv(&s.launch("srv", &["a".into()], None, false, &[], Some(sock))).join(" ");
    let bind = "--ro-bind /opt/sb/switchboard /run/switchboard/bridge \
                --ro-bind /tmp/switchboard-egress-1-ab/proxy.sock /run/switchboard/egress.sock";
    let at = text.find(bind).unwrap_or_else(|| panic!("{text}"));
    assert!(text.find("--tmpfs /run").unwrap() < at, "{text}");
    assert!(
        text.contains(
            " -- /run/switchboard/bridge sandbox-bridge --socket /run/switchboard/egress.sock \
             -- /usr/bin/prlimit --as=268435456"
        ),
        "{text}"
    );
    assert!(text.ends_with("-- srv a"), "{text}");
    assert!(s
        .describe()
        .contains("network only through the egress proxy, to api.github.com:443"));
    let none = argv(&s.launch("srv", &[], None, false, &[], None)).join(" ");
    assert!(!none.contains("bridge"), "{none}");
}

/// A hidden file's directory is covered: its other entries are bound back, the hidden ones
/// (existing or not) are not, the sandbox's own mounts under it are laid again, and it is
/// read-only. A file under a mask needs nothing.
#[test]
fn hidden_files_directories_are_covered() {
    let dir = std::env::current_dir().unwrap();
    let manifest = dir.join("Cargo.toml");
    let mut s = sandbox(Path::new("/var/cache/sb/files"));
    s.write.push(dir.join("src"));
    s.hidden = vec![
        manifest.clone(),
        dir.join("not-yet.log"),
        "/root/.ssh/id_rsa".into(),
    ];
    let text = argv(&s.launch("srv", &[], None, false, &[], None)).join(" ");
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    let d = dir.display();
    let cover = at(&format!("--tmpfs {d} "));
    assert!(at(&format!("--bind {d}/src {d}/src")) < cover);
    assert!(cover < at(&format!("--ro-bind {d}/src {d}/src --bind {d}/src {d}/src")));
    assert!(cover < at(&format!("--remount-ro {d} ")));
    assert!(!text.contains("Cargo.toml"), "{text}");
    assert!(!text.contains("not-yet.log"), "{text}");
    assert!(!text.contains("/root/.ssh"), "{text}");
}

/// The other backends' homes are hidden as the gateway's files are (their directory
/// covered, they are not bound back), the backend's own is not among them, and a path inside
/// another hidden one (a home in the hidden directory of default homes) needs no cover of
/// its own (bubblewrap could not make one inside a read-only cover).
#[test]
fn other_backends_homes_are_hidden() {
    let dir = std::env::current_dir().unwrap();
    let homes = dir.join("src");
    let mut s = sandbox(&homes.join("own"));
    s.hidden = vec![homes.clone()];
    let others = [homes.join("other"), dir.join("Cargo.toml"), s.home.clone()];
    let text = argv(&s.launch("srv", &[], None, false, &others, None)).join(" ");
    let d = dir.display();
    assert_eq!(text.matches(&format!("--tmpfs {d} ")).count(), 1, "{text}");
    assert!(!text.contains(&format!("--tmpfs {d}/src ")), "{text}");
    assert!(!text.contains("Cargo.toml"), "{text}");
    assert!(!text.contains(&format!("{d}/src/other")), "{text}");
    assert!(
        !text.contains(&format!("--ro-bind {d}/src {d}/src")),
        "{text}"
    );
    let homes_set = Homes::default();
    homes_set.add([s.home.clone(), homes.join("other"), s.home.clone()]);
    assert_eq!(homes_set.others(&s.home), vec![homes.join("other")]);
}

#[test]
fn visibility_follows_masks_and_listed_paths() {
    let mut s = sandbox(Path::new("/var/cache/sb/files"));
    s.read.push("/root/project".into());
    assert_eq!(
        s.hides(Path::new("/root/.ssh/id_rsa")),
        Some("/root".into())
    );
    assert_eq!(s.hides(Path::new("/root/project/main.py")), None);
    assert_eq!(s.hides(Path::new("/usr/bin/python3")), None);
}

#[test]
fn the_environment_is_the_basics_and_what_is_given() {
    let env = crate::launch::sandbox_env(&[
        ("TOKEN".into(), "t".into()),
        ("PATH".into(), "/opt/bin".into()),
    ]);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("PATH"), Some("/opt/bin"));
    assert_eq!(get("HOME"), Some(SANDBOX_HOME));
    assert_eq!(get("TOKEN"), Some("t"));
    assert!(get("LANG").is_some());
    assert_eq!(
        get("npm_config_offline"),
        Some("true"),
        "no network: npm is told"
    );
    assert_eq!(env.len(), 6);
}

#[test]
fn which_finds_executables_on_the_given_path_only() {
    assert_eq!(
        which("sh", Some(OsStr::new("/bin"))),
        Some("/bin/sh".into())
    );
    assert_eq!(which("sh", Some(OsStr::new("/nonexistent"))), None);
    assert_eq!(which("sh", None), None);
}

/// Real bubblewrap: absent, the test is skipped unless `SWITCHBOARD_SANDBOX_TESTS` says it
/// must run.
fn real_host() -> Option<Host> {
    match Host::find(std::env::var_os("PATH").as_deref()) {
        Ok(h) => Some(h),
        Err(e) if std::env::var_os("SWITCHBOARD_SANDBOX_TESTS").is_some() => {
            panic!("SWITCHBOARD_SANDBOX_TESTS is set but {e}")
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[derive(Debug)]
struct Ignore;

impl InboundSink for Ignore {
    fn deliver(&self, _: &Bytes, _: &Message<'_>, _: &crate::Upstream) {}
}

/// A sandboxed process is reached through its pipes like any other: a shell that answers
/// one request with what it sees of its world (HOME, a gateway variable, the network).
#[tokio::test]
async fn a_sandboxed_backend_talks_through_its_pipes_and_sees_only_its_world() {
    let Some(host) = real_host() else { return };
    host.probe().expect("bubblewrap works here");
    let home = std::env::temp_dir().join(format!("sb-unit-home-{}", std::process::id()));
    let mut s = sandbox(&home);
    s.read.clear();
    s.write.clear();
    s.host = host;
    let script = r#"read line; printf '{"jsonrpc":"2.0","id":"k1","result":{"home":"%s","secret":"%s","net":"%s","w":"%s"}}\n' "$HOME" "$CARGO_MANIFEST_DIR" "$(cat /proc/net/dev | grep -c :)" "$(touch ~/ok && echo yes)"; cat >/dev/null"#;
    let mut config = StdioConfig::new("sh", vec!["-c".into(), script.into()]);
    config.sandbox = Some(Arc::new(s));
    let (handle, process) = spawn(&config, Arc::new(Ignore)).expect("spawned");
    let call = handle.call(
        "k1",
        br#"{"jsonrpc":"2.0","id":"k1","method":"x"}"#.to_vec(),
    );
    let answer = tokio::time::timeout(Duration::from_secs(20), call.await.expect("queued"))
        .await
        .expect("answered in time")
        .expect("answered");
    let v: serde_json::Value = serde_json::from_str(answer.payload()).expect("json");
    assert_eq!(v["home"], SANDBOX_HOME);
    assert_eq!(v["w"], "yes", "its home is writable");
    assert_eq!(v["net"], "1", "only loopback: {v}");
    // cargo gives the test process this variable; the sandbox gets none of its variables.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    assert_eq!(v["secret"], "", "{v}");
    assert!(home.join("ok").exists(), "the home is the host directory");
    process.shutdown(Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&home);
}

/// Every file under `dir` (links not followed) with its size and modification time.
fn tree(dir: &Path) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        out.push((entry.path(), meta.len(), meta.modified().ok()));
        if meta.is_dir() {
            out.extend(tree(&entry.path()));
        }
    }
    out.sort();
    out
}

/// Answers one request with what the script prints, as a JSON string.
async fn ask(handle: &crate::StdioHandle) -> Result<serde_json::Value, crate::UpstreamError> {
    let call = handle.call(
        "k1",
        br#"{"jsonrpc":"2.0","id":"k1","method":"x"}"#.to_vec(),
    );
    let answer = tokio::time::timeout(Duration::from_secs(20), call.await.expect("queued"))
        .await
        .expect("answered in time")?;
    Ok(serde_json::from_str(answer.payload()).expect("json"))
}

/// Two processes with private homes: each starts from a copy of the backend's home (a link
/// in it copied as a link, never followed) and writes only its own; nothing under the
/// backend's home or beside it changes on the host, while they run or after.
#[tokio::test]
async fn private_homes_are_copies_inside_the_sandbox_and_leave_the_host_alone() {
    let Some(host) = real_host() else { return };
    let base = std::env::temp_dir().join(format!("sb-unit-private-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("home/cache")).expect("home");
    std::fs::write(base.join("home/cache/warm"), "warm").expect("seed");
    std::fs::write(base.join("outside"), "not the backend's").expect("outside");
    std::os::unix::fs::symlink(base.join("outside"), base.join("home/link")).expect("link");
    let mut s = sandbox(&base.join("home"));
    s.read.clear();
    s.write.clear();
    s.host = host;
    let s = Arc::new(s);
    s.prepare().expect("the backend's home");
    let before = tree(&base);
    // What it sees before it writes its own name: with one home for both, the second
    // would see the first's.
    let script = r#"read line; seen="$(ls -A ~ | tr '\n' ' ')"; echo "$1" > ~/"$1"; printf '{"jsonrpc":"2.0","id":"k1","result":{"seen":"%s","link":"%s","warm":"%s","fs":"%s"}}\n' "$seen" "$(readlink ~/link)" "$(cat ~/cache/warm)" "$(stat -f -c %T ~)"; cat >/dev/null"#;
    let args = ["-c", script, "sh", "first"].map(String::from).to_vec();
    let mut config = StdioConfig::new("sh", args);
    config.sandbox = Some(s.clone());
    config.private_home = true;
    let mut started = Vec::new();
    for who in ["first", "second"] {
        config.args[3] = who.into();
        let (handle, process) = spawn(&config, Arc::new(Ignore)).expect("spawned");
        let v = ask(&handle).await.expect("answered");
        assert_eq!(
            v["seen"], "cache link ",
            "a copy of the backend's home: {v}"
        );
        assert_eq!(v["warm"], "warm", "{v}");
        assert_eq!(v["fs"], "tmpfs", "{v}");
        assert_eq!(v["link"], base.join("outside").display().to_string());
        started.push(process);
    }
    assert_eq!(tree(&base), before, "nothing of theirs on the host");
    for process in started {
        process.shutdown(Duration::from_secs(5)).await;
    }
    assert_eq!(tree(&base), before, "nothing left to remove");
    let _ = std::fs::remove_dir_all(&base);
}

/// A seed the sandbox's user cannot read in full: the process never starts its program,
/// and its stderr says why.
#[tokio::test]
async fn a_seed_that_cannot_be_copied_fails_the_start_and_says_so() {
    use std::os::unix::fs::PermissionsExt;
    let Some(host) = real_host() else { return };
    let base = std::env::temp_dir().join(format!("sb-unit-badseed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("home")).expect("home");
    let locked = base.join("home/locked");
    std::fs::write(&locked, "x").expect("locked");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("mode");
    let mut s = sandbox(&base.join("home"));
    s.read.clear();
    s.write.clear();
    s.host = host;
    let script = r#"read line; printf '{"jsonrpc":"2.0","id":"k1","result":{}}\n'; cat >/dev/null"#;
    let mut config = StdioConfig::new("sh", vec!["-c".into(), script.into()]);
    config.sandbox = Some(Arc::new(s));
    config.private_home = true;
    let (handle, process) = spawn(&config, Arc::new(Ignore)).expect("spawned");
    let ended = ask(&handle).await;
    assert!(ended.is_err(), "the program never ran: {ended:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !handle
        .stderr_tail()
        .iter()
        .any(|l| l.contains("copying the backend's home"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            handle.stderr_tail()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    process.shutdown(Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&base);
}

/// A listed path bound exactly over a mask stays as listed: the mask under it is not
/// sealed (`--remount-ro` would act on the bind, the topmost mount there). One below a mask
/// leaves the mask sealed (review of the sealing: `write: [/run]` was made read-only).
#[test]
fn a_path_listed_exactly_at_a_mask_is_not_sealed() {
    let mut s = sandbox(Path::new("/var/cache/sb/files"));
    s.write = vec![PathBuf::from("/run")];
    s.read = vec![PathBuf::from("/home/shared")];
    let text = argv(&s.launch("srv", &[], None, false, &[], None)).join(" ");
    if Path::new("/run").is_dir() {
        assert!(text.contains("--bind /run /run"), "{text}");
        assert!(!text.contains("--remount-ro /run "), "{text}");
    }
    if Path::new("/home").is_dir() {
        assert!(text.contains("--remount-ro /home "), "{text}");
    }
}
