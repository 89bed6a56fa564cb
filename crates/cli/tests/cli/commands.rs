//! Drives the real `cordon` binary: exit statuses, confinement, the report
//! cache, and running as an unprivileged uid.

use std::path::{Path, PathBuf};

use crate::common;
use crate::common::{
    assert_no_process_with_arg, cordon, run, sleep_token, text, unprivileged,
    wait_for_process_with_arg,
};

#[test]
fn run_echo_ok_and_exit_codes() {
    let cache = crate::common::shared_cache();
    let out = run(cordon(cache.path()).args(["run", "--", "/bin/sh", "-c", "echo ok"]));
    assert_eq!(text(&out.stdout), "ok\n", "stderr: {}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));

    let out = run(cordon(cache.path()).args(["run", "--", "/bin/sh", "-c", "exit 7"]));
    assert_eq!(out.status.code(), Some(7));

    let out = run(cordon(cache.path()).args(["run", "--", "/bin/sh", "-c", "kill -TERM $$"]));
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));

    // A program found on PATH.
    let out = run(cordon(cache.path()).args(["run", "--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn writing_outside_scratch_is_denied() {
    let cache = crate::common::shared_cache();
    let outside = std::env::temp_dir().join(format!("cordon-cli-outside-{}", std::process::id()));
    let script = format!(
        "echo inside > here && cat here && echo x > {}",
        outside.display()
    );
    let out = run(cordon(cache.path()).args(["run", "--", "/bin/sh", "-c", &script]));
    assert_eq!(text(&out.stdout), "inside\n");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        !outside.exists(),
        "the sandboxed program wrote {}",
        outside.display()
    );
}

#[test]
fn timeout_kills_child_and_grandchild() {
    let cache = crate::common::shared_cache();
    let token = sleep_token();
    let mut child = common::spawn(cordon(cache.path()).args([
        "run",
        "--timeout",
        "2",
        "--",
        "/bin/sh",
        "-c",
        &format!("sleep {token} & wait"),
    ]));
    let running = wait_for_process_with_arg(&token);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(124));
    assert_no_process_with_arg(running);
}

/// Breach 6 of the isolation issue: `kill -KILL` of cordon itself (no
/// chance to clean up) used to leave the program's background child
/// running and scratch on disk. Now the parent-death signal takes the
/// sandbox's monitor, its init and so every process with it, and a fresh
/// scratch is a tmpfs that vanishes with the sandbox.
#[test]
fn sigkill_of_cordon_leaves_nothing_behind() {
    let cache = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let token = sleep_token();
    let mut child = common::spawn(
        cordon(cache.path())
            .env("TMPDIR", base.path())
            .args(["run", "--", "/bin/sh", "-c"])
            .arg(format!(
                "echo data > left-behind; sleep {token} & exec sleep 61.{}",
                std::process::id()
            )),
    );
    let running = wait_for_process_with_arg(&token);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_no_process_with_arg(running);
    // Nothing the program wrote is on the host's disk (an empty mount point
    // may stay: the crate README says so).
    for entry in std::fs::read_dir(base.path()).unwrap() {
        let dir = entry.unwrap().path();
        let inside: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            inside.is_empty(),
            "{} holds {inside:?} after cordon was SIGKILLed",
            dir.display()
        );
    }
}

/// Processes of this host whose argv has an argument starting with
/// `prefix`, with their parent pid and whether they are in this PID
/// namespace.
fn processes_under(prefix: &str) -> Vec<(i32, i32, bool, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.iter().any(|a| a.starts_with(prefix)) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_owned()))
                .unwrap_or_default()
        };
        if field("State:").starts_with('Z') {
            continue;
        }
        let ppid = field("PPid:").parse().unwrap_or(0);
        let host_ns = field("NSpid:").split_whitespace().count() == 1;
        out.push((pid, ppid, host_ns, args.join(" ")));
    }
    out
}

/// The conformance gate runs every probe a second time with no sandbox (the
/// baseline). Its hostile code forks and starts sessions on purpose; if
/// cordon is SIGKILLed meanwhile, those unconfined processes must not live
/// on: the suite's watchdog kills them.
#[test]
fn sigkill_of_cordon_during_the_gate_leaves_no_control_process() {
    stopping_cordon_during_the_gate_leaves_no_control_process(&[libc::SIGKILL]);
}

