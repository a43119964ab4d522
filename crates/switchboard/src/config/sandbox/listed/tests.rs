use switchboard_upstream::sandbox::{Host, Limits};

use super::*;

fn sandbox(home: &str, read: &[&str], write: &[&str]) -> Sandbox {
    Sandbox {
        read: read.iter().map(PathBuf::from).collect(),
        write: write.iter().map(PathBuf::from).collect(),
        masked: Vec::new(),
        hidden: Vec::new(),
        home: home.into(),
        limits: Limits::default(),
        host: Host {
            bwrap: "/usr/bin/bwrap".into(),
            prlimit: "/usr/bin/prlimit".into(),
            sh: "/bin/sh".into(),
            cp: "/bin/cp".into(),
            run_as: None,
        },
        egress: None,
    }
}

fn keys(errors: &[ConfigError]) -> Vec<String> {
    errors.iter().map(|e| e.path.clone()).collect()
}

/// A listed path that is, or holds, one of the gateway's files is refused at its key; one
/// beside it is not.
#[test]
fn a_listed_path_may_not_be_or_hold_a_gateway_s_file() {
    let files = [
        PathBuf::from("/etc/sb/config.yaml"),
        PathBuf::from("/srv/keys/secrets.env"),
    ];
    let a = sandbox(
        "/var/cache/sb/a",
        &["/etc/sb/config.yaml", "/etc/sb/data", "/etc"],
        &["/srv/keys", "/srv/out"],
    );
    let listed = [Listed {
        name: "a",
        at: "backends[0].sandbox.filesystem".into(),
        sandbox: &a,
    }];
    let errors = check(&listed, &files);
    assert_eq!(
        keys(&errors),
        [
            "backends[0].sandbox.filesystem.read[0]",
            "backends[0].sandbox.filesystem.read[2]",
            "backends[0].sandbox.filesystem.write[0]",
        ]
    );
    assert!(
        errors[2].message.starts_with(
            "/srv/keys is or contains /srv/keys/secrets.env, a file of the gateway's own"
        ),
        "{errors:?}"
    );
}

/// `write` may not be, hold or lie in the backend's own home; `read` may (what a process
/// serving one caller sees at the seed anyway). Another backend's home may not be listed at
/// all; the error names that backend.
#[test]
fn homes_are_refused_where_they_would_show() {
    let a = sandbox(
        "/var/cache/sb/a",
        &["/var/cache/sb/a/cache", "/var/cache/sb/b/cache"],
        &[
            "/var/cache/sb/a",
            "/var/cache",
            "/var/cache/sb/a/x",
            "/srv/out",
        ],
    );
    let b = sandbox("/var/cache/sb/b", &[], &[]);
    let listed = [
        Listed {
            name: "a",
            at: "backends[0].sandbox.filesystem".into(),
            sandbox: &a,
        },
        Listed {
            name: "b",
            at: "sandbox.filesystem".into(),
            sandbox: &b,
        },
    ];
    let errors = check(&listed, &[]);
    assert_eq!(
        keys(&errors),
        [
            "backends[0].sandbox.filesystem.read[1]",
            "backends[0].sandbox.filesystem.write[0]",
            "backends[0].sandbox.filesystem.write[1]",
            "backends[0].sandbox.filesystem.write[1]",
            "backends[0].sandbox.filesystem.write[2]",
        ],
        "{errors:?}"
    );
    assert_eq!(
        errors[0].message,
        "/var/cache/sb/b/cache overlaps backend b's home (/var/cache/sb/b), which only that \
         backend may see"
    );
    assert!(errors[1].message.contains("this backend's own home"));
}
