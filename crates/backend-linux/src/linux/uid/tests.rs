//! Unit tests of `uid.rs`.
use super::*;

#[test]
fn ranges_parse_and_refuse_what_would_share_an_id() {
    let p = UidPool::parse("2000000000-2000000009").unwrap();
    assert_eq!((p.first(), p.last()), (2_000_000_000, 2_000_000_009));
    assert!(UidPool::parse("100-200")
        .unwrap_err()
        .contains("below 65536"));
    assert!(UidPool::parse("70000-4294967295")
        .unwrap_err()
        .contains("(uid_t)-1"));
    assert!(UidPool::parse("9-1").unwrap_err().contains("ends before"));
    assert!(UidPool::parse("x").unwrap_err().contains("not a uid range"));
    assert!(UidPool::new(4_000_000_000, 400_000_000).is_err());
}

#[test]
fn accounts_and_subordinate_ranges_in_the_range_are_refused() {
    let etc = tempfile::tempdir().unwrap();
    let pool = UidPool::parse("100000-165535").unwrap();
    std::fs::write(etc.path().join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    assert_eq!(pool.check_files(etc.path()), Ok(()));
    std::fs::write(etc.path().join("subuid"), "alice:100000:65536\n").unwrap();
    let e = pool.check_files(etc.path()).unwrap_err();
    assert!(e.contains("alice") && e.contains("subuid"), "{e}");
    std::fs::remove_file(etc.path().join("subuid")).unwrap();
    std::fs::write(etc.path().join("group"), "svc:x:120000:\n").unwrap();
    let e = pool.check_files(etc.path()).unwrap_err();
    assert!(e.contains("group `svc`"), "{e}");
}

#[test]
fn a_uid_with_a_process_is_busy() {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    assert!(process_of_uid_exists(me));
    assert!(!process_of_uid_exists(4_000_000_123));
}