/// The same when cordon is first stopped (it then can do nothing) and only
/// later killed, and when it is told to terminate.
#[test]
fn sigstop_then_sigkill_or_sigterm_during_the_gate_leave_no_control_process() {
    stopping_cordon_during_the_gate_leaves_no_control_process(&[libc::SIGSTOP, libc::SIGKILL]);
    stopping_cordon_during_the_gate_leaves_no_control_process(&[libc::SIGTERM]);
}

/// Sends `signals` to `cordon conformance` once a control run has
/// descendants, and checks nothing under the suite's dir is left.
fn stopping_cordon_during_the_gate_leaves_no_control_process(signals: &[i32]) {
    use std::os::unix::fs::PermissionsExt;
    let cache = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let prefix = base.path().to_str().unwrap().to_owned();
    let mut leftovers = Vec::new();
    // A few tries: the kill must land while a control run has descendants.
    for _ in 0..5 {
        let mut child = common::spawn(
            cordon(cache.path())
                .env("TMPDIR", base.path())
                .args(["conformance"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        );
        let cordon_pid = child.id() as i32;
        // Wait for an unconfined control process that is not cordon's own
        // child (a fork or a session of a probe): what used to be left.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = false;
        while std::time::Instant::now() < deadline && !seen {
            seen = processes_under(&prefix)
                .iter()
                .any(|(_, ppid, host_ns, args)| {
                    *host_ns && *ppid != cordon_pid && !args.contains("watchdog")
                });
            if !seen {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        for (i, sig) in signals.iter().enumerate() {
            if i > 0 {
                // Stopped: let the control runs carry on a while.
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            // SAFETY: signalling the cordon this test started.
            unsafe { libc::kill(cordon_pid, *sig) };
        }
        if signals.last() != Some(&libc::SIGKILL) {
            // SIGTERM: cordon may exit by itself; if not, it is killed.
            common::wait_within(&mut child, std::time::Duration::from_secs(10));
        }
        child.wait().unwrap();
        if !seen {
            continue;
        }
        // Everything under the suite's dir is gone within a few seconds.
        for _ in 0..250 {
            leftovers = processes_under(&prefix);
            if leftovers.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Clean up after a failure (forks may appear while we kill).
        for _ in 0..200 {
            let left = processes_under(&prefix);
            if left.is_empty() {
                break;
            }
            for (pid, ..) in &left {
                // SAFETY: a process whose argv points into this test's
                // own temp dir: one this test started.
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            leftovers.is_empty(),
            "processes outlived cordon ({signals:?}): {leftovers:#?}"
        );
        // And the suite's dirs (each with a copy of the probe binary).
        let suite_dirs = || -> Vec<String> {
            std::fs::read_dir(base.path())
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("cordon-conformance-"))
                .collect()
        };
        let mut dirs = suite_dirs();
        for _ in 0..250 {
            if dirs.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            dirs = suite_dirs();
        }
        assert!(dirs.is_empty(), "suite dirs outlived cordon: {dirs:?}");
        return;
    }
    panic!("no control run with descendants was ever seen in 5 gate runs");
}

#[test]
fn bad_flags_are_usage_errors() {
    let cache = crate::common::shared_cache();
    let out = run(cordon(cache.path()).args(["run", "--pids", "many", "--", "true"]));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("--pids"),
        "{}",
        text(&out.stderr)
    );

    let out = run(cordon(cache.path()).args(["run", "--mem", "12X", "--", "true"]));
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("--mem"));

    let out = run(cordon(cache.path()).args(["run", "--ro", "/no/such/path", "--", "true"]));
    assert_eq!(out.status.code(), Some(125));

    let out = run(cordon(cache.path()).args(["run", "--", "no-such-program-xyz"]));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );

    let out = run(cordon(cache.path()).args(["conformance", "--probe", "P9"]));
    assert_eq!(out.status.code(), Some(2));
    let out = run(cordon(cache.path()).args(["conformance", "--backend", "nope"]));
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn unavailable_backend_refuses_with_report_and_trusted_says_so() {
    let cache = crate::common::shared_cache();
    let marker = std::env::temp_dir().join(format!("cordon-cli-ran-{}", std::process::id()));
    let script = format!("touch {}", marker.display());
    let out = run(cordon(cache.path()).args([
        "run",
        "--backend",
        "macos",
        "--",
        "/bin/sh",
        "-c",
        &script,
    ]));
    assert_eq!(out.status.code(), Some(125));
    let err = text(&out.stderr);
    assert!(err.contains("Seatbelt exists only on macOS"), "{err}");
    assert!(err.contains("NOT CONFORMING"), "{err}");
    assert!(!marker.exists(), "ran without a sandbox");

    let out = run(cordon(cache.path()).args([
        "run",
        "--backend",
        "noop",
        "--",
        "/bin/sh",
        "-c",
        &script,
    ]));
    assert_eq!(out.status.code(), Some(125));
    assert!(!marker.exists(), "ran under the noop backend");

    let out =
        run(cordon(cache.path()).args(["run", "--trusted", "--", "/bin/sh", "-c", "echo trusted"]));
    assert_eq!(text(&out.stdout), "trusted\n");
    assert!(text(&out.stderr).contains("WITHOUT an OS sandbox"));
}

#[test]
fn conformance_command_exit_codes_and_json() {
    let cache = tempfile::tempdir().unwrap();
    // `--nfd`: node-feature-discovery's local-source file, replaced whole
    // by each run.
    let nfd = cache.path().join("features.d-cordon");
    let nfd_arg = nfd.to_str().unwrap();
    let out =
        run(cordon(cache.path()).args(["conformance", "--backend", "noop", "--nfd", nfd_arg]));
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches(" FAIL ").count(), 7, "{stdout}");
    assert!(stdout.trim_end().ends_with("NOT CONFORMING"));
    let features = std::fs::read_to_string(&nfd).unwrap();
    assert!(
        features.contains("\ncordon-conforming=false\ncordon-backend=noop\n"),
        "{features}"
    );

    let out = run(cordon(cache.path()).args(["conformance", "--json", "--nfd", nfd_arg]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let features = std::fs::read_to_string(&nfd).unwrap();
    assert!(
        features.contains("\ncordon-conforming=true\ncordon-backend=linux\n"),
        "{features}"
    );
    // The label lapses unless a later run writes it again.
    let expiry = features
        .lines()
        .find_map(|l| l.strip_prefix("# +expiry-time="))
        .expect("an expiry directive");
    assert!(expiry.ends_with('Z') && expiry.len() == 20, "{expiry}");
    let bad = run(cordon(cache.path()).args([
        "conformance",
        "--backend",
        "noop",
        "--nfd",
        "/nonexistent/dir/f",
    ]));
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("--nfd /nonexistent/dir/f"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "cordon.conformance/1");
    assert_eq!(v["conforms"], true);
    // P1–P7, then P8: the Linux backend claims the egress allowlist.
    let ids: Vec<&str> = v["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8"]);
}

fn cache_file(cache: &Path) -> PathBuf {
    cache.join("cordon").join("conformance-linux.json")
}

/// Applies `edit` to every report the cache file holds (one per key, in
/// its `entries`).
fn edit_cache(file: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let json = std::fs::read_to_string(file).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let entries = v["entries"]
        .as_array_mut()
        .expect("the cache file's entries");
    assert!(!entries.is_empty());
    entries.iter_mut().for_each(edit);
    std::fs::write(file, serde_json::to_string(&v).unwrap()).unwrap();
}

fn cache_outcome(cache: &Path) -> String {
    let out = run(cordon(cache).args(["-vv", "run", "--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    if err.contains("conformance cache hit") {
        "hit".into()
    } else {
        "miss".into()
    }
}

#[test]
fn report_cache_hit_miss_and_corruption() {
    let cache = tempfile::tempdir().unwrap();
    assert_eq!(cache_outcome(cache.path()), "miss");
    let file = cache_file(cache.path());
    assert!(file.exists());
    assert_eq!(cache_outcome(cache.path()), "hit");

    // A changed key (here: another kernel release) is a miss and is rewritten.
    edit_cache(&file, |v| v["key"]["kernel_release"] = "0.0.0-other".into());
    assert_eq!(cache_outcome(cache.path()), "miss");
    assert_eq!(cache_outcome(cache.path()), "hit");

    // A binary that looks different on disk is hashed again: same hash, hit;
    // a stored hash that no longer matches the binary, miss.
    edit_cache(&file, |v| v["exe"]["ino"] = 1.into());
    assert_eq!(cache_outcome(cache.path()), "hit");
    edit_cache(&file, |v| {
        v["exe"]["ino"] = 1.into();
        v["key"]["exe_sha256"] = "00".into();
    });
    assert_eq!(cache_outcome(cache.path()), "miss");

    // A corrupted file is re-run, never trusted.
    std::fs::write(&file, b"{ not json").unwrap();
    assert_eq!(cache_outcome(cache.path()), "miss");
    // A forged report that claims to conform but does not is rejected.
    let json = std::fs::read_to_string(&file).unwrap();
    let forged = json.replacen("\"status\": \"pass\"", "\"status\": \"fail\"", 1);
    std::fs::write(&file, forged).unwrap();
    assert_eq!(cache_outcome(cache.path()), "miss");
    // --recheck ignores a good cache.
    let out = run(cordon(cache.path()).args(["-vv", "run", "--recheck", "--", "true"]));
    assert!(!text(&out.stderr).contains("conformance cache hit"));
}

#[test]
fn unprivileged_uid_conforms_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = unprivileged(dir.path());
    let out = run(cmd.args(["conformance"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).trim_end().ends_with("CONFORMS"));

    let mut cmd = unprivileged(&dir.path().join("second"));
    let out = run(cmd.args(["run", "--", "/bin/sh", "-c", "echo ok"]));
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn sigterm_of_cordon_kills_the_whole_tree() {
    let cache = crate::common::shared_cache();
    let token = sleep_token();
    let mut child = common::spawn(
        cordon(cache.path())
            .args(["run", "--", "/bin/sh", "-c"])
            .arg(format!("sleep {token} & wait")),
    );
    let running = wait_for_process_with_arg(&token);
    // SAFETY: a signal to the cordon this test started, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert_no_process_with_arg(running);
}

/// `--scratch DIR` gives the program a writable cwd in DIR, and what it
/// creates there is left owned by the caller; DIR's owner and mode never
/// change (as root: an idmapped mount for the sandbox's uid 65534).
#[test]
fn a_scratch_dir_of_the_caller_is_writable_and_stays_the_callers() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let cache = crate::common::shared_cache();
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(scratch.path().join("input"), "in\n").unwrap();
    let before = std::fs::metadata(scratch.path()).unwrap();
    let out = run(cordon(cache.path()).args([
        "run",
        "--scratch",
        scratch.path().to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        "cat input > output && mkdir sub && echo x > sub/f && echo more >> input && echo ok",
    ]));
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "ok\n", "{err}");
    assert!(!err.contains("cannot write"), "{err}");
    // SAFETY: geteuid/getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    for f in ["output", "sub", "sub/f", "input"] {
        let m = std::fs::metadata(scratch.path().join(f)).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "{f} is not the caller's");
    }
    assert_eq!(
        std::fs::read_to_string(scratch.path().join("input")).unwrap(),
        "in\nmore\n"
    );
    let after = std::fs::metadata(scratch.path()).unwrap();
    assert_eq!(
        (after.uid(), after.gid(), after.mode()),
        (before.uid(), before.gid(), before.mode()),
        "the scratch dir's owner or mode changed"
    );
}

/// As root, a dir another user owns is handed over as it is: cordon says
/// the sandbox uid cannot write it.
#[test]
fn a_scratch_dir_the_sandbox_uid_cannot_write_is_pointed_out() {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let cache = crate::common::shared_cache();
    let scratch = tempfile::tempdir().unwrap();
    if root {
        std::os::unix::fs::chown(scratch.path(), Some(1234), Some(1234)).unwrap();
    }
    let out = run(cordon(cache.path()).args([
        "run",
        "--scratch",
        scratch.path().to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        "echo x > f",
    ]));
    let err = text(&out.stderr);
    if root {
        assert!(
            err.contains("a uid of its own (such as 2000000000), which cannot write"),
            "{err}"
        );
        assert_ne!(
            out.status.code(),
            Some(0),
            "the sandbox wrote another user's 0755 dir"
        );
    } else {
        assert!(!err.contains("cannot write"), "{err}");
        assert_eq!(out.status.code(), Some(0), "{err}");
    }
}

/// `--mem`, `--cpu` and `--disk` as a user means them: the sandbox as a
/// whole. Where the report says a limit holds only per process, `cordon
/// run` must say so in one warning line instead. Run as root and as uid
/// 65534 (which cannot make cgroups here: no delegated cgroup v2 subtree).
#[test]
fn limits_hold_for_the_sandbox_or_cordon_refuses() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (who, make) in [("root", false), ("65534", true)] {
        let sub = dir.path().join(who);
        std::fs::create_dir_all(&sub).unwrap();
        let cache = crate::common::shared_cache();
        let cmd = || {
            if make {
                unprivileged(&sub)
            } else {
                cordon(cache.path())
            }
        };
        let out = run(cmd().args(["conformance", "--json"]));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{who}: {e}: {}", text(&out.stderr)));
        let scope = |key: &str| {
            report["host"]["backend_facts"][key]
                .as_str()
                .unwrap_or("")
                .to_string()
        };
        let memory_sandbox_wide = scope("limit_memory").starts_with("sandbox:");
        // SAFETY: geteuid cannot fail.
        if !make && unsafe { libc::geteuid() } == 0 {
            let v1 = std::fs::OpenOptions::new()
                .write(true)
                .open("/sys/fs/cgroup/memory/cgroup.procs")
                .is_ok();
            assert!(!v1 || memory_sandbox_wide, "root with cgroup v1: {report}");
        }

        // Memory: a memfd written to 512 MiB under --mem 64M.
        let hog = "import os\nfd = os.memfd_create('x')\nfor _ in range(512): os.write(fd, b'x' * (1 << 20))\nprint('held')";
        let out = run(cmd().args(["run", "--mem", "64M", "--", "/usr/bin/python3", "-c", hog]));
        let err = text(&out.stderr);
        if memory_sandbox_wide {
            assert_eq!(out.status.code(), Some(128 + libc::SIGKILL), "{who}: {err}");
            assert!(err.contains("used up its --mem"), "{who}: {err}");
            assert!(!err.contains("warning"), "{who}: {err}");
        } else {
            // Asked for the sandbox as a whole, which this host cannot
            // hold: refused, with how to get it, and nothing ran.
            assert_eq!(out.status.code(), Some(125), "{who}: {err}");
            assert!(
                err.contains("--mem of 64 MiB cannot hold for the sandbox as a whole")
                    && err.contains("--mem-scope process"),
                "{who}: {err}"
            );
            assert!(!text(&out.stdout).contains("held"), "{who}");
            // Accepted per process: it runs, and cordon says what holds.
            let out = run(cmd().args([
                "run",
                "--mem",
                "64M",
                "--mem-scope",
                "process",
                "--",
                "/bin/echo",
                "ran",
            ]));
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{who}: {err}");
            assert!(
                err.contains("--mem holds per process here: each process may hold 64 MiB"),
                "{who}: {err}"
            );
        }

        // CPU: ten processes in turn, 0.4 s each, under --cpu 1. Without a
        // cgroup the sum over the process tree is best effort: the limit
        // is per process, so it must be accepted as such; either way the
        // sum stops this program.
        let cpu_sandbox_wide = scope("limit_cpu").starts_with("sandbox:");
        let burn = "import os, time\nfor i in range(10):\n    pid = os.fork()\n    if pid == 0:\n        end = time.process_time() + 0.4\n        while time.process_time() < end: pass\n        os._exit(0)\n    os.waitpid(pid, 0)\nprint('done')";
        let mut cpu = vec!["run", "--cpu", "1"];
        if !cpu_sandbox_wide {
            let refused = run(cmd().args(["run", "--cpu", "1", "--", "/bin/true"]));
            assert_eq!(
                refused.status.code(),
                Some(125),
                "{who}: {}",
                text(&refused.stderr)
            );
            assert!(
                text(&refused.stderr).contains("--cpu-scope process"),
                "{who}"
            );
            cpu.extend(["--cpu-scope", "process"]);
        }
        cpu.extend(["--", "/usr/bin/python3", "-c", burn]);
        let out = run(cmd().args(&cpu));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + libc::SIGXCPU), "{who}: {err}");
        assert!(err.contains("used up its --cpu"), "{who}: {err}");
        assert!(!text(&out.stdout).contains("done"), "{who}");

        // Disk: 32 MiB into a fresh scratch under --disk 8M.
        let out = run(cmd().args([
            "run",
            "--disk",
            "8M",
            "--",
            "/bin/sh",
            "-c",
            "dd if=/dev/zero of=fill bs=1M count=32 2>&1; echo size $(stat -c %s fill)",
        ]));
        let so = text(&out.stdout);
        assert!(so.contains("No space left on device"), "{who}: {so}");
        assert!(so.contains(&format!("size {}", 8 << 20)), "{who}: {so}");
        assert!(!text(&out.stderr).contains("warning"), "{who}");
    }
}

