//! Unit tests of `landlock_rules.rs`.
use super::*;

/// A grant through another user's symlink is refused (that user could
/// point it at anything the caller may reach); through one of the
/// caller's own, it resolves.
#[test]
fn a_grant_through_another_users_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (p, is_dir) = canonical_grant("read-write grant", &link.join(".")).unwrap();
    assert_eq!((p, is_dir), (target.canonicalize().unwrap(), true));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::lchown(&link, Some(1234), Some(1234)).unwrap();
        for path in [
            link.clone(),
            link.join("."),
            dir.path().join("link/../target"),
        ] {
            let e = canonical_grant("read-write grant", &path).unwrap_err();
            assert!(
                e.contains("neither yours nor root's"),
                "{}: {e}",
                path.display()
            );
        }
    }
}

#[test]
fn file_rules_only_get_file_rights() {
    for grant in [
        Grant::Scratch,
        Grant::ReadExec,
        Grant::ReadOnly,
        Grant::ReadWrite,
        Grant::RwDevice,
        Grant::ReadFileOnly,
    ] {
        let r = rights(ABI::V7, grant, false);
        assert!(AccessFs::from_file(ABI::V7).contains(r), "{grant:?}");
    }
}

#[test]
fn grants_match_the_policy() {
    let ro = rights(ABI::V7, Grant::ReadOnly, true);
    assert!(ro.contains(AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute));
    assert!(!ro.intersects(AccessFs::from_write(ABI::V7)));
    assert_eq!(
        rights(ABI::V7, Grant::ReadOnly, false),
        BitFlags::from(AccessFs::ReadFile)
    );
    let rw = rights(ABI::V7, Grant::ReadWrite, true);
    assert!(rw.contains(AccessFs::WriteFile | AccessFs::MakeReg | AccessFs::Truncate));
    assert!(!rw.contains(AccessFs::Execute));
    assert!(!rw.contains(AccessFs::MakeChar));
    let scratch = rights(ABI::V7, Grant::Scratch, true);
    assert!(scratch.contains(AccessFs::Execute | AccessFs::Refer | AccessFs::RemoveDir));
    assert!(!scratch.intersects(AccessFs::MakeChar | AccessFs::MakeBlock));
    // ABI 1 has no Truncate/Refer: never request what it lacks.
    assert!(AccessFs::from_all(ABI::V1).contains(rights(ABI::V1, Grant::RwDevice, false)));
}

#[test]
fn dangling_and_missing_grants_are_named() {
    let dir = tempfile_dir();
    let link = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("nowhere"), &link).unwrap();
    let e = canonical_grant("read-only", &link).unwrap_err();
    assert!(
        e.contains("dangling") && e.contains(link.to_str().unwrap()),
        "{e}"
    );
    let missing = dir.join("missing");
    let e = canonical_grant("read-write", &missing).unwrap_err();
    assert!(e.contains("does not exist") && e.contains("missing"), "{e}");
    let e = canonical_grant("read-only", Path::new("relative/x")).unwrap_err();
    assert!(e.contains("not absolute"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn read_only_inside_writable_is_refused() {
    let rule = |p: &str, grant| PathRule {
        path: PathBuf::from(p),
        is_dir: true,
        grant,
        optional: false,
    };
    let ok = [
        rule("/s", Grant::Scratch),
        rule("/data", Grant::ReadOnly),
        rule("/data/out", Grant::ReadWrite),
    ];
    assert!(check_no_read_only_under_writable(&ok).is_ok());
    let bad = [
        rule("/rw", Grant::ReadWrite),
        rule("/rw/ro", Grant::ReadOnly),
    ];
    let e = check_no_read_only_under_writable(&bad).unwrap_err();
    assert!(
        e.contains("/rw/ro") && e.contains("read-write grant"),
        "{e}"
    );
    let bad = [rule("/s", Grant::Scratch), rule("/s/ro", Grant::ReadOnly)];
    assert!(check_no_read_only_under_writable(&bad)
        .unwrap_err()
        .contains("scratch dir"));
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("cordon-ll-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// What no sandbox may read by default: no system rule names one of
/// these, lies inside one, or grants a directory holding one.
#[test]
fn the_default_view_holds_no_secret() {
    const SECRETS: &[&str] = &[
        "/etc/shadow",
        "/etc/shadow-",
        "/etc/gshadow",
        "/etc/gshadow-",
        "/etc/ssl/private",
        "/etc/sudoers",
        "/etc/sudoers.d",
        "/etc/ssh",
        "/etc/krb5.keytab",
        "/etc/security/opasswd",
    ];
    let rules = system_rules();
    assert!(
        rules.iter().any(|r| r.path == Path::new("/etc/passwd")),
        "the control: /etc files are listed"
    );
    for r in &rules {
        let whole_dir = !matches!(r.grant, Grant::ReadFileOnly | Grant::RwDevice);
        for s in SECRETS.iter().map(Path::new) {
            let reaches = r.path.starts_with(s) || (whole_dir && s.starts_with(&r.path));
            assert!(!reaches, "{} reaches {}", r.path.display(), s.display());
        }
        // Nothing under /etc is granted whole but the listed dirs.
        if r.path.starts_with("/etc") && whole_dir {
            let name = r.path.to_string_lossy();
            let listed = SYSTEM_READ_DIRS.iter().any(|d| name == *d)
                || SYSTEM_READ_DIR_PREFIXES
                    .iter()
                    .any(|p| name.starts_with(&format!("/etc/{p}")));
            assert!(listed, "{name} granted whole");
        }
    }
}
