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

/// A tmpfs of the test's own at `at`, unmounted when the test's temp dir
/// goes (lazily, so a failed test leaves nothing mounted in use).
fn mount_tmpfs(at: &Path) {
    let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated strings.
    let r = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
}

/// Unmounts on drop: a failed assertion leaves nothing mounted.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        unmount(&self.0);
    }
}

fn unmount(at: &Path) {
    let c = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
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
    std::fs::create_dir_all(host.join("gone2/deep")).unwrap();
    std::fs::write(host.join("gone2/deep/f"), "host before").unwrap();
    std::fs::create_dir(host.join("d")).unwrap();
    std::fs::write(host.join("d/back.txt"), "host").unwrap();
    // A mount point inside the directory (the program saw the empty dir
    // beneath it).
    std::fs::create_dir(host.join("mnt")).unwrap();
    mount_tmpfs(&host.join("mnt"));
    std::fs::write(host.join("mnt/precious"), "on another mount").unwrap();
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
    // A link that names only names, then climbs through one of them.
    std::fs::create_dir(up.join("sub")).unwrap();
    std::os::unix::fs::symlink("..", up.join("sub/q")).unwrap();
    std::os::unix::fs::symlink("sub/q/sub/q/../../../../etc/hostname", up.join("climb")).unwrap();
    // A name that would forge a line of the listing.
    std::fs::write(up.join("x\nA forged.txt (1 bytes)\x1b[2K"), "n").unwrap();
    // Over the mount point: a file into it, and a whiteout of it.
    std::fs::create_dir(up.join("mnt")).unwrap();
    std::fs::write(up.join("mnt/planted"), "p").unwrap();
    mknod(&up.join("gone2"), libc::S_IFCHR | 0o600, 0);
    std::fs::create_dir(up.join("d")).unwrap();
    std::fs::write(up.join("d/back.txt"), "layer").unwrap();
    // The host changes things while the program runs: a file, a file deep
    // in a tree the program deleted, a file it deleted that the layer
    // writes again.
    std::fs::write(host.join("raced.txt"), "host during").unwrap();
    std::fs::write(host.join("gone2/deep/f"), "host during").unwrap();
    std::fs::remove_file(host.join("d/back.txt")).unwrap();
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
    let _mounted = Unmount(host.join("mnt"));
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
    for refused in [
        "evil", "dotdot", "hard1", "hard2", "suid", "mem", "fifo", "climb", "mnt",
    ] {
        assert!(
            matches!(kind_of(&changes, refused), ChangeKind::Refused { .. }),
            "{refused}: {changes:#?}"
        );
    }
    assert_eq!(kind_of(&changes, "gone2"), ChangeKind::Conflict);
    assert_eq!(kind_of(&changes, "d/back.txt"), ChangeKind::Conflict);
    for c in &changes {
        let line = c.to_string();
        assert!(
            !line.contains('\n') && !line.contains('\x1b'),
            "unescaped: {line:?}"
        );
    }
    // Listing changed nothing; discarding changes nothing either.
    assert_eq!(snapshot(&host), after_race);
    // A layer held by its run is not another's to take.
    let held = layer.lock().unwrap();
    assert!(layer.lock().is_err(), "a held layer was taken twice");
    drop(held);
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
    let _mounted = Unmount(host.join("mnt"));
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
    for refused in [
        "evil", "dotdot", "hard1", "hard2", "suid", "mem", "fifo", "climb",
    ] {
        assert!(
            std::fs::symlink_metadata(host.join(refused)).is_err(),
            "{refused} was applied: {done:#?}"
        );
        assert!(matches!(
            kind_of(&done, refused),
            ChangeKind::Refused { .. }
        ));
    }
    // The mount point, the host's edits and its deletion are untouched.
    let on_mount = std::fs::read_to_string(host.join("mnt/precious"));
    let planted = host.join("mnt/planted").exists();
    unmount(&host.join("mnt"));
    assert_eq!(on_mount.unwrap(), "on another mount");
    assert!(!planted, "a file was written across a mount point");
    assert_eq!(read("gone2/deep/f"), "host during");
    assert!(
        !host.join("d/back.txt").exists(),
        "a file the host deleted came back"
    );
    // No temp file left behind, and nothing setuid anywhere.
    for (p, (mode, _)) in snapshot(&host) {
        assert!(!p.to_string_lossy().contains(".cordon-review"), "{p:?}");
        assert_eq!(mode & 0o6000, 0, "{p:?}");
    }
}
