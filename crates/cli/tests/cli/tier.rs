//! `--tier`: a required tier is used or refused, never replaced. Under a
//! container runtime's seccomp filter (no user namespaces) `cordon run
//! --tier namespaces` exits 125 with the reason and runs nothing, while
//! plain `cordon run` and `cordon conformance` name tier landlock; on
//! this host as it is, `--tier landlock` is used (and said to be
//! required), and only the Linux backend takes a tier.

use std::process::Command;

use crate::common;
use crate::common::{cordon, run, text};
use crate::container_filter;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn in_container(cmd: &mut Command) -> &mut Command {
    container_filter::install_on(cmd.env("PATH", PATH))
}

#[test]
fn a_required_tier_namespaces_is_refused_in_a_container() {
    let cache = tempfile::tempdir().unwrap();
    let out = run(in_container(cordon(cache.path()).args([
        "run",
        "--tier",
        "namespaces",
        "--",
        "sh",
        "-c",
        "echo ran",
    ])));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(text(&out.stdout), "", "nothing ran: {err}");
    assert!(
        err.contains("tier namespaces is required and cannot run here")
            && err.contains("unshare: Operation not permitted"),
        "the refusal says why: {err}"
    );
    // The same command without --tier runs, in tier landlock, said once.
    let out = run(in_container(
        cordon(cache.path()).args(["run", "--", "sh", "-c", "echo ran"]),
    ));
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "ran\n", "{err}");
    assert_eq!(
        err.matches("cordon: sandbox tier landlock: no namespaces, because tier namespaces is unavailable here")
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn cordon_conformance_names_tier_landlock_in_a_container() {
    let cache = tempfile::tempdir().unwrap();
    let out = run(in_container(
        cordon(cache.path()).args(["conformance", "--json"]),
    ));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    let tier = report["host"]["backend_facts"]["tier"]
        .as_str()
        .unwrap_or_default();
    assert!(tier.starts_with("landlock: no namespaces"), "{tier}");
    let given_up: Vec<String> = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["checks"].as_array().unwrap().clone())
        .filter(|c| c["status"] == "given_up")
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        given_up.contains(&"hostname-hidden".to_string()),
        "the given-up checks are in the report: {given_up:?}"
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn tier_landlock_can_be_required_where_namespaces_work() {
    let cache = tempfile::tempdir().unwrap();
    let out = run(cordon(cache.path())
        .env("PATH", PATH)
        .args(["run", "--tier", "landlock", "--", "sh", "-c", "echo ran"]));
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "ran\n", "{err}");
    assert!(
        err.contains("cordon: sandbox tier landlock: no namespaces (required)"),
        "{err}"
    );
    let out = run(cordon(cache.path()).args([
        "run",
        "--backend",
        "noop",
        "--tier",
        "landlock",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("only the linux backend has tiers"),
        "{}",
        text(&out.stderr)
    );
}

/// A dead scratch 20 000 levels deep planted in the temp dir (by an
/// earlier sandbox, or by any user) is swept without aborting cordon: the
/// sweep's recursive removal overflowed its thread's stack on one 15 000
/// deep, and every run that swept that dir aborted (exit 134). Run with a
/// high `RLIMIT_NOFILE` (as in many containers), so that the removal
/// reaches that depth instead of failing with `EMFILE` first. As root and
/// as uid 65534, in tier landlock (whose runs sweep: their scratch is on
/// the host's disk).
#[test]
fn a_planted_deep_dead_scratch_neither_aborts_cordon_nor_stays() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    for who in if root {
        vec!["root", "uid 65534"]
    } else {
        vec!["this user"]
    } {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let dead = {
            let mut c = Command::new("/bin/true").spawn().unwrap();
            let pid = c.id();
            c.wait().unwrap();
            pid
        };
        let planted = tmp.join(format!("cordon-scratch-{dead}-Deep01"));
        // Built by its owner, as a sandbox of that user would.
        let mut build = Command::new("/usr/bin/python3");
        build.args([
            "-c",
            "import os, sys\nos.mkdir(sys.argv[1])\nos.chdir(sys.argv[1])\nos.mkdir('top')\n\
             for _ in range(20000):\n    os.mkdir('new')\n    os.rename('top', 'new/d')\n    \
             os.rename('new', 'top')",
            planted.to_str().unwrap(),
        ]);
        if who == "uid 65534" {
            build.uid(65534).gid(65534);
        }
        assert!(
            build.status().unwrap().success(),
            "{who}: the chain was not built"
        );
        // Removed however the test ends (a recursive removal, as the
        // temp dir's own, would overflow this thread's stack).
        struct Planted(std::path::PathBuf);
        impl Drop for Planted {
            fn drop(&mut self) {
                let _ = cordon_core::hostfs::remove_tree(&self.0);
            }
        }
        let planted = Planted(planted);
        let planted = &planted.0;
        let mut cmd = if who == "uid 65534" {
            common::unprivileged(&dir.path().join("bin"))
        } else {
            cordon(dir.path())
        };
        // The program waits for its stdin to close: the sweep runs on a
        // thread beside it, and the host closes it once the dead scratch is
        // gone (or cordon has ended, as it did when the sweep aborted it).
        cmd.env("PATH", PATH)
            .env("TMPDIR", &tmp)
            .args([
                "run",
                "--tier",
                "landlock",
                "--",
                "sh",
                "-c",
                "cat >/dev/null",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // SAFETY: setrlimit only, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let mut l = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
                l.rlim_cur = l.rlim_max.min(1 << 20);
                libc::setrlimit(libc::RLIMIT_NOFILE, &l);
                Ok(())
            });
        }
        let mut child = common::spawn(&mut cmd);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        while planted.exists()
            && child.try_wait().unwrap().is_none()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let gone = !planted.exists();
        drop(child.stdin.take());
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "{who}: cordon did not end well: {err}"
        );
        assert!(!err.contains("overflowed"), "{who}: {err}");
        assert!(gone, "{who}: the dead scratch was never swept");
    }
}

