//! The SQLite store's files as an attacker who could write or swap them
//! meets them: files or directories another user could write or swap
//! are refused. Rows changed outside cordon are the shared suite's
//! (`tests/store_suite`), run on SQLite and PostgreSQL.
#![cfg(feature = "sqlite")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use cordon_starlark::*;

/// The checks on the files, at the library's door (the CLI tests drive
/// the same as other uids).
#[test]
fn files_others_could_write_or_swap_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = StoreKey::generate().unwrap();
    let good = dir.path().join("good.db");
    drop(SqliteStore::open(&good, &key).unwrap());
    assert_eq!(
        std::fs::metadata(&good).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let refused = |p: &Path, needle: &str| {
        let e = SqliteStore::open(p, &key).unwrap_err();
        assert!(
            e.contains(needle) && e.contains("refusing the store database"),
            "{e}"
        );
    };
    // A symlink, even to a good store, and a dangling one (not followed,
    // its target not created).
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    refused(&link, "symlink");
    let dangling = dir.path().join("dangling.db");
    let target = dir.path().join("target.db");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    refused(&dangling, "symlink");
    assert!(!target.exists());
    // Writable by others.
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o660)).unwrap();
    refused(&good, "writable by group or others");
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
    // In a directory others can write (sticky or not).
    for mode in [0o777, 0o1777, 0o770] {
        let open = dir.path().join(format!("open{mode:o}"));
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
        refused(&open.join("star.db"), "writable by other users");
    }
    // A directory above that others can write, unless sticky (/tmp is).
    let above = dir.path().join("above");
    std::fs::create_dir_all(above.join("mine")).unwrap();
    std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused(&above.join("mine/star.db"), "not sticky");
    std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert!(SqliteStore::open(&above.join("mine/star.db"), &key).is_ok());
    // Not a regular file.
    let fifo = dir.path().join("fifo.db");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    refused(&fifo, "not a regular file");
    // Another user's file and directory (made with chown: as root, as the
    // tests run; the CLI tests run the same as uid 65534).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = dir.path().join("theirs.db");
        std::fs::write(&theirs, b"").unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        refused(&theirs, "owned by uid 65534");
        assert_eq!(std::fs::read(&theirs).unwrap(), b"", "nothing was written");
        let their_dir = dir.path().join("their-dir");
        std::fs::create_dir(&their_dir).unwrap();
        std::os::unix::fs::chown(&their_dir, Some(65534), Some(65534)).unwrap();
        refused(&their_dir.join("star.db"), "owned by uid 65534");
    }
}
