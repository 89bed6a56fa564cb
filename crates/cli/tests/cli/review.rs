//! `cordon run --rw-review`: the program's writes land in a layer; the
//! summary lists them, `--review discard` leaves the directory
//! byte-identical, `--review apply` applies the legitimate changes and
//! refuses a link out of the tree. As root and as uid 65534 (tier
//! namespaces); tier landlock refuses it.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{cordon, run, shared_cache, text, unprivileged};

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let body = if m.is_file() {
            std::fs::read(&p).unwrap()
        } else {
            Vec::new()
        };
        out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), (m.mode(), body));
    }
    out
}

/// A project dir the runner's uid owns, older than the run.
fn project(root: &Path, uid: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.join("project");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("keep"), "keep").unwrap();
    std::fs::write(dir.join("mod"), "old\n").unwrap();
    for p in [dir.clone(), dir.join("keep"), dir.join("mod")] {
        std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(150));
    dir
}

const WRITES: &str = "cd \"$1\" && echo new > a && rm -f keep && echo more >> mod && \
                      ln -s /etc/shadow evil && echo WROTE";

/// Discards the layer a run kept (its id in the run's stderr), so no test
/// leaves one in the user's store.
fn discard_kept(base: &dyn Fn(&Path) -> Command, dir: &Path, err: &str) {
    let Some(id) = err
        .split("cordon review discard ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
    else {
        return;
    };
    let out = run(base(dir).args(["review", "discard", id]));
    assert!(
        out.status.success(),
        "discarding {id}: {}",
        text(&out.stderr)
    );
}

fn each_uid(check: impl Fn(&dyn Fn(&Path) -> Command, u32)) {
    let dir = tempfile::tempdir().unwrap();
    let as_root = |_: &Path| cordon(shared_cache().path());
    check(&as_root, 0);
    let as_other = |d: &Path| unprivileged(&d.join("as-65534"));
    check(&as_other, 65534);
    drop(dir);
}

#[test]
fn discard_leaves_the_directory_byte_identical_and_apply_refuses_a_link_out() {
    each_uid(|base, uid| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = project(tmp.path(), uid);
        let before = snapshot(&dir);
        let out = run(base(tmp.path())
            .args(["run", "--rw-review"])
            .arg(&dir)
            .args(["--review", "discard", "--", "sh", "-c", WRITES, "sh"])
            .arg(&dir));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "uid {uid}: {err}");
        assert!(text(&out.stdout).contains("WROTE"), "uid {uid}: {err}");
        for line in [
            "A a (4 bytes)",
            "D keep",
            "M mod (9 bytes)",
            "! evil -> /etc/shadow: refused",
        ] {
            assert!(err.contains(line), "uid {uid}: no `{line}` in: {err}");
        }
        assert_eq!(
            snapshot(&dir),
            before,
            "uid {uid}: discard changed the directory"
        );

        let out = run(base(tmp.path())
            .args(["run", "--rw-review"])
            .arg(&dir)
            .args(["--review", "apply", "--", "sh", "-c", WRITES, "sh"])
            .arg(&dir));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "uid {uid}: {err}");
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "new\n");
        assert_eq!(
            std::fs::read_to_string(dir.join("mod")).unwrap(),
            "old\nmore\n"
        );
        assert!(!dir.join("keep").exists(), "uid {uid}: {err}");
        assert!(
            std::fs::symlink_metadata(dir.join("evil")).is_err(),
            "uid {uid}: {err}"
        );
        assert!(err.contains("the layer is kept"), "uid {uid}: {err}");
        discard_kept(base, tmp.path(), &err);
        // What the sandbox made is the caller's on the host.
        assert_eq!(std::fs::metadata(dir.join("a")).unwrap().uid(), uid);
    });
}

#[test]
fn tier_landlock_refuses_a_reviewed_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = project(tmp.path(), 0);
    let out = run(cordon(shared_cache().path())
        .args(["run", "--tier", "landlock", "--rw-review"])
        .arg(&dir)
        .args(["--review", "discard", "--", "true"]));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("needs a mount namespace"),
        "{}",
        text(&out.stderr)
    );
}

/// A review run of everything the issue lists, done by the program itself
/// where the sandbox lets it (a setuid bit it cannot set: the crafted
/// layers of `crates/core/tests/runners/review_layer.rs` carry that one),
/// and a file the host changes while the program runs: the summary lists
/// each, the hostile ones are refused by name and the host's change is a
/// conflict, not overwritten.
#[test]
fn a_review_run_lists_refuses_and_reports_a_conflict() {
    use std::io::{BufRead, BufReader, Write};
    each_uid(|base, uid| {
        let tmp = tempfile::tempdir().unwrap();
        let dir = project(tmp.path(), uid);
        std::fs::create_dir(dir.join("tree")).unwrap();
        std::fs::write(dir.join("tree/f"), "f").unwrap();
        std::fs::write(dir.join("raced"), "host before").unwrap();
        for p in ["tree", "tree/f", "raced"] {
            std::os::unix::fs::chown(dir.join(p), Some(uid), Some(uid)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(150));
        let script = "cd \"$1\" && rm -rf tree && echo new > new && echo rewritten > mod && \
                      ln -s /etc/shadow shadow && ln keep hard && chmod u+s new 2>/dev/null; \
                      echo changed-in-sandbox > raced; echo READY; read _";
        let mut child = base(tmp.path())
            .args(["run", "--rw-review"])
            .arg(&dir)
            .args(["--review", "apply", "--", "sh", "-c", script, "sh"])
            .arg(&dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("READY") {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "uid {uid}: the program ended early"
            );
        }
        // The host changes a file while the program still runs.
        std::fs::write(dir.join("raced"), "host during").unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let done = child.wait_with_output().unwrap();
        let err = text(&done.stderr);
        assert_eq!(done.status.code(), Some(0), "uid {uid}: {err}");
        discard_kept(base, tmp.path(), &err);
        for expect in [
            "D tree",
            "A new (4 bytes)",
            "M mod (10 bytes)",
            "! shadow -> /etc/shadow: refused",
            "! hard: refused: a hard link",
            "! keep: refused: a hard link",
            "C raced: conflict",
        ] {
            assert!(err.contains(expect), "uid {uid}: no `{expect}` in: {err}");
        }
        assert!(!dir.join("tree").exists(), "uid {uid}: {err}");
        assert_eq!(
            std::fs::read_to_string(dir.join("mod")).unwrap(),
            "rewritten\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("raced")).unwrap(),
            "host during"
        );
        assert_eq!(std::fs::read_to_string(dir.join("keep")).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(dir.join("shadow")).is_err());
        assert!(std::fs::symlink_metadata(dir.join("hard")).is_err());
        let mode = std::fs::metadata(dir.join("new")).unwrap().mode();
        assert_eq!(mode & 0o6000, 0, "uid {uid}: a setuid bit was applied");
    });
}