/// As root, a writable grant holding a setuid file is refused: through the
/// idmapped mount the sandbox owns root's files, and a store through a
/// shared writable mmap would keep the bit (the hostile program tries
/// exactly that). Unprivileged, the file is the caller's own, and the
/// program runs as the caller: no uid to gain, so it runs.
#[test]
fn a_writable_grant_holding_a_setuid_file_is_refused_as_root() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let cache = crate::common::shared_cache();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let helper = dir.path().join("sub/helper");
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(&helper, b"#!/bin/sh\necho the helper\n").unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let rewrite = format!(
        "import mmap, os\nfd = os.open({:?}, os.O_RDWR)\nm = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_WRITE | mmap.PROT_READ)\nm[0:4] = b'#!/x'\nm.flush()\nprint('rewritten')\n",
        helper.to_str().unwrap()
    );
    let out = run(cordon(cache.path())
        .args(["run", "--rw"])
        .arg(dir.path())
        .args(["--", "/usr/bin/python3", "-c", &rewrite]));
    let err = text(&out.stderr);
    let m = std::fs::metadata(&helper).unwrap();
    let content = std::fs::read(&helper).unwrap();
    if root {
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(
            err.contains("setuid/setgid") && err.contains("sub/helper"),
            "{err}"
        );
        assert_eq!(content, b"#!/bin/sh\necho the helper\n");
        assert_eq!(m.mode() & 0o7777, 0o4755);
        // Without the bit the same grant runs.
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = run(cordon(cache.path())
            .args(["run", "--rw"])
            .arg(dir.path())
            .args(["--", "/bin/true"]));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    } else {
        assert_eq!(text(&out.stdout), "rewritten\n", "{err}");
    }
}

