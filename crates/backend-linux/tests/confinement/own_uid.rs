//! Sandbox v3, tried as an attacker: a uid of its own for every sandbox
//! of a root host, quotas held per sandbox, a hostname of its own (tier
//! namespaces; tier landlock gives it up, and is only checked not to set
//! the host's), a set-up that cannot be frozen, and `#!` lines that grant
//! nothing they name. Each hostile scenario also runs its attack against the layers
//! without the fix (`Layers` with that switch off), where it must
//! succeed: the check can fail.

use super::*;
use cordon_backend_linux::Layers;

/// The helper mode the hostile host processes and the in-sandbox
/// programs of these scenarios run in (this binary, re-executed).
pub(super) const HELPER: &str = "own_uid_helper";

/// A backend with every layer but `switch` turned off by `off`.
pub(super) fn without(off: impl FnOnce(&mut Layers)) -> Spawner {
    let mut layers = Layers::ALL;
    off(&mut layers);
    Spawner::confined(Arc::new(LinuxBackend::with_layers(layers)), config())
}

/// The helper: `CORDON_HELPER_ACT` says what to do.
pub(super) fn helper() -> ! {
    let act = std::env::var("CORDON_HELPER_ACT").unwrap_or_default();
    let out = match act.as_str() {
        "reach" => reach(
            std::env::var("CORDON_TARGET")
                .ok()
                .and_then(|p| p.parse().ok())
                .expect("target pid"),
            std::env::var("CORDON_TARGET_DIR").ok(),
        ),
        "flood" => flood(),
        "probe-quotas" => probe_quotas(),
        _ => format!("unknown act {act:?}"),
    };
    println!("{out}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if act == "flood" || std::env::args().any(|a| a == "hold") {
        // Hold what was taken until the host closes stdin.
        let mut b = [0u8; 1];
        let _ = std::io::stdin().read(&mut b);
    }
    std::process::exit(0);
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A host process's attempts on `pid`: each `name=ok` or `name=errno N`.
/// A successful trace is undone at once; a planted file is removed by the
/// scenario.
fn reach(pid: libc::pid_t, dir: Option<String>) -> String {
    let mut out = Vec::new();
    let mut note = |name: &str, ok: bool| {
        out.push(if ok {
            format!("{name}=ok")
        } else {
            format!("{name}=errno{}", errno())
        })
    };
    let c = |p: String| std::ffi::CString::new(p).unwrap();
    // SAFETY: syscalls on a pid, paths and fds of this process; every
    // success is undone (detach, close, unlink by the scenario).
    unsafe {
        let r = libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0);
        if r == 0 {
            libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
        }
        note("ptrace", r == 0);
        for file in ["mem", "environ"] {
            let fd = libc::open(
                c(format!("/proc/{pid}/{file}")).as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            note(file, fd >= 0);
            if fd >= 0 {
                libc::close(fd);
            }
        }
        let root = libc::open(
            c(format!("/proc/{pid}/root/")).as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        note("root", root >= 0);
        if root >= 0 {
            libc::close(root);
        }
        if let Some(dir) = &dir {
            // The `--scratch` breach: plant a setuid file through the
            // program's root.
            let path = c(format!("/proc/{pid}/root{dir}/planted"));
            let fd = libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                0o755,
            );
            let planted = fd >= 0 && libc::fchmod(fd, 0o4755) == 0;
            note("plant-setuid", planted);
            if fd >= 0 {
                libc::close(fd);
            }
        }
        let ns = libc::open(
            c(format!("/proc/{pid}/ns/user")).as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        let entered = ns >= 0 && libc::setns(ns, libc::CLONE_NEWUSER) == 0;
        note("setns", entered);
        if ns >= 0 {
            libc::close(ns);
        }
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as libc::c_int;
        let got = pidfd >= 0 && libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0) >= 0;
        note("pidfd_getfd", got);
        if pidfd >= 0 {
            libc::close(pidfd);
        }
        note("signal", libc::kill(pid, 0) == 0);
    }
    out.join(" ")
}

/// In a sandbox: takes every pending signal, inotify instance and (as a
/// sandbox of a root host) pipe buffer page it can, and reports how many.
fn flood() -> String {
    let mut out = Vec::new();
    // SAFETY: signal, inotify and pipe calls on this process's own
    // objects; the signal is blocked so queueing it does nothing.
    unsafe {
        let sig = libc::SIGRTMIN();
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let me = libc::getpid();
        let mut n = 0u64;
        let value: libc::sigval = std::mem::zeroed();
        while n < 10_000_000 && libc::sigqueue(me, sig, value) == 0 {
            n += 1;
        }
        out.push(format!("signals={n} stop=errno{}", errno()));
        let mut n = 0u64;
        while n < 100_000 && libc::inotify_init1(libc::IN_CLOEXEC) >= 0 {
            n += 1;
        }
        out.push(format!("inotify={n} stop=errno{}", errno()));
        if std::env::var("CORDON_FLOOD_PIPES").is_ok() {
            // Until the uid's pipe-buffer quota (fs.pipe-user-pages-soft)
            // refuses a larger pipe, then default ones until a new pipe
            // comes out small: the quota is used up.
            let mut n = 0u64;
            loop {
                let mut p = [0; 2];
                if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                    out.push(format!("pipes={n} stop=pipe-errno{}", errno()));
                    break;
                }
                if libc::fcntl(p[0], libc::F_SETPIPE_SZ, 1 << 20) < 0 {
                    out.push(format!("pipes={n} stop=errno{}", errno()));
                    break;
                }
                n += 1;
            }
            let mut bytes = -1;
            for _ in 0..1000 {
                let mut p = [0; 2];
                if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                    break;
                }
                bytes = libc::fcntl(p[0], libc::F_GETPIPE_SZ);
                if bytes < 65536 {
                    break;
                }
            }
            out.push(format!("new_pipe_bytes={bytes}"));
        }
    }
    out.join(" ")
}

