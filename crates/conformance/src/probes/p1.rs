//! P1 — process isolation. The host starts a sacrificial process of the
//! *same uid as the sandbox* (so credentials alone would not protect it).
//! The child must not be able to:
//! - signal, ptrace, read the memory or `/proc` entries of it, or open a
//!   pidfd to it;
//! - change its rlimits (`prlimit`), priority, scheduler, CPU affinity or
//!   I/O class, or even learn it exists (`getpgid`, `kill(pid, 0)`,
//!   `stat("/proc/<pid>")` over a range of pids around it);
//! - connect to host UNIX sockets (abstract or pathname);
//! - use the host's SysV queue, segment and semaphore or POSIX queue, or
//!   leave IPC objects of its own behind (`p1/ipc.rs`);
//! - open the harness's terminal or gain a controlling terminal
//!   (`p1/tty.rs`);
//! - run as uid 0.
//!
//! The host verifies every effect it can see: while the child is held it
//! reads the sacrificial's tracer, nice value, limits, policy, affinity and
//! I/O priority, and the program's own controlling terminal and uids; after
//! it, the sacrificial is alive, the listeners received nothing, the IPC
//! objects and the pty are unchanged and nothing the child made outlived it.

pub(crate) mod host_user;
pub(crate) use host_user::sacrificial;
pub(crate) mod ipc;
mod tty;

use std::collections::BTreeMap;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use cordon_core::{CheckResult, ProbeStatus};

use crate::child::{self, errno, Reporter, HOST_PID_DENIED, PROC_PID_DENIED};
use crate::harness::{fail, pass, random_token, unreachable, verdict, Ctx, Hold};
use crate::inspect;

/// How many pids on each side of the sacrificial the child looks at.
const PID_WINDOW: i32 = 1024;

/// What the host can observe of the sacrificial process.
#[derive(Debug, PartialEq)]
struct ProcState {
    tracer: Option<String>,
    nice: Option<String>,
    policy: Option<String>,
    affinity: Option<String>,
    limits: Option<BTreeMap<String, inspect::Limit>>,
    ioprio: i64,
}

fn observe(pid: i32) -> ProcState {
    let status = inspect::status(pid).unwrap_or_default();
    ProcState {
        tracer: status.get("TracerPid").cloned(),
        nice: inspect::stat_field(pid, 19),
        policy: inspect::stat_field(pid, 41),
        affinity: status.get("Cpus_allowed_list").cloned(),
        limits: inspect::limits(pid).ok(),
        // SAFETY: ioprio_get(IOPRIO_WHO_PROCESS, pid) reads a value.
        ioprio: unsafe { libc::syscall(libc::SYS_ioprio_get, 1, pid) },
    }
}

/// The first CPU in a `Cpus_allowed_list` such as `0-3,6`, if it lists
/// more than one (with one CPU a change of affinity cannot be seen).
fn other_affinity(list: &str) -> Option<u32> {
    let single = !list.contains([',', '-']);
    if single {
        return None;
    }
    list.split([',', '-']).next()?.trim().parse().ok()
}

