//! Tests of `hostfs`: each rule tried by what a hostile sandbox or user
//! would plant, and checked on the host.

use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A directory chain `depth` deep at `base/top`, built the way a sandbox
/// builds one (each step renames the chain into a new top, so no path is
/// ever long).
fn deep_chain(base: &Path, depth: usize) -> PathBuf {
    let top = base.join("top");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("leaf"), b"x").unwrap();
    let new = base.join("new");
    for _ in 1..depth {
        std::fs::create_dir(&new).unwrap();
        std::fs::rename(&top, new.join("d")).unwrap();
        std::fs::rename(&new, &top).unwrap();
    }
    top
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[test]
fn a_chain_deeper_than_any_stack_or_fd_limit_is_removed() {
    let base = tempfile::tempdir().unwrap();
    let top = deep_chain(base.path(), 20_000);
    // A 64 KiB stack: a recursive removal overflows it long before 20 000
    // levels (std's remove_dir_all also holds an fd per level).
    let path = top.clone();
    std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(move || remove_tree(&path))
        .unwrap()
        .join()
        .expect("the removal overflowed its stack")
        .unwrap();
    assert!(!top.exists(), "the chain is still there");
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
}

#[test]
fn removal_holds_at_most_its_bound_of_dirs_open() {
    // A chain 200 deep, removed while a thread watches this process's fd
    // count: never more than HELD_DIRS (+ the walk's own few) above the
    // count before.
    let base = tempfile::tempdir().unwrap();
    let top = deep_chain(base.path(), 200);
    let before = open_fds();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (s, p) = (stop.clone(), peak.clone());
    let watcher = std::thread::spawn(move || {
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            p.fetch_max(open_fds(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    remove_tree(&top).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.join().unwrap();
    assert!(!top.exists());
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    // Other tests' fds come and go beside this one: a generous margin that
    // still fails for an fd per level (200).
    assert!(
        peak < before + HELD_DIRS + 40,
        "peak {peak} open fds, {before} before"
    );
}

#[test]
fn a_link_in_the_tree_is_removed_not_followed() {
    let base = tempfile::tempdir().unwrap();
    let outside = base.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), b"k").unwrap();
    let tree = base.path().join("tree");
    std::fs::create_dir_all(tree.join("a/b")).unwrap();
    std::os::unix::fs::symlink(&outside, tree.join("a/b/link")).unwrap();
    std::os::unix::fs::symlink(&outside, tree.join("toplink")).unwrap();
    remove_tree(&tree).unwrap();
    assert!(!tree.exists());
    assert!(outside.join("keep").exists(), "a link's target was removed");
    // The removal's own last component a link: the link goes, not its
    // target.
    let link = base.path().join("l");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    remove_tree(&link).unwrap();
    assert!(outside.join("keep").exists());
}

#[test]
fn a_link_in_the_path_fails_the_removal() {
    let base = tempfile::tempdir().unwrap();
    let real = base.path().join("real");
    std::fs::create_dir_all(real.join("victim")).unwrap();
    std::os::unix::fs::symlink(&real, base.path().join("via")).unwrap();
    let e = remove_tree(&base.path().join("via/victim")).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(real.join("victim").exists());
}

#[test]
fn a_budget_bounds_the_work() {
    let base = tempfile::tempdir().unwrap();
    let tree = base.path().join("t");
    std::fs::create_dir(&tree).unwrap();
    for i in 0..50 {
        std::fs::write(tree.join(i.to_string()), b"").unwrap();
    }
    let dir = open_dir(base.path()).unwrap();
    let mut budget = Budget { entries: 10 };
    let e = remove_tree_at(dir.as_fd(), OsStr::new("t"), &mut budget).unwrap_err();
    assert!(e.to_string().contains("gave up"), "{e}");
    let mut budget = Budget { entries: 100 };
    remove_tree_at(dir.as_fd(), OsStr::new("t"), &mut budget).unwrap();
    assert!(!tree.exists());
}

#[test]
fn a_tree_with_locked_dirs_is_removed() {
    // As root no permission bit stands in the way (and no mode is
    // changed); as its owner, each dir gets rwx back on its own fd.
    let base = tempfile::tempdir().unwrap();
    let tree = base.path().join("t");
    std::fs::create_dir_all(tree.join("a/b/c")).unwrap();
    std::fs::write(tree.join("a/b/c/f"), b"").unwrap();
    for (d, mode) in [("a/b/c", 0o500), ("a/b", 0o000), ("a", 0o300)] {
        std::fs::set_permissions(tree.join(d), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    remove_tree(&tree).unwrap();
    assert!(!tree.exists());
}

#[test]
fn output_refuses_links_fifos_dirs_and_others_files() {
    let base = tempfile::tempdir().unwrap();
    let b = base.path();
    // A link in a middle component (the attack: the sandbox swapped its
    // logs dir for a link to a dir of the operator's).
    let elsewhere = b.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("explain.json"), b"secret").unwrap();
    std::os::unix::fs::symlink(&elsewhere, b.join("logs")).unwrap();
    let e = OutputFile::create(&b.join("logs/explain.json")).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(
        std::fs::read(elsewhere.join("explain.json")).unwrap(),
        b"secret"
    );
    // A link as the last component.
    std::os::unix::fs::symlink(elsewhere.join("explain.json"), b.join("out")).unwrap();
    let e = OutputFile::create(&b.join("out")).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A FIFO: refused at once, never opened (an open would block).
    let fifo = b.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    let e = OutputFile::create(&fifo).unwrap_err();
    assert!(e.to_string().contains("FIFO"), "{e}");
    // A directory.
    std::fs::create_dir(b.join("d")).unwrap();
    assert!(OutputFile::create(&b.join("d")).is_err());
    // Nothing of the refused outputs was left beside them.
    let names: Vec<_> = std::fs::read_dir(b)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 5, "{names:?}");
}

#[test]
fn another_users_file_is_neither_written_nor_replaced() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Only root can make a file of another uid to try it with; as
        // anyone else the kernel's own checks stand in the way first.
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let planted = base.path().join("explain.json");
    std::fs::write(&planted, b"").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    let e = OutputFile::create(&planted).unwrap_err();
    assert!(e.to_string().contains("uid 65534"), "{e}");
    let e = open_append(&planted).unwrap_err();
    assert!(e.to_string().contains("65534"), "{e}");
    let m = std::fs::metadata(&planted).unwrap();
    assert_eq!((m.uid(), m.len()), (65534, 0));
}

#[test]
fn output_is_made_at_commit_and_moved_over_the_name() {
    let base = tempfile::tempdir().unwrap();
    let path = base.path().join("explain.json");
    std::fs::write(&path, b"old").unwrap();
    let out = OutputFile::create(&path).unwrap();
    // Until committed nothing of it exists: nothing to write into or swap.
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 1);
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
    out.commit(b"new").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    let m = std::fs::metadata(&path).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 1);
    // What was put at the name meanwhile is checked again at commit.
    let out = OutputFile::create(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
    let e = out.commit(b"x").unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 1);
}