/// In a sandbox (or on the host): one of each thing [`flood`] takes.
fn probe_quotas() -> String {
    // SAFETY: as in `flood`, one of each.
    unsafe {
        let sig = libc::SIGRTMIN();
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let value: libc::sigval = std::mem::zeroed();
        let signal = libc::sigqueue(libc::getpid(), sig, value) == 0;
        let signal = if signal {
            "ok".to_string()
        } else {
            format!("errno{}", errno())
        };
        // A POSIX timer holds a queued signal of its own from creation,
        // counted as a pending signal (issue 44's pool inventory).
        let mut ev: libc::sigevent = std::mem::zeroed();
        ev.sigev_notify = libc::SIGEV_SIGNAL;
        ev.sigev_signo = sig;
        let mut timer: libc::timer_t = std::mem::zeroed();
        let timer = if libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut timer) == 0 {
            "ok".to_string()
        } else {
            format!("errno{}", errno())
        };
        let fd = libc::inotify_init1(libc::IN_CLOEXEC);
        let inotify = if fd >= 0 {
            "ok".to_string()
        } else {
            format!("errno{}", errno())
        };
        let mut p = [0; 2];
        libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC);
        format!(
            "signal={signal} timer={timer} inotify={inotify} pipe_bytes={}",
            libc::fcntl(p[0], libc::F_GETPIPE_SZ)
        )
    }
}

/// This binary where a sandbox (and uid 65534) can execute it.
pub(super) fn helper_copy() -> (PathBuf, PathBuf) {
    copy_for_nobody(&std::env::current_exe().expect("current_exe"))
}

fn helper_spec(exe: &Path, act: &str) -> ChildSpec {
    spec(exe.to_str().unwrap(), &[])
        .env(SCENARIO_ENV, HELPER)
        .env("CORDON_HELPER_ACT", act)
}

