//! The Linux backend's records of what a sandbox refused
//! (`SandboxPolicy::explain`), each from the layer that refused it:
//!
//! - **system calls**: the sandbox installs its filter's notifying variant
//!   (`seccomp/emulate.rs`) with a listener, which the launcher sends here
//!   (`fd_pass.rs`); [`SyscallWatch`]'s thread receives each refused call,
//!   records it and answers with the original filter's errno. The listener
//!   belongs to this sandbox's filter alone, so every record is this
//!   sandbox's, whatever runs beside it, for every caller;
//! - **network**: the egress proxy's refusals (`net.rs`);
//! - **files**: Landlock's audit records, where this caller may read them
//!   (`audit.rs`);
//! - **limits**: the cgroup's OOM count (`cgroup.rs`), the forks refused
//!   at the process limit (`cgroup/pids.rs`) and the runner's outcome
//!   (core).
//!
//! A source this caller cannot use gives one line saying so, with why.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use cordon_core::explain::{DenialKind, DenialLog, Remedy};

use super::seccomp::{self, emulate, Program};

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`.
const SYNC_WAKE_UP: libc::c_ulong = 1;

/// What the network refusals' remedy depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetMode {
    /// No network at all (`Network::Deny`).
    Denied,
    /// TCP through the egress proxy only (`Network::Allow`).
    Allowlist,
}

/// A thread recording one sandbox's denials, stopped by writing its
/// eventfd and joined by [`Worker::halt`] (or when dropped). Shared by the
/// syscall and the audit records (`audit.rs`).
#[derive(Debug)]
pub(crate) struct Worker {
    stop: Arc<OwnedFd>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Worker {
    /// Runs `f` on a thread named `name`, given the stop eventfd (readable
    /// once [`halt`](Self::halt) is called).
    pub(crate) fn spawn(
        name: &str,
        f: impl FnOnce(&OwnedFd) + Send + 'static,
    ) -> std::io::Result<Worker> {
        // SAFETY: eventfd creates a new fd.
        let stop = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })?;
        // SAFETY: just created, owned here.
        let stop = Arc::new(unsafe { OwnedFd::from_raw_fd(stop) });
        let theirs = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || f(&theirs))?;
        Ok(Worker {
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops the thread and waits for it.
    pub(crate) fn halt(&self) {
        let one = 1u64;
        // SAFETY: an 8-byte write to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.halt();
    }
}

/// What explain mode records of one sandbox beside the egress proxy's
/// refusals (`net.rs`).
#[derive(Debug)]
pub(crate) struct Recorders {
    pub(crate) syscalls: SyscallWatch,
    /// File denials, or why there is no record of them.
    pub(crate) files: Result<super::audit::AuditWatch, String>,
    /// With a process limit: the forks refused at it, or why they are not
    /// observable.
    pub(crate) forks: Option<Result<super::cgroup::pids::ForkCount, String>>,
    /// Why a limit's refusals leave no record here (for the explanation).
    pub(crate) unobservable: Vec<String>,
}

impl Recorders {
    /// The pids cgroup the program joins, if there is one.
    pub(crate) fn fork_count(&self) -> Option<&super::cgroup::pids::ForkCount> {
        self.forks.as_ref()?.as_ref().ok()
    }

    /// Every process of the sandbox is gone: moves each record into `log`.
    pub(crate) fn finish(&self, log: &DenialLog) {
        self.syscalls.finish(log);
        match &self.files {
            Ok(watch) => watch.finish(log),
            Err(why) => log.unobservable(why.clone()),
        }
        match &self.forks {
            Some(Ok(count)) => count.finish(log),
            Some(Err(why)) => log.unobservable(why.clone()),
            None => {}
        }
        for why in &self.unobservable {
            log.unobservable(why.clone());
        }
    }
}

/// One sandbox's refused system calls, recorded by a thread that answers
/// its filter's notifications; stopped and joined when finished or
/// dropped.
#[derive(Debug)]
pub(crate) struct SyscallWatch {
    log: Arc<DenialLog>,
    worker: Worker,
    /// The filter has more programs than its last (the deny-list layer
    /// set, for tests and benchmarks: the gate refuses it), whose
    /// refusals are not recorded.
    partial: bool,
}

impl SyscallWatch {
    /// Starts the watch for a sandbox whose filter (as it would be without
    /// explain mode) is `filter`; returns it and the launcher's end of the
    /// socketpair the listener comes over (for the plan). Started here, in
    /// `wrap`, before tier landlock counts the caller's tasks into the
    /// sandbox's `RLIMIT_NPROC`: the thread is one of them for the
    /// sandbox's whole life, so the count stays exact.
    pub(crate) fn start(
        filter: Arc<Vec<Program>>,
        net: NetMode,
    ) -> std::io::Result<(Self, OwnedFd)> {
        let mut pair = [0; 2];
        // SAFETY: socketpair into a local array.
        check(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        })?;
        // SAFETY: both fds were just created and are owned here.
        let (receive, send) =
            unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        let log = Arc::new(DenialLog::new());
        let theirs = Arc::clone(&log);
        let partial = filter.len() > 1;
        let worker = Worker::spawn("cordon-explain", move |stop| {
            watch(&receive, stop, &filter, net, &theirs)
        })?;
        Ok((
            SyscallWatch {
                log,
                worker,
                partial,
            },
            send,
        ))
    }

    /// Stops the thread (every process of the sandbox is gone) and moves
    /// what it recorded into `log`.
    pub(crate) fn finish(&self, log: &DenialLog) {
        self.worker.halt();
        log.absorb(&self.log);
        if self.partial {
            log.unobservable(
                "system calls: only the seccomp filter's last program notifies; the refusals of \
                 the programs before it (this layer set's deny-list) are not recorded",
            );
        }
    }
}

/// The thread: waits for the listener, then answers each notification
/// with the original filter's errno (never letting the call run), until
/// stopped or until no process uses the filter any more.
fn watch(receive: &OwnedFd, stop: &OwnedFd, filter: &[Program], net: NetMode, log: &DenialLog) {
    let Some(last) = filter.last() else { return };
    if !readable(receive.as_raw_fd(), stop.as_raw_fd()) {
        return;
    }
    let listener = match super::fd_pass::receive_fd(receive) {
        Ok(l) => l,
        Err(e) => {
            log.unobservable(format!(
                "system calls: the sandbox's seccomp listener did not arrive ({e}); refused \
                 calls failed with ENOSYS and were not recorded"
            ));
            return;
        }
    };
    let fd = listener.as_raw_fd();
    // The program waits for each answer: wake this thread on the caller's
    // CPU (Linux 6.6+; without it, each refusal costs two cross-CPU
    // wake-ups). Only speed depends on it.
    // SAFETY: an ioctl on our listener with an integer argument.
    unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, SYNC_WAKE_UP) };
    while readable(fd, stop.as_raw_fd()) {
        // SAFETY: the kernel requires a zeroed struct and fills it.
        let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: NOTIF_RECV into a struct of the size it encodes.
        if unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut req) } < 0 {
            // ENOENT: the caller was killed before we read it.
            continue;
        }
        let refused = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let errno = emulate::errno_of(emulate::run(last, &req.data).unwrap_or(refused));
        record(log, &req.data, net);
        let resp = libc::seccomp_notif_resp {
            id: req.id,
            val: 0,
            error: -errno,
            flags: 0,
        };
        // SAFETY: NOTIF_SEND of a struct of the size it encodes. ENOENT
        // (the caller is gone) needs nothing.
        unsafe { libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
    }
}

/// Waits until `fd` is readable (true) or `stop` was written, `fd` hung
/// up (every process of the filter is gone) or poll failed (false).
fn readable(fd: libc::c_int, stop: libc::c_int) -> bool {
    loop {
        let mut fds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll on two fds we hold.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return false;
        }
        return fds[1].revents == 0 && fds[0].revents & libc::POLLIN != 0;
    }
}

/// In the program, the last step before its exec (instead of
/// `seccomp::install`): installs `programs`, the last one with a
/// listener, sends the listener to the host on `send` and closes it, so
/// that nothing of the sandbox holds it (whoever holds it decides the
/// refused calls); then `guard` (`seccomp/emulate.rs`), which refuses
/// the sandbox a listener of its own. Async-signal-safe: raw syscalls on
/// prepared data.
pub(crate) fn install_notifying(
    programs: &[Program],
    guard: &Program,
    send: libc::c_int,
) -> std::io::Result<()> {
    let Some((last, first)) = programs.split_last() else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    seccomp::install(first)?;
    let listener =
        seccomp::install_one(last, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)? as libc::c_int;
    let sent = super::fd_pass::send_fd(send, listener);
    // SAFETY: closing the listener this function got and the plan's send
    // end (close-on-exec anyway; closed now so nothing can use them).
    unsafe {
        libc::close(listener);
        libc::close(send);
    }
    sent?;
    seccomp::install_one(guard, 0).map(drop)
}

/// One refused call, described.
fn record(log: &DenialLog, data: &libc::seccomp_data, net: NetMode) {
    let nr = data.nr as u32;
    let name = names().get(&nr).copied();
    if nr as i64 == libc::SYS_socket {
        let (family, kind) = (data.args[0] as i32, data.args[1] as i32 & 0xf);
        let family_name = match family {
            libc::AF_INET => "AF_INET",
            libc::AF_INET6 => "AF_INET6",
            libc::AF_UNIX => "AF_UNIX",
            libc::AF_NETLINK => "AF_NETLINK",
            libc::AF_PACKET => "AF_PACKET",
            _ => "",
        };
        let kind_name = match kind {
            libc::SOCK_STREAM => "SOCK_STREAM",
            libc::SOCK_DGRAM => "SOCK_DGRAM",
            libc::SOCK_RAW => "SOCK_RAW",
            _ => "",
        };
        let object = format!(
            "{} {}",
            if family_name.is_empty() {
                family.to_string()
            } else {
                family_name.into()
            },
            if kind_name.is_empty() {
                kind.to_string()
            } else {
                kind_name.into()
            },
        );
        let inet = family == libc::AF_INET || family == libc::AF_INET6;
        let remedy = match (inet, kind, net) {
            (true, libc::SOCK_STREAM, NetMode::Denied) => Remedy::AllowNetwork,
            _ => Remedy::None,
        };
        let kind = if inet {
            DenialKind::Network
        } else {
            DenialKind::Syscall
        };
        log.record(kind, &object, "socket", remedy);
        return;
    }
    let object = match name {
        Some(n) => n.to_string(),
        None => format!("syscall {nr}"),
    };
    log.record(DenialKind::Syscall, &object, "syscall", Remedy::None);
}

/// Syscall numbers to names, from the filters' own tables.
fn names() -> &'static HashMap<u32, &'static str> {
    static NAMES: OnceLock<HashMap<u32, &'static str>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut m = HashMap::new();
        for t in [
            seccomp::Tables::own_network(),
            seccomp::landlock_tier::tables(true),
        ] {
            let listed = t
                .allowed
                .iter()
                .chain(&t.denied)
                .chain(t.checked.iter().map(|c| &c.sys));
            for s in listed {
                m.insert(s.nr as u32, s.name());
            }
        }
        m
    })
}

fn check(r: libc::c_int) -> std::io::Result<libc::c_int> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
