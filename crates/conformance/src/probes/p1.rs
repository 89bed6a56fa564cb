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

mod checks;
mod child_side;
pub(crate) mod host_user;
pub(crate) mod ipc;
mod tty;

use std::collections::BTreeMap;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use cordon_core::{CheckResult, Evidence, ProbeId};

use crate::child::{self, Reporter};
use crate::harness::{fail, pass, random_token, unreachable, verdict, ProbeContext, Hold};
use crate::inspect;
use checks::{CHECKS, OTHER_USER};
use child_side::child;
pub(crate) use child_side::unix_addr;
use crate::registry::{manifest, HostConditions, Manifest, Probe, ProbeArgs};

/// P1 in the registry (`probes/mod.rs`).
pub(crate) struct P1;

#[async_trait::async_trait]
impl Probe for P1 {
    fn id(&self) -> ProbeId {
        ProbeId::P1
    }

    fn title(&self) -> &'static str {
        "Process isolation"
    }

    fn checks(&self, host: &HostConditions) -> Manifest {
        let mut m = manifest(CHECKS);
        if host.as_root {
            m.extend(manifest(OTHER_USER));
        }
        if host.several_cpus {
            m.insert("host-sacrificial-affinity".into(), Evidence::Host);
        }
        m
    }

    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
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
            .arg("P1-sacrificial")
            .arg(format!("token={sac_token}"))
            .env_clear()
            .current_dir("/")
            .kill_on_drop(true)
            .stdin(std::process::Stdio::from(order_r))
            .stdout(std::process::Stdio::from(answer_w));
        // The staged probe child may still be open for writing in a child
        // another thread forked while it was copied, until that child's
        // exec (`ETXTBSY`): as the core's spawn path does, wait it out.
        let mut tries = 0;
        let mut sacrificial = loop {
            match sacrificial.spawn() {
                Ok(c) => break c,
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                Err(e) => return vec![unreachable("sacrificial", format!("cannot start: {e}"))],
            }
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

    fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
        child(r, args)
    }

    fn helper(&self, name: &str, args: &ProbeArgs) -> Option<i32> {
        match name {
            // A host process that takes the program's own ids (`host_user.rs`).
            "sacrificial" => {
                host_user::sacrificial(args);
                Some(0)
            }
            // The attacks of a host process of another uid (`host_user.rs`).
            "reach" => Some(host_user::reach(args)),
            _ => None,
        }
    }
}

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