/// Starts `spec` (a program that prints one line first), waits for that
/// line, and returns the child, the line and the host pid of the program
/// (found by `token` in its argv).
pub(super) fn start_held(
    rt: &tokio::runtime::Runtime,
    sp: &Spawner,
    spec: ChildSpec,
    token: &str,
) -> Result<(cordon_core::RunningChild, String, u32), String> {
    let mut child = rt
        .block_on(async { sp.spawn(&spec) })
        .map_err(|e| format!("spawn: {e}"))?;
    let mut stdout = child.stdout.take().expect("stdout");
    let line = rt.block_on(async {
        let mut buf = Vec::new();
        let mut b = [0u8; 1];
        while stdout.read_exact(&mut b).await.is_ok() && b[0] != b'\n' {
            buf.push(b[0]);
        }
        String::from_utf8_lossy(&buf).into_owned()
    });
    let pid = if token.is_empty() {
        0
    } else {
        // The shell said its line before it exec'd the program that
        // bears the token: wait for that exec (bounded, not timed).
        let mut found = None;
        for _ in 0..500 {
            found = host_pids_with_arg(token).into_iter().next();
            if found.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        found.ok_or_else(|| format!("cannot find the program by its token; it said {line:?}"))?
    };
    Ok((child, line, pid))
}

/// The uid the host sees a process run as.
fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Breaches 1 and 3 (root host): a host process of uid 65534 — a daemon
/// running as `nobody`, and what every sandbox used to share — tries to
/// trace the program, read its memory and environment, open its root,
/// plant a setuid file in its `--scratch` dir through that root, enter its
/// user namespace, take its fds and signal it. With a uid of its own the
/// kernel refuses each; with the shared uid (`own_uid` off) they succeed.
pub(super) fn host_nobody_cannot_reach_the_program() -> Outcome {
    if !is_root() {
        // An unprivileged host's sandboxes have its own uid, which its own
        // processes share: inherent (README). Nothing to show here, and a
        // scenario that shows nothing must not pass.
        return Err("this scenario needs root (run the suite as root, as CI does)".into());
    }
    let (dir, exe) = helper_copy();
    let attack = |sp: &Spawner| -> Result<String, String> {
        let rt = rt();
        let scratch = existing_scratch();
        // A caller's dir that a 65534 process could write into through the
        // shared uid's view of it. Tier landlock on a root host refuses a
        // caller's dir: there the target is the sandbox's fresh scratch
        // (a host dir of its uid).
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        let token = sleep_token();
        let mut spec = sh(&format!("echo ready; exec sleep {token}"));
        if !host_dirs_refused() {
            spec = spec.scratch(cordon_core::Scratch::Existing(scratch.path().to_path_buf()));
        }
        let (mut child, _, pid) = start_held(&rt, sp, spec, &token)?;
        let target_dir = if host_dirs_refused() {
            child.scratch_dir().to_path_buf()
        } else {
            scratch.path().to_path_buf()
        };
        let out = Command::new(&exe)
            .env(SCENARIO_ENV, HELPER)
            .env("CORDON_HELPER_ACT", "reach")
            .env("CORDON_TARGET", pid.to_string())
            .env("CORDON_TARGET_DIR", &target_dir)
            .uid(65534)
            .gid(65534)
            .output()
            .map_err(|e| e.to_string());
        // Read before the sandbox ends (its fresh scratch goes with it).
        let planted = target_dir.join("planted");
        let setuid_on_disk = std::fs::metadata(&planted)
            .map(|m| m.permissions().mode() & 0o4000 != 0)
            .unwrap_or(false);
        child.kill();
        let _ = rt.block_on(child.wait());
        let _ = std::fs::remove_file(&planted);
        let out = out?;
        Ok(format!(
            "{} on-disk-setuid={setuid_on_disk}",
            String::from_utf8_lossy(&out.stdout).trim()
        ))
    };
    let shared = attack(&without(|l| l.own_uid = false))?;
    let own = attack(&spawner())?;
    let _ = std::fs::remove_dir_all(&dir);
    // The control: through the shared uid, the attack works (in tier
    // landlock there is no namespace of the sandbox's to enter).
    let control: &[&str] = if on_container() {
        &["ptrace=ok", "environ=ok", "root=ok"]
    } else {
        &["ptrace=ok", "environ=ok", "root=ok", "setns=ok"]
    };
    for step in control {
        ensure(shared.contains(step), || {
            format!("control: with the shared uid, {step} was expected: {shared}")
        })?;
    }
    for step in [
        "ptrace",
        "mem",
        "environ",
        "root",
        "plant-setuid",
        "setns",
        "pidfd_getfd",
        "signal",
    ] {
        ensure(!own.contains(&format!("{step}=ok")), || {
            format!("a host process of uid 65534 reached the sandbox ({step}): {own}")
        })?;
    }
    ensure(own.contains("on-disk-setuid=false"), || own.clone())
}

/// Breach 5: two sandboxes at once. The first takes every pending signal,
/// inotify instance and (root host) pipe-buffer page it can and holds
/// them; the second, and a host process of the caller's uid, must still
/// get one of each. Root: the two have different uids. Without the
/// quotas and the uid of its own, the second is starved.
pub(super) fn concurrent_sandboxes_keep_their_own_quotas() -> Outcome {
    let (dir, exe) = helper_copy();
    let result = (|| {
        let own = quotas_of_two(&spawner(), &exe)?;
        if on_container() {
            return quotas_in_tier_landlock(&own);
        }
        for who in [&own.second, &own.host] {
            ensure(
                ["signal=ok", "timer=ok", "inotify=ok"]
                    .iter()
                    .all(|w| who.contains(w)),
                || format!("the second sandbox or the host was starved: {own:?}"),
            )?;
        }
        let n = |key: &str| -> u64 {
            own.first
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|v| v.parse().ok())
                .unwrap_or(u64::MAX)
        };
        ensure(n("signals=") <= 1024 && n("inotify=") <= 32, || {
            format!("the first sandbox took more than its quota: {own:?}")
        })?;
        if is_root() {
            ensure(own.uids.0 != own.uids.1 && own.uids.0 != 0, || {
                format!("two sandboxes of a root host share uid {:?}", own.uids)
            })?;
            ensure(own.first.contains("new_pipe_bytes=8192"), || {
                format!("the first sandbox did not exhaust its pipe buffers: {own:?}")
            })?;
            ensure(own.second.contains("pipe_bytes=65536"), || {
                format!("the second sandbox lost its pipe buffers: {own:?}")
            })?;
        }
        // The control (root only: it exhausts the shared uid 65534's
        // quota for a moment, which every process of that uid shares): the
        // shared uid without quotas.
        if !is_root() {
            return Ok(());
        }
        let starved = quotas_of_two(
            &without(|l| {
                l.own_uid = false;
                l.kernel_quotas = false;
            }),
            &exe,
        )?;
        ensure(
            starved.second.contains("signal=errno11") && starved.second.contains("timer=errno11"),
            || format!("control: the second sandbox was not starved of signals: {starved:?}"),
        )
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// What tier landlock holds of [`concurrent_sandboxes_keep_their_own_quotas`]
/// (README "Tier landlock"). As root each sandbox's uid is its own, so
/// the per-user counts are that uid's (at the host's defaults, not the
/// namespaced quotas): neither the second sandbox nor the host is
/// starved. As another user the counts are the caller's: inotify is
/// refused in the sandbox, the first's pending signals stop at its
/// `RLIMIT_SIGPENDING`, and the host keeps both; the second sandbox
/// shares the first's signal count (nothing but a user namespace
/// separates them).
fn quotas_in_tier_landlock(own: &TwoSandboxes) -> Outcome {
    ensure(
        own.host.contains("signal=ok")
            && own.host.contains("timer=ok")
            && own.host.contains("inotify=ok"),
        || format!("the host was starved: {own:?}"),
    )?;
    if is_root() {
        ensure(own.uids.0 != own.uids.1 && own.uids.0 != 0, || {
            format!("two sandboxes of a root host share uid {:?}", own.uids)
        })?;
        ensure(
            own.second.contains("signal=ok")
                && own.second.contains("timer=ok")
                && own.second.contains("inotify=ok"),
            || format!("the second sandbox was starved: {own:?}"),
        )?;
        println!("reduced: tier landlock as root: per-user counts are each sandbox uid's own, at the host's defaults");
        return Ok(());
    }
    ensure(
        own.first.contains("inotify=0 stop=errno1")
            && own.second.split_whitespace().any(|w| w == "inotify=errno1"),
        || format!("inotify was not refused: {own:?}"),
    )?;
    let signals: u64 = own
        .first
        .split_whitespace()
        .find_map(|w| w.strip_prefix("signals="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    ensure(signals <= 1024, || {
        format!("the first sandbox queued more signals than its rlimit: {own:?}")
    })?;
    println!(
        "reduced: tier landlock as another user: two sandboxes share the caller's signal count"
    );
    Ok(())
}

#[derive(Debug)]
struct TwoSandboxes {
    first: String,
    second: String,
    host: String,
    uids: (u32, u32),
}

fn quotas_of_two(sp: &Spawner, exe: &Path) -> Result<TwoSandboxes, String> {
    let rt = rt();
    let token = sleep_token();
    let mut flood = helper_spec(exe, "flood").arg(&token);
    if is_root() {
        flood = flood.env("CORDON_FLOOD_PIPES", "1");
    }
    let (mut first, first_line, first_pid) = start_held(&rt, sp, flood, &token)?;
    let token2 = sleep_token();
    let probe = helper_spec(exe, "probe-quotas").arg(&token2).arg("hold");
    let (mut second, second_line, second_pid) = start_held(&rt, sp, probe, &token2)?;
    let uids = (
        uid_of(first_pid).unwrap_or(0),
        uid_of(second_pid).unwrap_or(0),
    );
    // The host, as the caller's uid, while the flood holds.
    let host = Command::new(exe)
        .env(SCENARIO_ENV, HELPER)
        .env("CORDON_HELPER_ACT", "probe-quotas")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .map_err(|e| e.to_string());
    for c in [&mut first, &mut second] {
        drop(c.stdin.take());
        let _ = rt.block_on(c.wait());
    }
    Ok(TwoSandboxes {
        first: first_line,
        second: second_line,
        host: host?,
        uids,
    })
}

/// Breach 6: the sandbox has a hostname of its own.
pub(super) fn hostname_is_the_sandboxes_own() -> Outcome {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(|e| e.to_string())?
        .trim()
        .to_string();
    if on_container() {
        // Tier landlock gives the hostname up (README): the sandbox sees
        // the host's. It must not change it. (No control: unconfined, as
        // root, the same call would rename this host.)
        let r = expect_ok(py("import ctypes\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             r = libc.sethostname(b'cordon-pwned', 12)\n\
             print(r, ctypes.get_errno())\n"))?;
        let now =
            std::fs::read_to_string("/proc/sys/kernel/hostname").map_err(|e| e.to_string())?;
        ensure(now.trim() == host, || {
            format!("the sandbox renamed the host to {now:?}: {r}")
        })?;
        ensure(r.stdout.starts_with("-1 "), || format!("sethostname: {r}"))?;
        println!("reduced: tier landlock gives up the hostname: only that the sandbox cannot set it is checked");
        return Ok(());
    }
    let inside = expect_ok(sh("cat /proc/sys/kernel/hostname 2>/dev/null || uname -n"))?;
    ensure(inside.stdout.trim() == "cordon", || {
        format!("the sandbox's hostname is {:?}", inside.stdout)
    })?;
    let control = run_with(&without(|l| l.uts_namespace = false), sh("uname -n"))?;
    ensure(control.stdout.trim() == host, || {
        format!("control: without a UTS namespace the host's name {host:?} shows: {control}")
    })
}

/// The sandbox's own procfs is written before the program runs (the
/// kernel quotas go in through it, `mounts.rs`) and read-only once it
/// does: a write to a `/proc` file the program owns fails with the
/// mount's `EROFS`, which the kernel checks before Landlock's `EACCES`.
pub(super) fn the_sandboxes_proc_is_read_only() -> Outcome {
    const WRITE_COMM: &str = "import errno\n\
try:\n\
\x20   open('/proc/self/comm', 'w').write('x')\n\
\x20   print('written')\n\
except OSError as e:\n\
\x20   print(errno.errorcode.get(e.errno, e.errno))\n";
    let r = expect_ok(py(WRITE_COMM))?;
    // Tier landlock grants no /proc at all: Landlock refuses the open.
    let want = if on_container() { "EACCES" } else { "EROFS" };
    ensure(r.stdout.trim() == want, || {
        format!("writing /proc/self/comm in the sandbox: {r}")
    })
}

/// Breach 2: a script's `#!` line names a secret as an argument of `env`
/// or of its interpreter. Nothing it names may be granted: each form must
/// fail to print the secret. (Before the fix, the first form printed it.)
pub(super) fn shebang_arguments_grant_nothing() -> Outcome {
    let dir = canary("TOP-SECRET-SHEBANG");
    let secret = dir.path().join("secret");
    let s = secret.display();
    let scripts = dir.path().join("scripts");
    std::fs::create_dir(&scripts).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&scripts, std::fs::Permissions::from_mode(0o755)).unwrap();
    let forms = [
        format!("#!/usr/bin/env -S -u {s} sh -c \"cat {s}\"\n"),
        format!("#!/usr/bin/env -S cat {s}\n"),
        format!("#!/bin/sh {s}\n"),
        format!("#!/usr/bin/env {s}\n"),
        format!("#!/bin/cat {s}\n"),
    ];
    for (i, text) in forms.iter().enumerate() {
        let script = scripts.join(format!("s{i}"));
        std::fs::write(&script, text).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = run(spec(script.to_str().unwrap(), &[]))?;
        ensure(
            !r.stdout.contains("TOP-SECRET") && !r.stderr.contains("TOP-SECRET"),
            || format!("`{}` read the secret through its #! line: {r}", text.trim()),
        )?;
        // The control: with the secret granted, the same script prints it
        // (so the script itself works).
        let mut cfg = config();
        cfg.read_only = vec![secret.clone()];
        let granted = run_with(&spawner_with(cfg), spec(script.to_str().unwrap(), &[]))?;
        if matches!(i, 0 | 1 | 4) {
            ensure(granted.stdout.contains("TOP-SECRET"), || {
                format!(
                    "control: `{}` does not print a granted secret: {granted}",
                    text.trim()
                )
            })?;
        }
    }
    Ok(())
}

/// Breach 4: a set-up that stops (a process of it SIGSTOPped, as a host
/// process of the shared uid could do) cannot hold the spawn: past the
/// set-up timeout every process of it is killed, the spawn fails with a
/// clear error, and nothing of it is left.
pub(super) fn a_stopped_setup_is_killed_and_fails() -> Outcome {
    #[derive(Debug)]
    struct StopsItself(LinuxBackend);
    impl cordon_core::SandboxBackend for StopsItself {
        fn name(&self) -> &str {
            "linux"
        }
        fn availability(&self) -> cordon_core::Availability {
            self.0.availability()
        }
        fn wrap(
            &self,
            cmd: &mut cordon_core::ChildCommand,
            policy: &cordon_core::SandboxPolicy,
        ) -> Result<cordon_core::WrapResources, cordon_core::WrapError> {
            let resources = self.0.wrap(cmd, policy)?;
            // SAFETY: raise() is async-signal-safe. It runs after the Linux
            // backend's hook, in the program process inside the sandbox
            // (its launcher and init wait for it).
            unsafe {
                cmd.pre_exec(|_| {
                    libc::raise(libc::SIGSTOP);
                    Ok(())
                });
            }
            Ok(resources)
        }
    }
    let mut cfg = config();
    cfg.setup_timeout = Duration::from_secs(1);
    let sp = Spawner::confined(Arc::new(StopsItself(LinuxBackend::new())), cfg);
    let marker = existing_scratch();
    let flag = marker.path().join("ran");
    chown_to_sandbox(marker.path());
    let (tx, rx) = std::sync::mpsc::channel();
    let spec = sh(&format!("echo x > {}", flag.display()));
    std::thread::spawn(move || {
        let rt = rt();
        let r = rt.block_on(async { sp.spawn(&spec).map(|_| ()) });
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .map_err(|_| "the spawn was still stopped after 60 s".to_string())?;
    let err = match r {
        Ok(()) => return Err("a stopped set-up was reported as started".into()),
        Err(e) => e,
    };
    ensure(err.contains("set-up did not finish"), || {
        format!("unclear error: {err}")
    })?;
    ensure(!flag.exists(), || "the program ran".into())?;
    // Nothing of the launch is left: no child of this process, live or
    // unreaped.
    let children: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .filter(|c| !c.trim().is_empty())
        .collect();
    ensure(children.is_empty(), || {
        format!("processes of the launch are left: {children:?}")
    })
}

/// A filesystem the scenario mounted on a dir of its own: unmounted when
/// dropped (detached, so nothing still in it keeps it), whatever the
/// scenario found.
struct OwnMount(std::ffi::CString);

impl OwnMount {
    /// Mounts a new `fstype` (`ramfs`, `tmpfs`: no device) on `dir`, its
    /// root mode 0777, so that what a sandbox could write there is
    /// decided by the backend, not by the mode.
    fn new(fstype: &std::ffi::CStr, dir: &Path) -> Result<OwnMount, String> {
        std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mounting a new filesystem on the test's own empty dir,
        // NUL-terminated strings that outlive the call.
        let r = unsafe {
            libc::mount(
                c"none".as_ptr(),
                c.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=0777".as_ptr().cast(),
            )
        };
        if r != 0 {
            return Err(format!(
                "cannot mount {fstype:?} on {} for the test: {}",
                dir.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(OwnMount(c))
    }
}

impl Drop for OwnMount {
    fn drop(&mut self) {
        // SAFETY: unmounting the test's own mount.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The mount points under `dir` in this process's mount table.
fn mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| Path::new(m).starts_with(dir))
        .map(str::to_string)
        .collect()
}

/// Every path under `dir` whose name starts with `ran`, with its owner.
fn markers_under(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if m.is_dir() {
                todo.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with("ran") {
                found.push((e.path(), m.uid()));
            }
        }
    }
    found
}

/// How a sandbox is given a host dir that outlives it (README "One uid per
/// sandbox"): a read-write grant, the caller's scratch dir, a kept
/// scratch made under the scratch base. Each program writes its marker
/// (`ran-…`) in that dir.
const WRITABLE_KINDS: [&str; 3] = ["rw-grant", "caller-scratch", "kept-scratch"];

fn writable_spawner_and_spec(kind: &str, dir: &Path) -> (Spawner, ChildSpec) {
    let mut cfg = config();
    let touch = |where_: String| sh(&format!("touch {where_}/ran-{kind}"));
    let spec = match kind {
        "rw-grant" => {
            cfg.read_write = vec![dir.to_path_buf()];
            touch(dir.display().to_string())
        }
        "caller-scratch" => touch("\"$HOME\"".into()).scratch(Scratch::Existing(dir.into())),
        _ => {
            cfg.scratch_base = dir.to_path_buf();
            touch("\"$HOME\"".into()).scratch(Scratch::FreshKept)
        }
    };
    (spawner_with(cfg), spec)
}

/// A root host writes a host dir that outlives the sandbox only through
/// an idmapped mount (what the sandbox creates is stored as the caller's,
/// never as its leased uid), so a dir on a filesystem that cannot be
/// idmapped is refused before anything runs, naming the dir. ramfs is
/// such a filesystem (no `FS_ALLOW_IDMAP` on Linux 6.18; like NFS), and
/// one root can mount for the test: a read-write grant, the caller's
/// scratch dir and a kept scratch on it are each refused at spawn, the
/// program never writes its marker there, and the test's mount table is
/// as it was. The control: the same three on a tmpfs (which can be
/// idmapped) run, and each marker is stored as the caller's (root).
/// Root only: another user's sandbox has the caller's uid and gets plain
/// binds, no idmapped mount.
pub(super) fn a_filesystem_without_idmapped_mounts_is_refused() -> Outcome {
    if !is_root() {
        return Err(
            "this scenario needs root, to mount ramfs (CI runs as root); another user's \
             sandbox gets no idmapped mount"
                .into(),
        );
    }
    let base = existing_scratch();
    // The sandbox's uid must reach the mounts.
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let base_path = base.path().canonicalize().map_err(|e| e.to_string())?;
    let (ram_dir, tmp_dir) = (base_path.join("ramfs"), base_path.join("tmpfs"));
    let ram = OwnMount::new(c"ramfs", &ram_dir)?;
    let tmp = OwnMount::new(c"tmpfs", &tmp_dir)?;
    let mounted = mounts_under(&base_path);
    let result = (|| {
        for kind in WRITABLE_KINDS {
            let (sp, spec) = writable_spawner_and_spec(kind, &ram_dir);
            let ran = rt().block_on(async {
                let mut child = sp.spawn(&spec)?;
                drop(child.stdin.take());
                Ok::<_, SpawnError>(child.wait().await)
            });
            match ran {
                Err(SpawnError::Wrap(e)) => {
                    let msg = e.to_string();
                    ensure(
                        msg.contains(&format!("`{}", ram_dir.display()))
                            && msg.contains("idmapped"),
                        || format!("{kind}: the refusal does not name the dir and why: {msg}"),
                    )?;
                }
                Err(e) => {
                    return Err(format!(
                        "{kind}: refused otherwise than by the backend: {e}"
                    ))
                }
                Ok(outcome) => {
                    return Err(format!(
                        "{kind} on ramfs was let through ({outcome:?}); what it wrote there, \
                         with its owner: {:?}",
                        markers_under(&ram_dir)
                    ))
                }
            }
        }
        let ran = markers_under(&ram_dir);
        ensure(ran.is_empty(), || {
            format!("a program ran on the ramfs: {ran:?}")
        })?;
        ensure(mounts_under(&base_path) == mounted, || {
            format!(
                "the refusals left the mount table changed: {:?}, was {mounted:?}",
                mounts_under(&base_path)
            )
        })?;
        // The control: the filesystem was all that refused them.
        for kind in WRITABLE_KINDS {
            let (sp, spec) = writable_spawner_and_spec(kind, &tmp_dir);
            let r = run_with(&sp, spec).map_err(|e| format!("control: {kind} on tmpfs: {e}"))?;
            ensure(r.outcome == ExitOutcome::Exited(0), || {
                format!("control: {kind} on tmpfs: {r}")
            })?;
        }
        let ran = markers_under(&tmp_dir);
        ensure(
            ran.len() == WRITABLE_KINDS.len() && ran.iter().all(|(_, uid)| *uid == 0),
            || format!("control: the markers on tmpfs, want three of root's: {ran:?}"),
        )?;
        println!(
            "note: refused on ramfs, naming {}; on tmpfs the markers {ran:?}",
            ram_dir.display()
        );
        Ok(())
    })();
    drop((ram, tmp));
    let left = mounts_under(&base_path);
    result?;
    ensure(left.is_empty(), || format!("mounts left: {left:?}"))
}