/// A sandbox that could write the report cache could plant a report that
/// admits a backend that does not conform (the noop one, say) for every
/// later run of this user. Each way of granting it (the cache's parent,
/// the cache dir, a dir inside it, a `--scratch` inside it) is refused
/// before the program runs: the program, which would forge the report and
/// leave a marker, never ran, and the cache file is unchanged. A grant
/// beside the cache runs (the control).
#[test]
fn no_grant_reaches_the_report_cache() {
    let cache = tempfile::tempdir().unwrap();
    let out = run(cordon(cache.path()).args(["run", "--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let file = cache_file(cache.path());
    let before = std::fs::read(&file).expect("the first run cached its report");
    let inside = cache.path().join("cordon/sub");
    std::fs::create_dir(&inside).unwrap();
    let beside = cache.path().join("beside");
    std::fs::create_dir(&beside).unwrap();
    let forge = format!(
        "echo '{{\"entries\": []}}' > {file}; echo ran > {marker}",
        file = file.display(),
        marker = inside.join("ran").display(),
    );
    for (flag, path) in [
        ("--rw", cache.path().to_path_buf()),
        ("--rw", cache.path().join("cordon")),
        ("--rw", inside.clone()),
        ("--scratch", inside.clone()),
    ] {
        let out = run(cordon(cache.path())
            .args(["run", flag])
            .arg(&path)
            .args(["--", "/bin/sh", "-c", &forge]));
        let err = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(125),
            "{flag} {}: {err}",
            path.display()
        );
        assert!(
            err.contains("conformance report cache") && err.contains(&path.display().to_string()),
            "{flag} {}: the refusal does not say why: {err}",
            path.display()
        );
        assert_eq!(
            std::fs::read(&file).unwrap(),
            before,
            "the cache file changed"
        );
        assert!(!inside.join("ran").exists(), "{flag}: the program ran");
    }
    // Where a run with another environment would look: `$HOME/.cache`,
    // whatever XDG_CACHE_HOME says now.
    let home = cache.path().join("home");
    std::fs::create_dir_all(home.join(".cache")).unwrap();
    let out = run(cordon(cache.path())
        .env("HOME", &home)
        .args(["run", "--rw"])
        .arg(home.join(".cache"))
        .args(["--", "/bin/true"]));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "$HOME/.cache: {err}");
    assert!(err.contains("conformance report cache"), "{err}");
    let out = run(cordon(cache.path())
        .args(["run", "--rw"])
        .arg(&beside)
        .args(["--", "/bin/sh", "-c", "echo ok > ok"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}