/// The reports in the Linux backend's cache file under `cache`, each as
/// its key's `host_confinement`.
fn cached_confinements(cache: &std::path::Path) -> Vec<serde_json::Value> {
    let file = cache.join("cordon").join("conformance-linux.json");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("no report cached at {}: {e}", file.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {text}"))
        .iter()
        .map(|e| e["key"]["host_confinement"].clone())
        .collect()
}

#[test]
fn a_report_cached_on_the_plain_host_is_not_reused_under_a_container_filter() {
    // The same tier both times, so only the outer confinement differs:
    // a report made where nothing filtered the host says nothing about
    // which checks still tell a sandbox from none under a filter.
    let cache = tempfile::tempdir().unwrap();
    let args = ["run", "--tier", "landlock", "--", "sh", "-c", "echo ran"];
    let ran = |out: std::process::Output| {
        assert_eq!(text(&out.stdout), "ran\n", "{}", text(&out.stderr));
    };
    ran(run(cordon(cache.path()).env("PATH", PATH).args(args)));
    let file = cache.path().join("cordon").join("conformance-linux.json");
    let stored = std::fs::read(&file).unwrap();
    assert_eq!(cached_confinements(cache.path()).len(), 1);
    // Control: on the same host the report is reused, the file untouched
    // (a gate that reran would store its new report).
    ran(run(cordon(cache.path()).env("PATH", PATH).args(args)));
    assert_eq!(
        std::fs::read(&file).unwrap(),
        stored,
        "a hit rewrote the cache"
    );

    ran(run(in_container(cordon(cache.path()).args(args))));
    let confinements = cached_confinements(cache.path());
    assert_eq!(
        confinements.len(),
        2,
        "the plain host's report was reused under the container filter: {confinements:?}"
    );
    assert_ne!(
        confinements[0]["seccomp_filters"], confinements[1]["seccomp_filters"],
        "the new report is not the filtered host's: {confinements:?}"
    );
}
