//! P1 — process isolation: no signal, ptrace, memory or `/proc` access to a
//! host process; no connect to host UNIX sockets (abstract or pathname); no
//! controlling terminal; not uid 0 when the host is root.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use cordon_core::{CheckResult, ProbeStatus};

use crate::child::{self, errno, Reporter};
use crate::harness::{fail, pass, random_token, unreachable, Ctx};

pub(crate) async fn host(ctx: &Ctx) -> Vec<CheckResult> {
    let mut checks = Vec::new();
    // The sacrificial process runs as the uid a root host's sandbox uses,
    // so that file-permission rules alone would not protect it.
    let mut sacrificial = tokio::process::Command::new(&ctx.exe);
    sacrificial
        .arg(child::PROBE_ARG)
        .arg("sleep")
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    if ctx.host_uid == 0 {
        sacrificial.uid(65534).gid(65534);
    }
    let mut sacrificial = match sacrificial.spawn() {
        Ok(c) => c,
        Err(e) => return vec![unreachable("sacrificial", format!("cannot start: {e}"))],
    };
    let pid = sacrificial.id().unwrap_or(0);

    let abstract_name = format!("cordon-p1-{}", random_token());
    let abstract_listener = SocketAddr::from_abstract_name(abstract_name.as_bytes())
        .and_then(|a| UnixListener::bind_addr(&a));
    let path = ctx.root.path().join("p1.sock");
    let path_listener = UnixListener::bind(&path);
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777));
    }

    let run = ctx
        .run(
            "P1",
            &[
                ("pid".into(), pid.to_string()),
                ("abstract".into(), abstract_name),
                ("unix_path".into(), path.display().to_string()),
            ],
        )
        .await;

    match sacrificial.try_wait() {
        Ok(None) => checks.push(pass("host-process-alive", "sacrificial process survived")),
        Ok(Some(status)) => checks.push(fail(
            "host-process-alive",
            format!("the child killed a host process ({status})"),
        )),
        Err(e) => checks.push(unreachable("host-process-alive", e.to_string())),
    }
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
    if ctx.host_uid == 0 {
        match run.marker_owner {
            Some(0) => checks.push(fail("not-root", "the child's files are owned by uid 0")),
            Some(uid) => checks.push(pass("not-root", format!("child runs as uid {uid}"))),
            None => checks.push(unreachable("not-root", "the child left no uid marker")),
        }
    }
    let _ = sacrificial.kill().await;
    let _ = std::fs::remove_file(&path);
    checks.extend(run.into_checks());
    checks
}

pub(crate) fn child(r: &mut Reporter, args: &std::collections::BTreeMap<String, String>) {
    let pid: i32 = args.get("pid").and_then(|p| p.parse().ok()).unwrap_or(0);
    if pid <= 1 {
        r.check("args", ProbeStatus::Unreachable, "no sacrificial pid given");
        return;
    }
    let denied = [libc::EPERM, libc::EACCES];
    // SAFETY: PTRACE_ATTACH on a pid; detached again if it succeeded.
    let rc = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) };
    if rc == 0 {
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
    }
    r.forbidden(
        "ptrace-attach",
        if rc == 0 {
            Ok("attached".into())
        } else {
            Err(errno())
        },
        &denied,
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
        r.forbidden("process-vm-readv", Err(e), &[libc::EPERM, libc::EACCES]);
    }
    r.forbidden(
        "proc-environ",
        child::read_file(&format!("/proc/{pid}/environ")),
        &denied,
    );
    r.forbidden(
        "proc-mem",
        child::open(&format!("/proc/{pid}/mem"), libc::O_RDONLY).map(|fd| {
            child::close(fd);
            "opened".into()
        }),
        &denied,
    );
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
    r.forbidden(
        "controlling-tty",
        child::open("/dev/tty", libc::O_RDWR).map(|fd| {
            child::close(fd);
            "opened /dev/tty".into()
        }),
        &[libc::ENXIO, libc::EACCES, libc::EPERM],
    );
    // Signals last: a breach of SIGKILL ends the sacrificial process, which
    // would make the checks above inconclusive.
    for (name, sig) in [
        ("signal-0", 0),
        ("signal-cont", libc::SIGCONT),
        ("signal-kill", libc::SIGKILL),
    ] {
        // SAFETY: kill has no memory effects.
        let rc = unsafe { libc::kill(pid, sig) };
        r.forbidden(
            name,
            if rc == 0 {
                Ok(format!("kill({pid}, {sig})"))
            } else {
                Err(errno())
            },
            &denied,
        );
    }
    // The host checks who owns this file.
    let _ = std::fs::write("uid-marker", b"");
    // SAFETY: getuid cannot fail.
    r.info("uid", unsafe { libc::getuid() });
}

/// Connects an AF_UNIX stream socket to a pathname or abstract address.
fn connect_unix(name: &[u8], abstract_ns: bool) -> Result<String, i32> {
    // SAFETY: plain socket calls on a zeroed sockaddr_un we fill in bounds.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let offset = usize::from(abstract_ns);
        let n = name.len().min(addr.sun_path.len() - 1 - offset);
        for (i, b) in name[..n].iter().enumerate() {
            addr.sun_path[i + offset] = *b as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + offset + n + usize::from(!abstract_ns);
        let rc = libc::connect(
            fd,
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        );
        let e = errno();
        libc::close(fd);
        if rc == 0 {
            Ok("connected".into())
        } else {
            Err(e)
        }
    }
}
