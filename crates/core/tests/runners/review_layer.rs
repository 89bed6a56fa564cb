//! `hostfs::review`: a layer shaped by a hostile program is applied only
//! where it is legitimate, a host file changed during the run is a
//! conflict, and discarding leaves the directory byte-identical. The
//! layers are crafted here as a program (or a tampered store) could leave
//! them, including what a sandbox's filter stops it from making itself
//! (a setuid file, a device): the apply must not trust the sandbox's
//! filters.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_core::hostfs::review::{self, ChangeKind, ReviewStore};

/// Every entry under `dir`: its type, mode and contents (or link target).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let body = if m.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_file() {
                std::fs::read(&p).unwrap()
            } else {
                stack.push(p.clone());
                Vec::new()
            };
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), (m.mode(), body));
        }
    }
    out
}

fn mknod(path: &Path, mode: u32, dev: u64) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    let r = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    assert_eq!(r, 0, "mknod {path:?}");
}

/// The host's directory, and a layer over it as a hostile program leaves it.
fn hostile_layer(
    root: &Path,
) -> (
    PathBuf,
    ReviewStore,
    cordon_core::hostfs::review::ReviewLayer,
) {
    let host = root.join("project");
    std::fs::create_dir_all(host.join("gone/deep")).unwrap();
    std::fs::write(host.join("gone/deep/f"), "x").unwrap();
    std::fs::write(host.join("keep.txt"), "keep").unwrap();
    std::fs::write(host.join("mod.txt"), "old").unwrap();
    std::fs::write(host.join("raced.txt"), "host before").unwrap();
    std::fs::create_dir(host.join("sub")).unwrap();
    std::fs::write(host.join("sub/inner"), "inner").unwrap();
    // Older than the run (the start has a 50 ms margin for the clock).
    std::thread::sleep(Duration::from_millis(150));
    let store = ReviewStore::open(&root.join("store"), false).unwrap();
    let layer = store.create(&host.canonicalize().unwrap()).unwrap();
    let up = layer.upper();
    std::fs::write(up.join("added.txt"), "new").unwrap();
    std::fs::write(up.join("mod.txt"), "new content").unwrap();
    std::fs::write(up.join("raced.txt"), "layer").unwrap();
    mknod(&up.join("gone"), libc::S_IFCHR | 0o600, 0); // whiteout over a dir
    std::os::unix::fs::symlink("/etc/shadow", up.join("evil")).unwrap();
    std::os::unix::fs::symlink("../../etc/passwd", up.join("dotdot")).unwrap();
    std::os::unix::fs::symlink("sub/inner", up.join("rel")).unwrap();
    std::fs::write(up.join("hard1"), "h").unwrap();
    std::fs::hard_link(up.join("hard1"), up.join("hard2")).unwrap();
    std::fs::write(up.join("suid"), "s").unwrap();
    std::fs::set_permissions(up.join("suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    mknod(&up.join("mem"), libc::S_IFCHR | 0o666, libc::makedev(1, 1));
    mknod(&up.join("fifo"), libc::S_IFIFO | 0o600, 0);
    std::fs::create_dir(up.join("newdir")).unwrap();
    std::fs::write(up.join("newdir/f"), "nf").unwrap();
    // The host changes a file while the program runs.
    std::fs::write(host.join("raced.txt"), "host during").unwrap();
    (host, store, layer)
}

fn kind_of(changes: &[review::Change], path: &str) -> ChangeKind {
    changes
        .iter()
        .find(|c| c.path == Path::new(path))
        .unwrap_or_else(|| panic!("{path} not listed: {changes:#?}"))
        .kind
        .clone()
}

#[test]
fn a_hostile_layer_is_listed_refused_and_discarded_without_a_trace() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test crafts device files and whiteouts: run it as root");
    }
    let tmp = tempfile::tempdir().unwrap();
    let (host, _store, layer) = hostile_layer(tmp.path());
    let after_race = snapshot(&host);
    let changes = review::changes(&layer).unwrap();
    assert_eq!(
        kind_of(&changes, "added.txt"),
        ChangeKind::Added { bytes: 3 }
    );
    assert_eq!(
        kind_of(&changes, "mod.txt"),
        ChangeKind::Modified { bytes: 11 }
    );
    assert_eq!(kind_of(&changes, "raced.txt"), ChangeKind::Conflict);
    assert_eq!(kind_of(&changes, "gone"), ChangeKind::Deleted);
    assert_eq!(kind_of(&changes, "rel"), ChangeKind::Added { bytes: 9 });
    for refused in ["evil", "dotdot", "hard1", "hard2", "suid", "mem", "fifo"] {
        assert!(
            matches!(kind_of(&changes, refused), ChangeKind::Refused { .. }),
            "{refused}: {changes:#?}"
        );
    }
    // Listing changed nothing; discarding changes nothing either.
    assert_eq!(snapshot(&host), after_race);
    review::discard(&layer).unwrap();
    assert_eq!(snapshot(&host), after_race);
    assert!(!layer.path.exists());
}

#[test]
fn applying_a_hostile_layer_applies_only_the_legitimate_changes() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test crafts device files and whiteouts: run it as root");
    }
    let tmp = tempfile::tempdir().unwrap();
    let (host, _store, layer) = hostile_layer(tmp.path());
    let done = review::apply(&layer).unwrap();
    let read = |p: &str| std::fs::read_to_string(host.join(p)).unwrap();
    assert_eq!(read("added.txt"), "new");
    assert_eq!(read("mod.txt"), "new content");
    assert_eq!(
        read("raced.txt"),
        "host during",
        "a conflict was overwritten"
    );
    assert_eq!(read("keep.txt"), "keep");
    assert_eq!(read("newdir/f"), "nf");
    assert!(!host.join("gone").exists(), "the whiteout's deletion");
    assert_eq!(
        std::fs::read_link(host.join("rel")).unwrap(),
        Path::new("sub/inner")
    );
    for refused in ["evil", "dotdot", "hard1", "hard2", "suid", "mem", "fifo"] {
        assert!(
            std::fs::symlink_metadata(host.join(refused)).is_err(),
            "{refused} was applied: {done:#?}"
        );
        assert!(matches!(
            kind_of(&done, refused),
            ChangeKind::Refused { .. }
        ));
    }
    // No temp file left behind, and nothing setuid anywhere.
    for (p, (mode, _)) in snapshot(&host) {
        assert!(!p.to_string_lossy().contains(".cordon-review"), "{p:?}");
        assert_eq!(mode & 0o6000, 0, "{p:?}");
    }
}
