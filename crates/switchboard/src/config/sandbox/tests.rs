use super::*;

fn settings(yaml: &str) -> SandboxKey {
    serde_yaml_ng::from_str(yaml).unwrap()
}

#[test]
fn sizes_take_binary_and_decimal_units() {
    assert_eq!(parse_size("512MiB"), Ok(512 << 20));
    assert_eq!(parse_size("512M"), Ok(512 << 20));
    assert_eq!(parse_size("2GiB"), Ok(2 << 30));
    assert_eq!(parse_size("1.5G"), Ok(3 << 29));
    assert_eq!(parse_size("800MB"), Ok(800_000_000));
    assert_eq!(parse_size("1048576"), Ok(1 << 20));
    for bad in ["", "MiB", "5 lots", "-1G", "1.2.3G"] {
        assert!(parse_size(bad).is_err(), "{bad}");
    }
}

#[test]
fn host_port_entries_are_checked() {
    for good in [
        "api.github.com:443",
        "localhost:8080",
        "10.0.0.1:80",
        "[::1]:443",
    ] {
        assert_eq!(host_port(good), Ok(()), "{good}");
    }
    for bad in [
        "api.github.com",
        "api.github.com:0",
        "api.github.com:99999",
        "bad_host:443",
        "-x.com:443",
        "[::zz]:443",
        ":443",
        "https://x.com:443",
        "*.x.com:443",
        "*:443",
        "::1:443",
    ] {
        assert!(host_port(bad).is_err(), "{bad}");
    }
}

/// Off unless configured; a backend's `off` wins over the top level; a backend's keys replace
/// the top level's one by one.
#[test]
fn a_backend_s_settings_go_over_the_top_level_s() {
    assert_eq!(effective(None, None), None);
    assert_eq!(effective(Some(&settings("off")), None), None);
    let top = settings("{memory: 1GiB, pids: 100, filesystem: {read: [/srv]}}");
    assert_eq!(effective(Some(&top), Some(&settings("off"))), None);
    let on = effective(Some(&top), None).unwrap();
    assert_eq!(on.pids, Some(100));
    let own = effective(Some(&top), Some(&settings("{pids: 10}"))).unwrap();
    assert_eq!(own.pids, Some(10));
    assert_eq!(own.memory, Some(Size::Text("1GiB".into())));
    assert_eq!(own.filesystem.unwrap().read, vec![PathBuf::from("/srv")]);
    let alone = effective(None, Some(&settings("on"))).unwrap();
    assert_eq!(alone, SandboxSettings::default());
    assert!(effective(Some(&settings("true")), None).is_some());
}

#[test]
fn limits_default_and_refuse_nonsense() {
    let mut errors = Vec::new();
    let l = limits(&SandboxSettings::default(), "sandbox", &mut errors);
    assert!(errors.is_empty());
    assert_eq!(l.memory, Some(DEFAULT_MEMORY));
    assert_eq!(l.pids, Some(DEFAULT_PIDS));
    assert_eq!(l.open_files, Some(DEFAULT_OPEN_FILES));
    let tiny = SandboxSettings {
        memory: Some(Size::Text("1MiB".into())),
        ..Default::default()
    };
    limits(&tiny, "sandbox", &mut errors);
    assert_eq!(
        errors[0].to_string(),
        "sandbox.memory: must be at least 16MiB"
    );
}

/// An allow list is checked entry by entry; a valid one gives the backend its egress (the
/// entries normalized, this executable as the bridge), an empty one none (no network).
#[test]
fn a_network_allow_list_gives_the_backend_its_egress() {
    let with = |allow: &[&str]| SandboxSettings {
        network: Some(Network {
            allow: allow.iter().map(ToString::to_string).collect(),
        }),
        ..Default::default()
    };
    let mut errors = Vec::new();
    assert!(network(&with(&[]), "sandbox", "b", &mut errors).is_none());
    assert!(errors.is_empty());
    let egress = network(
        &with(&["API.github.com.:443", "[::1]:80"]),
        "sandbox",
        "b",
        &mut errors,
    )
    .unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let entries: Vec<String> = egress
        .allow()
        .entries()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(entries, ["api.github.com:443", "[::1]:80"]);
    assert_eq!(
        egress.bridge().to_path_buf(),
        std::env::current_exe().unwrap()
    );
    let bad = network(
        &with(&["ok.com:443", "nope", "*.x.com:443"]),
        "b.sandbox",
        "b",
        &mut errors,
    );
    assert!(bad.is_none());
    let keys: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        keys,
        ["b.sandbox.network.allow[1]", "b.sandbox.network.allow[2]"],
        "{errors:?}"
    );
}