pub(crate) async fn host(ctx: &Ctx) -> Vec<CheckResult> {
    let mut checks = Vec::new();
    let sac_token = random_token();
    if let Err(e) = ctx.guard(&sac_token) {
        return vec![unreachable("sacrificial", e)];
    }
    // Its stdin and stdout are pipes of our own: it is told (and answers)
    // while the program is held, in `on_hold`, which cannot await.
    let (order_r, order_w) = match host_user::pipe() {
        Ok(p) => p,
        Err(e) => return vec![unreachable("sacrificial", e)],
    };
    let (answer_r, answer_w) = match host_user::pipe() {
        Ok(p) => p,
        Err(e) => return vec![unreachable("sacrificial", e)],
    };
    let mut sacrificial = tokio::process::Command::new(&ctx.exe);
    sacrificial
        .arg(child::PROBE_ARG)
        .arg("sacrificial")
        .arg(format!("token={sac_token}"))
        .env_clear()
        .current_dir("/")
        .kill_on_drop(true)
        .stdin(std::process::Stdio::from(order_r))
        .stdout(std::process::Stdio::from(answer_w));
    let mut sacrificial = match sacrificial.spawn() {
        Ok(c) => c,
        Err(e) => return vec![unreachable("sacrificial", format!("cannot start: {e}"))],
    };
    let pid = sacrificial.id().unwrap_or(0) as i32;
    let ipc_line = host_user::read_line(&answer_r, ctx.timeout).unwrap_or_default();
    let host_ipc = ipc::HostIpc::parse(&ipc_line, &sac_token);
    let before = observe(pid);

    let abstract_name = format!("cordon-p1-{}", random_token());
    let abstract_listener = SocketAddr::from_abstract_name(abstract_name.as_bytes())
        .and_then(|a| UnixListener::bind_addr(&a));
    let path = ctx.root.path().join("p1.sock");
    let path_listener = UnixListener::bind(&path);
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777));
    }
    let pty = tty::HostPty::open();

    let mut args = vec![
        ("pid".to_string(), pid.to_string()),
        (
            "window".to_string(),
            format!("{}-{}", (pid - PID_WINDOW).max(2), pid + PID_WINDOW),
        ),
        ("abstract".to_string(), abstract_name),
        ("unix_path".to_string(), path.display().to_string()),
    ];
    if let Some(cpu) = before.affinity.as_deref().and_then(other_affinity) {
        args.push(("cpu".to_string(), cpu.to_string()));
    }
    match &pty {
        Ok(p) => args.push(("pty".to_string(), p.slave.display().to_string())),
        Err(e) => checks.push(unreachable("host-pty", format!("cannot open a pty: {e}"))),
    }
    args.extend(host_ipc.args());

    args.push((
        "hostname".to_string(),
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim()
            .to_string(),
    ));
    // The program's ids, learnt at `ready` (the sandbox's own uid may be
    // chosen per sandbox).
    let mut program = None;
    let mut order_w = Some(std::fs::File::from(order_w));
    let mut on_hold = |h: &Hold<'_>| -> Vec<CheckResult> {
        if h.label == "ready" {
            return host_user::at_ready(ctx, h, pid, &mut order_w, &answer_r, &mut program);
        }
        let mut out = vec![tty::controlling_tty(h.pid)];
        out.push(match h.pid.and_then(inspect::status) {
            Some(st) => not_root(&st),
            None => unreachable("not-root", "cannot read the program's status"),
        });
        out.extend(sacrificial_unchanged(&before, &observe(pid)));
        out
    };
    let run = ctx.run_held("P1", &args, &mut on_hold).await;
    let mut expected_at_ready = vec!["control-sacrificial-has-program-uid", "own-uts-namespace"];
    if ctx.host_uid == 0 {
        expected_at_ready.extend(host_user::ATTEMPTS.iter().map(|(_, n)| *n));
    }
    checks.extend(run.missed_hold("ready", &expected_at_ready));
    checks.extend(run.missed_hold(
        "attacked",
        &[
            "controlling-tty",
            "not-root",
            "host-not-traced",
            "host-sacrificial-priority",
            "host-sacrificial-rlimits",
            "host-sacrificial-scheduler",
            "host-sacrificial-ioprio",
        ],
    ));

    // A signal takes effect asynchronously, but it is pending from the
    // moment it is sent: a live sacrificial with no SIGKILL pending was
    // not killed, whatever the load.
    checks.push(match sacrificial.try_wait() {
        Ok(Some(status)) => fail(
            "host-process-alive",
            format!("the child killed a host process ({status})"),
        ),
        Ok(None) if killed_pending(pid) => fail(
            "host-process-alive",
            "the child sent the host process a SIGKILL (pending)",
        ),
        Ok(None) => pass(
            "host-process-alive",
            "the sacrificial process is alive, no SIGKILL pending",
        ),
        Err(e) => unreachable("host-process-alive", e.to_string()),
    });
    for (name, listener) in [
        ("host-abstract-listener", abstract_listener),
        ("host-pathname-listener", path_listener),
    ] {
        match listener {
            Ok(l) => {
                let _ = l.set_nonblocking(true);
                match l.accept() {
                    Ok(_) => checks.push(fail(
                        name,
                        "the listener accepted a connection from the child",
                    )),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        checks.push(pass(name, "no connection arrived"))
                    }
                    Err(e) => checks.push(unreachable(name, e.to_string())),
                }
            }
            Err(e) => checks.push(unreachable(name, format!("cannot listen: {e}"))),
        }
    }
    if let Ok(p) = &pty {
        checks.push(p.verify());
    }
    checks.extend(host_ipc.verify());
    checks.push(if run.token.is_empty() {
        unreachable("host-ipc-left-behind", "the child never started")
    } else {
        ipc::left_behind(&run.token, program.unwrap_or(ctx.sandbox), ctx.host_uid)
    });
    let _ = sacrificial.kill().await;
    drop(host_ipc);
    let _ = std::fs::remove_file(&path);
    checks.extend(run.into_checks());
    checks
}

