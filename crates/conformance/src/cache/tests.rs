//! The cache's checks on real files and dirs: what is trusted, what is
//! refused, and that a write never follows a planted name.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn dir_fd(p: &Path) -> OwnedFd {
    std::fs::File::open(p).unwrap().into()
}

/// A private dir under a fresh temp dir (the temp dir itself is 0700).
fn private() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("cordon");
    (t, d)
}

#[test]
fn a_private_dir_is_created_and_accepted() {
    use std::os::unix::fs::MetadataExt;
    let (_t, d) = private();
    open_private_dir(&d).unwrap();
    let m = std::fs::metadata(&d).unwrap();
    assert_eq!(m.mode() & 0o777, 0o700);
    assert_eq!(m.uid(), euid());
    // Missing parents are created too, each checked.
    let deep = d.join("a").join("b");
    open_private_dir(&deep).unwrap();
    assert!(deep.is_dir());
}

#[test]
fn a_cache_dir_others_can_write_is_refused_sticky_or_not() {
    let (_t, d) = private();
    std::fs::create_dir(&d).unwrap();
    for mode in [0o777, 0o1777, 0o720, 0o702] {
        chmod(&d, mode);
        let e = open_private_dir(&d).unwrap_err();
        assert!(e.why.contains("writable by other users"), "{mode:o}: {e}");
    }
    chmod(&d, 0o755);
    open_private_dir(&d).unwrap();
}

#[test]
fn an_ancestor_others_can_write_is_refused_unless_sticky() {
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let d = shared.join("me").join("cordon");
    chmod(&shared, 0o777);
    let e = open_private_dir(&d).unwrap_err();
    assert!(e.why.contains("no sticky bit"), "{e}");
    assert!(e.to_string().contains("shared"), "{e}");
    // Nothing was created below the refused ancestor.
    assert!(!shared.join("me").exists());
    chmod(&shared, 0o1777);
    open_private_dir(&d).unwrap();
    chmod(&shared, 0o775);
    assert!(open_private_dir(&d).is_err());
}

#[test]
fn a_symlinked_cache_dir_is_resolved_and_checked_at_its_target() {
    let t = tempfile::tempdir().unwrap();
    let real = t.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, t.path().join("link")).unwrap();
    open_private_dir(&t.path().join("link").join("cordon")).unwrap();
    assert!(real.join("cordon").is_dir());
    chmod(&real, 0o777);
    assert!(open_private_dir(&t.path().join("link").join("cordon")).is_err());
}

#[test]
fn a_relative_dir_is_refused() {
    assert!(open_private_dir(Path::new("cache/cordon")).is_err());
}

#[test]
fn create_new_never_follows_or_reuses_a_planted_name() {
    let (_t, d) = private();
    std::fs::create_dir(&d).unwrap();
    let victim = d.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, d.join(".tmp-planted")).unwrap();
    std::fs::write(d.join(".tmp-existing"), b"old").unwrap();
    let fd = dir_fd(&d);
    let planted = CString::new(".tmp-planted").unwrap();
    let existing = CString::new(".tmp-existing").unwrap();
    let e = create_new(fd.as_fd(), &planted).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    let e = create_new(fd.as_fd(), &existing).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(std::fs::read(d.join(".tmp-existing")).unwrap(), b"old");
    // Fresh names differ each time.
    assert_ne!(temp_name().unwrap(), temp_name().unwrap());
}

#[test]
fn only_a_private_regular_file_is_opened() {
    let (_t, d) = private();
    std::fs::create_dir(&d).unwrap();
    let fd = dir_fd(&d);
    let name = CString::new("conformance-x.json").unwrap();
    let file = d.join("conformance-x.json");
    // Control: a 0600 file of ours is opened.
    std::fs::write(&file, b"{}").unwrap();
    chmod(&file, 0o600);
    assert!(open_private(fd.as_fd(), &name).is_some());
    // Group- or other-readable: refused.
    chmod(&file, 0o640);
    assert!(open_private(fd.as_fd(), &name).is_none());
    // Larger than the limit: refused.
    std::fs::write(&file, vec![b' '; MAX_CACHE_BYTES as usize + 1]).unwrap();
    chmod(&file, 0o600);
    assert!(open_private(fd.as_fd(), &name).is_none());
    // A symlink to a private file: not followed.
    std::fs::remove_file(&file).unwrap();
    let elsewhere = d.join("elsewhere");
    std::fs::write(&elsewhere, b"{}").unwrap();
    chmod(&elsewhere, 0o600);
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    assert!(open_private(fd.as_fd(), &name).is_none());
    // A FIFO: neither waited on nor opened for reading.
    std::fs::remove_file(&file).unwrap();
    let c = CString::new(file.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(open_private(fd.as_fd(), &name).is_none());
}

#[test]
fn file_names_are_plain() {
    assert_eq!(
        file_name("linux").unwrap().to_str().unwrap(),
        "conformance-linux.json"
    );
    assert!(file_name("../x").is_none());
    assert!(file_name("").is_none());
}
