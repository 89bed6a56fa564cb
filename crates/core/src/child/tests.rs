//! Unit tests of `child.rs`.

use super::StderrRing;

fn contents(ring: &super::SharedRing) -> (Vec<u8>, u64) {
    let r = ring.lock().unwrap();
    (r.buf.iter().copied().collect(), r.dropped)
}

#[test]
fn the_ring_keeps_the_newest_bytes_and_counts_the_rest() {
    let ring = StderrRing::shared(4);
    StderrRing::push(&ring, b"ab");
    assert_eq!(contents(&ring), (b"ab".to_vec(), 0));
    StderrRing::push(&ring, b"cde");
    assert_eq!(contents(&ring), (b"bcde".to_vec(), 1));
    // A chunk longer than the ring: only its tail stays.
    StderrRing::push(&ring, b"0123456");
    assert_eq!(contents(&ring), (b"3456".to_vec(), 1 + 4 + 3));
    let empty = StderrRing::shared(0);
    StderrRing::push(&empty, b"xyz");
    assert_eq!(contents(&empty), (Vec::new(), 3));
}

/// A fresh scratch someone else has locked (a sweeper in another PID
/// namespace, to whom its creator's pid is dead, about to remove it) fails
/// the spawn instead of being used unlocked.
#[test]
fn a_fresh_scratch_locked_by_someone_else_is_refused() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    // As the spawner makes one: 0700.
    let fresh = || {
        tempfile::Builder::new()
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .unwrap()
    };
    let dir = fresh();
    let canonical = dir.path().canonicalize().unwrap();
    let other = std::fs::File::open(&canonical).unwrap();
    // SAFETY: flock on a file we opened.
    assert_eq!(unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX) }, 0);
    let refused = super::ScratchGuard::owned(dir, canonical.clone(), false);
    assert!(
        refused.is_err(),
        "a scratch locked by someone else was used"
    );
    drop(other);
    let dir = fresh();
    let canonical = dir.path().canonicalize().unwrap();
    assert!(super::ScratchGuard::owned(dir, canonical, false).is_ok());
    // A dir at the name that is not 0700 (made again by someone else):
    // refused.
    let dir = fresh();
    let canonical = dir.path().canonicalize().unwrap();
    std::fs::set_permissions(&canonical, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(super::ScratchGuard::owned(dir, canonical, false).is_err());
}