/// Whether `pid` has a SIGKILL pending (sent, not yet acted on), or is a
/// zombie or gone already.
fn killed_pending(pid: i32) -> bool {
    !inspect::alive(pid) || inspect::sigkill_pending(pid)
}

/// The program's uids and gids, as the host sees them: none is 0.
fn not_root(status: &BTreeMap<String, String>) -> CheckResult {
    let uids = status.get("Uid").cloned().unwrap_or_default();
    let gids = status.get("Gid").cloned().unwrap_or_default();
    let root = uids
        .split_whitespace()
        .chain(gids.split_whitespace())
        .any(|v| v == "0");
    if uids.is_empty() {
        return unreachable("not-root", "no Uid line in the program's status");
    }
    verdict(
        "not-root",
        !root,
        format!("program uids {uids}, gids {gids} (real, effective, saved, fs)"),
    )
}

/// The sacrificial as it was before the child, field by field.
fn sacrificial_unchanged(before: &ProcState, now: &ProcState) -> Vec<CheckResult> {
    let same = |name: &str, what: &str, a: String, b: String| {
        verdict(
            name,
            a == b,
            if a == b {
                format!("{what} unchanged ({a})")
            } else {
                format!("the child changed the host process's {what}: {a} -> {b}")
            },
        )
    };
    let mut out = vec![
        verdict(
            "host-not-traced",
            now.tracer.as_deref() == Some("0"),
            format!("TracerPid of the host process: {:?}", now.tracer),
        ),
        same(
            "host-sacrificial-priority",
            "nice value",
            format!("{:?}", before.nice),
            format!("{:?}", now.nice),
        ),
        same(
            "host-sacrificial-scheduler",
            "scheduling policy",
            format!("{:?}", before.policy),
            format!("{:?}", now.policy),
        ),
        same(
            "host-sacrificial-ioprio",
            "I/O priority",
            before.ioprio.to_string(),
            now.ioprio.to_string(),
        ),
    ];
    let changed_limits: Vec<String> = match (&before.limits, &now.limits) {
        (Some(a), Some(b)) => a
            .iter()
            .filter(|(k, v)| b.get(*k) != Some(v))
            .map(|(k, v)| {
                format!(
                    "{k} {v} -> {}",
                    b.get(k).map(|l| l.to_string()).unwrap_or_default()
                )
            })
            .collect(),
        _ => vec!["cannot read /proc/<pid>/limits".to_string()],
    };
    out.push(verdict(
        "host-sacrificial-rlimits",
        changed_limits.is_empty(),
        if changed_limits.is_empty() {
            "rlimits unchanged".to_string()
        } else {
            format!(
                "the child changed the host process's rlimits: {}",
                changed_limits.join(", ")
            )
        },
    ));
    // With one CPU a change of affinity cannot be seen: no check then.
    if before
        .affinity
        .as_deref()
        .and_then(other_affinity)
        .is_some()
    {
        out.push(same(
            "host-sacrificial-affinity",
            "CPU affinity",
            format!("{:?}", before.affinity),
            format!("{:?}", now.affinity),
        ));
    }
    out
}