/// A directory others may not search on the way to a path is named (a root gateway's
/// backends, as nobody, could not reach the path through it).
#[test]
fn a_closed_directory_on_the_way_is_named() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("sb-reach-{}", std::process::id()));
    let inner = dir.join("a/b");
    std::fs::create_dir_all(&inner).unwrap();
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    mode(&dir, 0o755).unwrap();
    mode(&dir.join("a"), 0o700).unwrap();
    assert_eq!(unreachable(&inner.join("home")), Some(dir.join("a")));
    mode(&dir.join("a"), 0o711).unwrap();
    assert_eq!(unreachable(&inner.join("home")), None);
    let errors = out_of_reach(65534, "sandbox", &inner, [dir.join("a")].iter());
    assert!(errors.is_empty(), "{errors:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Listed paths are resolved at load, `..` and links included: what is hidden (resolved) is
/// compared with what is bound.
#[test]
fn listed_paths_are_resolved() {
    let dir = std::env::temp_dir().join(format!("sb-listed-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a/b")).unwrap();
    std::fs::create_dir_all(dir.join("real")).unwrap();
    let _ = std::os::unix::fs::symlink(dir.join("real"), dir.join("link"));
    let real = std::fs::canonicalize(&dir).unwrap();
    let mut errors = Vec::new();
    let listed = [
        PathBuf::from("a/b/../../real"),
        PathBuf::from("link"),
        PathBuf::from("a/../nothing"),
    ];
    let out = paths(&listed, &dir, "sandbox.filesystem.read", &mut errors);
    assert_eq!(out, vec![real.join("real"), real.join("real")]);
    assert_eq!(keys(&errors), ["sandbox.filesystem.read[2]"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn keys(errors: &[ConfigError]) -> Vec<String> {
    errors.iter().map(|e| e.path.clone()).collect()
}

/// A path not created yet (a home) is resolved too: its existing part through links, its
/// `..` wherever they are.
#[test]
fn a_path_not_created_yet_is_resolved() {
    let dir = std::env::temp_dir().join(format!("sb-canonical-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("real")).unwrap();
    let _ = std::os::unix::fs::symlink(dir.join("real"), dir.join("link"));
    let real = std::fs::canonicalize(&dir).unwrap();
    assert_eq!(
        canonical(&dir.join("not-yet/../homes/b")),
        real.join("homes/b")
    );
    assert_eq!(canonical(&dir.join("link/../x")), real.join("x"));
    assert_eq!(canonical(&dir.join("link/new/..")), real.join("real"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sandboxed backend's `env` may not set the dynamic loader's variables: its launchers run
/// on the host with that environment (a root gateway's `setpriv` as root), and would load what
/// the backend can write. Each is named; others pass. Before, they were applied as given
/// (review LOW).
#[test]
fn loader_variables_are_refused_in_a_sandboxed_env() {
    let env: Vec<(String, String)> = [
        ("LD_PRELOAD", "/srv/out/x.so"),
        ("PATH", "/usr/bin"),
        ("GLIBC_TUNABLES", "glibc.malloc.check=1"),
        ("LD_LIBRARY_PATH", "/srv/out"),
        ("NODE_OPTIONS", "--max-old-space-size=512"),
        ("GLIBC_TUNABLES=glibc.malloc.check", "1"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .into();
    let b = Backend {
        at: "backends[0]",
        switched_at: "backends[0].sandbox".into(),
        name: "b",
        program: "node",
        env: &env,
        cwd: None,
    };
    let keys: Vec<String> = loader_env(&b).into_iter().map(|e| e.path).collect();
    assert_eq!(
        keys,
        [
            "backends[0].env.LD_PRELOAD",
            "backends[0].env.GLIBC_TUNABLES",
            "backends[0].env.LD_LIBRARY_PATH",
            "backends[0].env.GLIBC_TUNABLES=glibc.malloc.check"
        ]
    );
}