#[test]
fn a_deep_wide_tree_needs_no_more_names_than_it_has() {
    // 70 dirs below the held depth, each holding a chain that must be
    // moved up: a removal whose names for moved dirs restarted each pass
    // (or ran out after 64) failed on it for good.
    let base = tempfile::tempdir().unwrap();
    let mut deep = base.path().join("t");
    for _ in 0..HELD_DIRS {
        deep.push("c");
    }
    for i in 0..70 {
        let mut d = deep.join(format!("d{i}"));
        for _ in 0..40 {
            d.push("x");
        }
        std::fs::create_dir_all(&d).unwrap();
    }
    remove_tree(&base.path().join("t")).unwrap();
    assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
}

#[test]
fn a_dir_is_reached_through_one_that_may_only_be_searched() {
    // A 0711 dir on the way: passed with O_PATH, never read.
    let base = tempfile::tempdir().unwrap();
    let through = base.path().join("through");
    std::fs::create_dir_all(through.join("inner/tree/a")).unwrap();
    std::fs::set_permissions(&through, std::fs::Permissions::from_mode(0o111)).unwrap();
    let r = remove_tree(&through.join("inner/tree"));
    std::fs::set_permissions(&through, std::fs::Permissions::from_mode(0o755)).unwrap();
    r.unwrap();
    assert!(!through.join("inner/tree").exists());
}

#[test]
fn append_refuses_fifos_links_and_second_names() {
    let base = tempfile::tempdir().unwrap();
    let b = base.path();
    let fifo = b.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // O_NONBLOCK on a FIFO with no reader fails ENXIO at once; either way
    // it is refused and nothing blocks.
    assert!(open_append(&fifo).is_err());
    let file = b.join("log");
    std::fs::write(&file, b"").unwrap();
    std::fs::hard_link(&file, b.join("second")).unwrap();
    let e = open_append(&file).unwrap_err();
    assert!(e.to_string().contains("2 links"), "{e}");
    std::fs::remove_file(b.join("second")).unwrap();
    std::io::Write::write_all(&mut open_append(&file).unwrap(), b"a").unwrap();
    std::io::Write::write_all(&mut open_append(&file).unwrap(), b"b").unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"ab");
    std::os::unix::fs::symlink(&file, b.join("link")).unwrap();
    assert!(open_append(&b.join("link")).is_err());
}

#[test]
fn hand_over_gives_the_dir_only_from_the_named_owner() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let d = base.path().join("scratch");
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(2_000_000_123), Some(2_000_000_123)).unwrap();
    assert!(!hand_over_dir(&d, 2_000_000_999, (0, 0)).unwrap());
    assert_eq!(std::fs::metadata(&d).unwrap().uid(), 2_000_000_123);
    assert!(hand_over_dir(&d, 2_000_000_123, (0, 0)).unwrap());
    let m = std::fs::metadata(&d).unwrap();
    assert_eq!((m.uid(), m.permissions().mode() & 0o777), (0, 0o700));
    assert!(!hand_over_dir(&base.path().join("gone"), 1, (0, 0)).unwrap());
}

#[test]
fn a_private_read_takes_only_the_callers_private_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = d.join("good");
    std::fs::write(&good, b"value-0123456789").unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(read_private(&good, 64).unwrap(), b"value-0123456789");
    // Longer than allowed: an error, not a cut value.
    assert!(read_private(&good, 8).is_err());
    // Readable by others, a second name, a link (last or on the way), a
    // FIFO (refused without blocking) and a directory: each refused.
    let open = d.join("open");
    std::fs::write(&open, b"x").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let hard = d.join("hard");
    std::fs::hard_link(&good, &hard).unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&open, &link).unwrap();
    std::os::unix::fs::symlink(d, d.join("up")).unwrap();
    let fifo = d.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path in our temp dir.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for bad in [open, hard, link, d.join("up/good"), fifo, d.to_path_buf()] {
        assert!(read_private(&bad, 64).is_err(), "{}", bad.display());
    }
}