/// Runs one call aimed at the sacrificial pid and reports it.
fn aimed(r: &mut Reporter, name: &str, what: &str, rc: i64) {
    r.forbidden(
        name,
        if rc >= 0 {
            Ok(what.to_string())
        } else {
            Err(errno())
        },
        &HOST_PID_DENIED,
    );
}

pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let pid: i32 = args.get("pid").and_then(|p| p.parse().ok()).unwrap_or(0);
    if pid <= 1 {
        r.check("args", ProbeStatus::Unreachable, "no sacrificial pid given");
        return;
    }
    // The host learns our ids and gives them to the sacrificial first.
    r.hold("ready");
    host_user::hostname(r, args.get("hostname"));
    // SAFETY: PTRACE_ATTACH on the sacrificial pid; detached after the hold.
    let attached = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) } == 0;
    aimed(
        r,
        "ptrace-attach",
        "attached",
        if attached { 0 } else { -1 },
    );

    let mut buf = [0u8; 8];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: 0x10000 as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: local iovec points into buf.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    let e = errno();
    if n >= 0 || e == libc::EFAULT {
        r.check(
            "process-vm-readv",
            ProbeStatus::Fail,
            "reached the host process's memory",
        );
    } else {
        r.forbidden("process-vm-readv", Err(e), &HOST_PID_DENIED);
    }
    r.forbidden(
        "proc-environ",
        child::read_file(&format!("/proc/{pid}/environ")),
        &PROC_PID_DENIED,
    );
    r.forbidden(
        "proc-mem",
        child::open(&format!("/proc/{pid}/mem"), libc::O_RDONLY).map(|fd| {
            child::close(fd);
            "opened".into()
        }),
        &PROC_PID_DENIED,
    );
    // SAFETY: pidfd_open on an integer; closed if it succeeded.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd >= 0 {
        child::close(pidfd as i32);
    }
    aimed(r, "pidfd-open", "opened a pidfd to the host process", pidfd);
    // SAFETY: getpgid only reads.
    let pg = unsafe { libc::getpgid(pid) };
    aimed(
        r,
        "getpgid",
        &format!("learnt its process group {pg}"),
        pg as i64,
    );
    enumerate(r, pid, args.get("window"));
    control_calls(r, pid, args.get("cpu"));

    let denied = [libc::EPERM, libc::EACCES];
    if let Some(name) = args.get("abstract") {
        r.forbidden(
            "abstract-unix-connect",
            connect_unix(name.as_bytes(), true),
            &denied,
        );
    }
    if let Some(path) = args.get("unix_path") {
        r.forbidden(
            "pathname-unix-connect",
            connect_unix(path.as_bytes(), false),
            &denied,
        );
    }
    ipc::attack(r, args);
    let pty = tty::attack(r, args.get("pty"));

    // The host now looks at the sacrificial and at us.
    r.hold("attacked");
    if let Some(fd) = pty {
        child::close(fd);
    }
    if attached {
        // SAFETY: detaching what we attached.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
    }

    // Signals last: a breach of SIGKILL ends the sacrificial process, which
    // would make the checks above inconclusive.
    for (name, sig) in [
        ("signal-0", 0),
        ("signal-cont", libc::SIGCONT),
        ("signal-kill", libc::SIGKILL),
    ] {
        // SAFETY: kill has no memory effects.
        let rc = unsafe { libc::kill(pid, sig) };
        aimed(r, name, &format!("kill({pid}, {sig})"), rc as i64);
    }
    if let Some(t) = args.get("token") {
        ipc::leave_own(r, t);
    }
}

/// `prlimit`, `setpriority`, `sched_setscheduler`, `sched_setaffinity` and
/// `ioprio_set` on the sacrificial pid. Each change is harmless to a
/// sleeping process, and the host checks none took effect.
fn control_calls(r: &mut Reporter, pid: i32, cpu: Option<&String>) {
    for (name, resource, value) in [
        ("prlimit-cpu", libc::RLIMIT_CPU, 1),
        ("prlimit-nofile", libc::RLIMIT_NOFILE, 4),
    ] {
        let new = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: prlimit with a valid new limit and no old-limit buffer.
        let rc = unsafe { libc::prlimit(pid, resource, &new, std::ptr::null_mut()) };
        aimed(r, name, &format!("set its limit to {value}"), rc as i64);
    }
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, pid as libc::id_t, 19) };
    aimed(r, "setpriority", "set its nice value to 19", rc as i64);
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: param is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(pid, libc::SCHED_IDLE, &param) };
    aimed(r, "sched-setscheduler", "made it SCHED_IDLE", rc as i64);
    let cpu: usize = cpu.and_then(|c| c.parse().ok()).unwrap_or(0);
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    aimed(
        r,
        "sched-setaffinity",
        &format!("pinned it to CPU {cpu}"),
        rc as i64,
    );
    // IOPRIO_WHO_PROCESS, class IDLE (3) << IOPRIO_CLASS_SHIFT (13).
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_set, 1, pid, 3 << 13) };
    aimed(r, "ioprio-set", "made its I/O class idle", rc);
}

/// Counts the pids of `window` (`lo-hi`) that the child can tell exist:
/// `getpgid` works, `kill(pid, 0)` works or says `EPERM` (which also means
/// it exists), or `/proc/<pid>` can be `stat`ed. Signal 0 sends nothing.
fn enumerate(r: &mut Reporter, sacrificial: i32, window: Option<&String>) {
    const NAME: &str = "enumerate-host-pids";
    let Some((lo, hi)) = window
        .and_then(|w| w.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<i32>().ok()?, b.parse::<i32>().ok()?)))
    else {
        r.check(NAME, ProbeStatus::Unreachable, "no pid window given");
        return;
    };
    let mut seen = 0;
    let mut sacrificial_by = Vec::new();
    for p in lo..=hi {
        // SAFETY: getpgid and kill(p, 0) only query.
        let by_pgid = unsafe { libc::getpgid(p) } >= 0;
        // SAFETY: as above (signal 0 sends nothing).
        let by_kill = unsafe { libc::kill(p, 0) } == 0 || errno() == libc::EPERM;
        let by_proc = std::fs::symlink_metadata(format!("/proc/{p}")).is_ok();
        if by_pgid || by_kill || by_proc {
            seen += 1;
        }
        if p == sacrificial {
            for (hit, how) in [
                (by_pgid, "getpgid"),
                (by_kill, "kill(pid, 0)"),
                (by_proc, "stat /proc/<pid>"),
            ] {
                if hit {
                    sacrificial_by.push(how);
                }
            }
        }
    }
    if sacrificial_by.is_empty() {
        r.check(
            NAME,
            ProbeStatus::Pass,
            format!("the host process is invisible; {seen} pids of {lo}..{hi} are visible"),
        );
    } else {
        r.check(
            NAME,
            ProbeStatus::Fail,
            format!(
                "sees the host process (by {}) and {seen} pids of {lo}..{hi}",
                sacrificial_by.join(", ")
            ),
        );
    }
}

/// Connects an AF_UNIX stream socket to a pathname or abstract address.
fn connect_unix(name: &[u8], abstract_ns: bool) -> Result<String, i32> {
    // SAFETY: plain socket calls on a zeroed sockaddr_un we fill in bounds.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let (addr, len) = unix_addr(name, abstract_ns);
        let rc = libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len);
        let e = errno();
        libc::close(fd);
        if rc == 0 {
            Ok("connected".into())
        } else {
            Err(e)
        }
    }
}

/// A `sockaddr_un` for a pathname or abstract name, and its length.
pub(crate) fn unix_addr(name: &[u8], abstract_ns: bool) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let offset = usize::from(abstract_ns);
    let n = name.len().min(addr.sun_path.len() - 1 - offset);
    for (i, b) in name[..n].iter().enumerate() {
        addr.sun_path[i + offset] = *b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + offset + n + usize::from(!abstract_ns);
    (addr, len as libc::socklen_t)
}
