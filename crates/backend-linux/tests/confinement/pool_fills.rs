//! The pools of the inventory (README "Kernel pools shared beyond the
//! sandbox") that run in a sandbox and have no scenario of their own: for
//! each, one sandbox takes all it can and holds it, and meanwhile the host
//! and a second sandbox each take one. The scenario checks the bound the
//! inventory states for the tier and the caller (a quota that stopped the
//! fill, a limit), and that neither the host nor the second sandbox was
//! refused, except where the inventory says the caller's uid's count is
//! shared (descriptors in flight on an unprivileged host; epoll watches
//! as another user, where the host first fills its uid's count but for a
//! share the sandbox then takes).

use std::os::fd::{FromRawFd, OwnedFd};

use super::super::own_uid::{helper_copy, start_held, without};
use super::super::*;
use super::{errno, HELPER};

/// The pools, by the name their acts take (`fill-<pool>`, `take-<pool>`).
const POOLS: [&str; 8] = [
    "inotify-watches",
    "open-files",
    "fds-in-flight",
    "epoll-watches",
    "unix-buffers",
    "locked-memory",
    "file-locks",
    "mq-bytes",
];

/// The memory limit the AF_UNIX buffer and epoll fills run under: a root
/// host's cgroup charges queued socket data and epoll watches to the
/// sandbox, so each fill, which stops by itself at its cap, is killed
/// first (120 pairs at the kernel's default `wmem_max` queue about 50 MB).
const FILL_LIMIT: u64 = 32 << 20;
/// Where the epoll fill stops by itself (a host without a cgroup for the
/// sandbox pays about 200 bytes of kernel memory per watch, for a
/// moment).
const EPOLL_CAP: u64 = 500_000;
/// Where the AF_UNIX buffer fill stops by itself (a host without a cgroup
/// for the sandbox pays this much kernel memory for a moment).
const UNIX_CAP: u64 = 256 << 20;
/// `RLIMIT_MEMLOCK` in a sandbox (README "Kernel quotas").
const MEMLOCK: u64 = 8 << 20;
/// The runner's default `open_files` (`Limits::default_ceilings`).
const OPEN_FILES: u64 = 256;
/// The most descriptors one `SCM_RIGHTS` message carries.
const SCM_MAX_FD: u64 = 253;
/// The inotify watch quota of a sandbox's own user namespace.
const INOTIFY_WATCHES: u64 = 8192;
/// What the host leaves of its uid's epoll-watch count for the sandbox to
/// take, as another user: more than open files × processes (256 × 64),
/// less than the fill's cap.
const EPOLL_HEADROOM: u64 = 100_000;
/// Watches the host's own runner may take of that share, or give back
/// while the sandbox holds the rest (the program's pipes, its pidfd): the
/// host asks for this many to be refused.
const EPOLL_SLACK: u64 = 64;
/// `RLIMIT_MSGQUEUE` in a sandbox: `quotas::RLIMITS` (`src/linux/quotas.rs`,
/// crate-private; README "Kernel quotas").
const MSGQUEUE: u64 = 256 << 10;
/// What the kernel charges a queue for each message it may hold beyond
/// the message's bytes, on 64-bit: a `struct msg_msg` and a
/// `struct posix_msg_tree_node`, 48 bytes each (`mqueue_get_inode` in
/// `ipc/mqueue.c`, one tree node per message below `MQ_PRIO_MAX`).
/// Measured on Linux 6.18: 239 one-message queues of 1000 bytes fit under
/// 256 KiB, the 240th is refused.
const MQ_MSG_OVERHEAD: u64 = 96;
/// Where the message-queue fill stops by itself, below the IPC
/// namespace's `fs.mqueue.queues_max` (256, whose `ENOSPC` is no quota of
/// the user's); without the rlimit it makes about 25.
const MQ_CAP: u64 = 200;

fn e(what: &str) -> String {
    format!("{what}=errno{}", errno())
}

fn temp_file(name: &str) -> std::ffi::CString {
    let p = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::write(&p, b"x");
    std::ffi::CString::new(p.into_os_string().into_encoded_bytes()).unwrap()
}

/// Takes all it can of `pool` (inside a confined sandbox only; the caller
/// checks) and says how much, and what stopped it.
pub(super) fn fill(pool: &str) -> String {
    // SAFETY: (for the whole match) syscalls on fds and memory of this
    // process's own, with valid pointers to locals.
    unsafe {
        match pool {
            "inotify-watches" => {
                // Enough that 128 instances (the most a uid gets by
                // default) pass the host's per-uid watch limit too.
                let files: Vec<_> = (0..1600).map(|i| temp_file(&format!("w{i}"))).collect();
                let mut fds = Vec::new();
                let mut istop = "cap".to_string();
                for _ in 0..128 {
                    let fd = libc::inotify_init1(libc::IN_CLOEXEC);
                    if fd < 0 {
                        istop = format!("errno{}", errno());
                        break;
                    }
                    fds.push(fd);
                }
                let (mut watches, mut wstop) = (0u64, "cap".to_string());
                'all: for fd in &fds {
                    for f in &files {
                        if libc::inotify_add_watch(*fd, f.as_ptr(), libc::IN_MODIFY) < 0 {
                            wstop = format!("errno{}", errno());
                            break 'all;
                        }
                        watches += 1;
                    }
                }
                format!(
                    "instances={} istop={istop} watches={watches} wstop={wstop}",
                    fds.len()
                )
            }
            "open-files" => {
                let mut n = 0u64;
                let stop = loop {
                    if n == 100_000 {
                        break "cap".to_string();
                    }
                    if libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) < 0 {
                        break format!("errno{}", errno());
                    }
                    n += 1;
                };
                format!("open={n} stop={stop}")
            }
            "fds-in-flight" => {
                let mut sv = [0; 2];
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) != 0 {
                    return e("socketpair");
                }
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                let fds = [null; SCM_MAX_FD as usize];
                let mut inflight = 0u64;
                let stop = loop {
                    if inflight > 1_000_000 {
                        break "cap".to_string();
                    }
                    if send_fds(sv[0], &fds) < 0 {
                        break format!("errno{}", errno());
                    }
                    inflight += SCM_MAX_FD;
                };
                format!("inflight={inflight} stop={stop}")
            }
            "epoll-watches" => {
                // A watch is keyed by file and fd number, and closing a
                // dup does not remove it: 85 epolls, 80 files, and each
                // file dup'd onto fd numbers 170..255 in turn, added to
                // every epoll and closed again (within 256 open files).
                let eps: Vec<i32> = (0..85).map(|_| libc::epoll_create1(0)).collect();
                let files: Vec<i32> = (0..80).map(|_| libc::eventfd(0, 0)).collect();
                let (mut watches, mut stop) = (0u64, "cap".to_string());
                'all: for f in &files {
                    for n in 170..255 {
                        if watches >= EPOLL_CAP {
                            break 'all;
                        }
                        if libc::dup2(*f, n) < 0 {
                            stop = format!("dup2=errno{}", errno());
                            break 'all;
                        }
                        for ep in &eps {
                            let mut ev = libc::epoll_event {
                                events: libc::EPOLLIN as u32,
                                u64: 0,
                            };
                            if libc::epoll_ctl(*ep, libc::EPOLL_CTL_ADD, n, &mut ev) < 0 {
                                stop = format!("errno{}", errno());
                                break 'all;
                            }
                            watches += 1;
                        }
                        libc::close(n);
                    }
                }
                format!("watches={watches} stop={stop}")
            }
            "unix-buffers" => {
                let chunk = vec![0u8; 1 << 16];
                let (mut queued, mut pairs) = (0u64, 0u64);
                let stop = 'all: loop {
                    if pairs == 120 {
                        break "pairs".to_string();
                    }
                    let mut sv = [0; 2];
                    let ty = libc::SOCK_STREAM | libc::SOCK_NONBLOCK;
                    if libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()) != 0 {
                        break format!("errno{}", errno());
                    }
                    pairs += 1;
                    let big: libc::c_int = libc::c_int::MAX;
                    libc::setsockopt(
                        sv[0],
                        libc::SOL_SOCKET,
                        libc::SO_SNDBUF,
                        (&big as *const libc::c_int).cast(),
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    );
                    loop {
                        if queued >= UNIX_CAP {
                            break 'all "cap".to_string();
                        }
                        let n = libc::write(sv[0], chunk.as_ptr().cast(), chunk.len());
                        if n <= 0 {
                            break;
                        }
                        queued += n as u64;
                    }
                };
                format!("pairs={pairs} queued={queued} stop={stop}")
            }
            "locked-memory" => {
                let len = 64 << 20;
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    return e("mmap");
                }
                let step = 64 << 10;
                let mut locked = 0usize;
                let stop = loop {
                    if locked == len {
                        break "cap".to_string();
                    }
                    if libc::mlock(p.cast::<u8>().add(locked).cast(), step) != 0 {
                        break format!("errno{}", errno());
                    }
                    locked += step;
                };
                format!("locked={locked} stop={stop}")
            }
            "file-locks" => {
                let f = temp_file("locks");
                let fd = libc::open(f.as_ptr(), libc::O_RDWR);
                if fd < 0 {
                    return e("open");
                }
                let mut n = 0u64;
                let stop = loop {
                    // The kernel keeps a file's locks in a list it walks
                    // on each call: enough to show they are charged and
                    // bounded, few enough to take a moment.
                    if n == 5_000 {
                        break "cap".to_string();
                    }
                    // Every other byte: each lock a record of its own.
                    let mut l: libc::flock = std::mem::zeroed();
                    l.l_type = libc::F_WRLCK as libc::c_short;
                    l.l_whence = libc::SEEK_SET as libc::c_short;
                    l.l_start = (2 * n) as libc::off_t;
                    l.l_len = 1;
                    if libc::fcntl(fd, libc::F_SETLK, &l) != 0 {
                        break format!("errno{}", errno());
                    }
                    n += 1;
                };
                format!("locks={n} stop={stop}")
            }
            "mq-bytes" => {
                // Queues are kept (the descriptor closed) until the IPC
                // namespace ends: the largest shape until refused, then
                // each smaller one, so less than the smallest is left. A
                // queue whose open was refused was still created and
                // counted (`mq_create`): that is no stop.
                let prefix = mq_prefix();
                let (mut queues, mut opened, mut bytes) = (0u64, 0u64, 0u64);
                let mut stop = "cap".to_string();
                'all: for (maxmsg, msgsize) in mq_shapes() {
                    loop {
                        if queues == MQ_CAP {
                            stop = "cap".into();
                            break 'all;
                        }
                        match mq_create(&format!("{prefix}-fill-{queues}"), maxmsg, msgsize) {
                            Ok(open_refused) => {
                                queues += 1;
                                opened += u64::from(open_refused.is_none());
                                bytes += mq_charge(maxmsg, msgsize);
                            }
                            // The user's bytes: try a smaller queue.
                            Err(libc::EMFILE) => {
                                stop = format!("errno{}", libc::EMFILE);
                                break;
                            }
                            Err(e) => {
                                stop = format!("errno{e}");
                                break 'all;
                            }
                        }
                    }
                }
                format!("queues={queues} opened={opened} bytes={bytes} stop={stop}")
            }
            _ => format!("unknown pool {pool:?}"),
        }
    }
}

/// The queue shapes `(mq_maxmsg, mq_msgsize)` the fill makes, largest
/// first: the most a process without `CAP_SYS_RESOURCE` may ask
/// (`fs.mqueue.msg_max` and `msgsize_max` at their defaults, also what
/// `mq_open` gives without an attr), then one message of 8192 bytes down
/// to 1.
fn mq_shapes() -> impl Iterator<Item = (i64, i64)> {
    std::iter::once((10, 8192)).chain((0..=13).rev().map(|b| (1, 1 << b)))
}

/// The bytes the kernel counts against `RLIMIT_MSGQUEUE` for a queue of
/// that shape.
fn mq_charge(maxmsg: i64, msgsize: i64) -> u64 {
    maxmsg as u64 * (msgsize as u64 + MQ_MSG_OVERHEAD)
}

/// The names of the scenario's queues begin with this (the sandboxes
/// get it from the scenario, whose own pid it names).
fn mq_prefix() -> String {
    std::env::var("CORDON_MQ_PREFIX")
        .unwrap_or_else(|_| format!("cordon-test-{}", std::process::id()))
}

/// Creates the queue `name` (no leading `/`: the raw syscall's form) of
/// that shape, new (`O_EXCL`: never one that is not ours), and closes its
/// descriptor; the queue stays until unlinked or its IPC namespace ends.
/// `Ok(None)`: created and opened; `Ok(Some(errno))`: created, but its
/// open refused (Landlock refuses opening a file of the IPC namespace's
/// internal mqueue mount, which is beneath no rule, after the kernel has
/// made and counted the queue: a second `O_EXCL` open finds it);
/// `Err(errno)`: not created.
fn mq_create(name: &str, maxmsg: i64, msgsize: i64) -> Result<Option<i32>, i32> {
    let c = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: mq_attr is plain data (zeroed padding included).
    let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
    attr.mq_maxmsg = maxmsg;
    attr.mq_msgsize = msgsize;
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC;
    // SAFETY: mq_open reads a NUL-terminated name and an attr that outlive
    // the call; a descriptor it returns is closed at once.
    unsafe {
        let open = || libc::syscall(libc::SYS_mq_open, c.as_ptr(), flags, 0o600, &attr);
        let fd = open();
        if fd >= 0 {
            libc::close(fd as libc::c_int);
            return Ok(None);
        }
        let err = errno();
        if err == libc::EACCES && open() < 0 && errno() == libc::EEXIST {
            return Ok(Some(err));
        }
        Err(err)
    }
}

fn mq_unlink(name: &str) -> bool {
    let c = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: mq_unlink reads a NUL-terminated name.
    unsafe { libc::syscall(libc::SYS_mq_unlink, c.as_ptr()) == 0 }
}

/// The scenario's sandbox queues found in this process's IPC namespace
/// (the host's), removed: a sandbox's must be in its own.
fn mq_leaked() -> Vec<String> {
    let prefix = mq_prefix();
    (0..MQ_CAP)
        .map(|i| format!("{prefix}-fill-{i}"))
        .chain(std::iter::once(format!("{prefix}-take")))
        .filter(|name| mq_unlink(name))
        .collect()
}

/// `sendmsg` of one byte with `fds` as `SCM_RIGHTS`.
///
/// # Safety
/// `sock` is a connected stream socket and every fd of `fds` is open.
unsafe fn send_fds(sock: i32, fds: &[i32]) -> isize {
    let bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: a control buffer of CMSG_SPACE bytes holds one header and
    // `fds`; every pointer is to a local that outlives the call.
    unsafe {
        let mut cbuf = vec![0u8; libc::CMSG_SPACE(bytes) as usize];
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = cbuf.len() as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(bytes) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<i32>(), fds.len());
        libc::sendmsg(sock, &msg, libc::MSG_DONTWAIT)
    }
}

/// Takes one of `pool` (the host's share, or a second sandbox's): `ok`,
/// or what refused it.
pub(super) fn take(pool: &str) -> String {
    // SAFETY: (for the whole match) as in `fill`; each takes one and gives
    // it back.
    unsafe {
        let r = match pool {
            "inotify-watches" => {
                let f = temp_file("watch-one");
                let fd = libc::inotify_init1(libc::IN_CLOEXEC);
                if fd < 0 {
                    return e("inotify_init1");
                }
                let r = libc::inotify_add_watch(fd, f.as_ptr(), libc::IN_MODIFY);
                let out = if r < 0 { e("watch") } else { "ok".into() };
                libc::close(fd);
                libc::unlink(f.as_ptr());
                out
            }
            "open-files" => {
                let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                let out = if fd < 0 { e("open") } else { "ok".into() };
                libc::close(fd);
                out
            }
            "fds-in-flight" => {
                let mut sv = [0; 2];
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) != 0 {
                    return e("socketpair");
                }
                let out = if send_fds(sv[0], &[sv[1]]) < 0 {
                    e("sendmsg")
                } else {
                    "ok".into()
                };
                libc::close(sv[0]);
                libc::close(sv[1]);
                out
            }
            "epoll-watches" => {
                let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
                let ev_fd = libc::eventfd(0, 0);
                let mut ev = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: 0,
                };
                let out = if libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ev_fd, &mut ev) < 0 {
                    e("epoll_ctl")
                } else {
                    "ok".into()
                };
                libc::close(ep);
                libc::close(ev_fd);
                out
            }
            "unix-buffers" => {
                let mut sv = [0; 2];
                let ty = libc::SOCK_STREAM | libc::SOCK_NONBLOCK;
                if libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()) != 0 {
                    return e("socketpair");
                }
                let chunk = vec![0u8; 1 << 16];
                let n = libc::write(sv[0], chunk.as_ptr().cast(), chunk.len());
                let out = if n == chunk.len() as isize {
                    "ok".into()
                } else {
                    format!("wrote {n} ({})", e("write"))
                };
                libc::close(sv[0]);
                libc::close(sv[1]);
                out
            }
            "locked-memory" => {
                let page = [0u8; 4096];
                let r = libc::mlock(page.as_ptr().cast(), page.len());
                let out = if r != 0 { e("mlock") } else { "ok".into() };
                libc::munlock(page.as_ptr().cast(), page.len());
                out
            }
            "file-locks" => {
                let f = temp_file("lock-one");
                let fd = libc::open(f.as_ptr(), libc::O_RDWR);
                let out = if libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) != 0 {
                    e("flock")
                } else {
                    "ok".into()
                };
                libc::close(fd);
                libc::unlink(f.as_ptr());
                out
            }
            "mq-bytes" => {
                // A default-sized queue (82 880 bytes counted); the
                // host's, in its own IPC namespace, is removed at once.
                let name = format!("{}-take", mq_prefix());
                match mq_create(&name, 10, 8192) {
                    Ok(None) => {
                        mq_unlink(&name);
                        "ok".into()
                    }
                    // Made and counted: it goes with the sandbox's IPC
                    // namespace.
                    Ok(Some(e)) => format!("ok open=errno{e}"),
                    Err(e) => format!("mq_open=errno{e}"),
                }
            }
            _ => format!("unknown pool {pool:?}"),
        };
        r
    }
}

/// `key=<number>` in `line`, or `u64::MAX`.
fn figure(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// `key=<word>` in `line`, or "".
fn word<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or("")
}

fn sysctl(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `Ok` if no process but this one has this process's real uid, so that
/// filling that uid's count for a moment starves no one else (a zombie
/// runs nothing to starve); else the others' pids.
fn alone_in_uid() -> Result<(), String> {
    // SAFETY: getuid and getpid cannot fail.
    let (uid, me) = unsafe { (libc::getuid(), libc::getpid() as u32) };
    let others: Vec<u32> = std::fs::read_dir("/proc")
        .map_err(|e| format!("/proc: {e}"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            let field = |name: &str| {
                let l = status.lines().find_map(|l| l.strip_prefix(name))?;
                l.split_whitespace().next().map(str::to_string)
            };
            field("Uid:") == Some(uid.to_string()) && field("State:").as_deref() != Some("Z")
        })
        .collect();
    ensure(others.is_empty(), || format!("pids {others:?}"))
}

/// The host's own epoll watches: all of its uid's count
/// (`fs.epoll.max_user_watches`) but `left`. Dropped, they are closed and
/// the count given back.
struct EpollHold {
    /// The epolls first: closing them frees their watches at once.
    _fds: Vec<OwnedFd>,
    held: u64,
}

/// Fills the host's uid's epoll-watch count, then gives back exactly
/// `left` (an epoll holding that many, closed).
fn hold_epoll_count_but(left: u64) -> Result<EpollHold, String> {
    const FILES: u64 = 64;
    const NUMBERS: i32 = 1024;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a local.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let top = lim.rlim_cur.min(1 << 20) as i32;
    // The dups' numbers, far above every descriptor this process holds.
    ensure(top >= 4 * NUMBERS, || {
        format!("RLIMIT_NOFILE {top} is too low to fill the epoll count")
    })?;
    let numbers = top - NUMBERS..top;
    let owned = |fd: i32, what: &str| {
        // SAFETY: a fresh descriptor of ours, or -1 (refused).
        (fd >= 0)
            .then(|| unsafe { OwnedFd::from_raw_fd(fd) })
            .ok_or_else(|| e(what))
    };
    let epolls = |n: u64| -> Result<Vec<OwnedFd>, String> {
        // SAFETY: epoll_create1 makes a new descriptor.
        (0..n)
            .map(|_| owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }, "epoll"))
            .collect()
    };
    let files: Vec<OwnedFd> = (0..FILES)
        // SAFETY: eventfd makes a new descriptor.
        .map(|_| owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) }, "eventfd"))
        .collect::<Result<_, _>>()?;
    let per_epoll = FILES * NUMBERS as u64;
    let share = epolls(left.div_ceil(per_epoll))?;
    let mut rest = epolls(sysctl("/proc/sys/fs/epoll/max_user_watches") / per_epoll + 2)?;
    let (kept, full) = add_watches(&share, &files, numbers.clone(), Some(left))?;
    ensure(!full && kept == left, || {
        format!("the uid's epoll count was full at {kept} before the host left a share")
    })?;
    let (held, full) = add_watches(&rest, &files, numbers, None)?;
    ensure(full, || {
        format!("{held} watches did not fill the uid's epoll count")
    })?;
    drop(share);
    rest.extend(files);
    Ok(EpollHold { _fds: rest, held })
}

/// Adds the watch of each (file, fd number) to each of `eps` until `limit`
/// or `ENOSPC`: the count added and whether `ENOSPC` stopped it. A watch
/// is kept per file and fd number, and closing a dup keeps it, so each
/// file is dup'd onto each of `numbers` in turn and closed again there.
fn add_watches(
    eps: &[OwnedFd],
    files: &[OwnedFd],
    numbers: std::ops::Range<i32>,
    limit: Option<u64>,
) -> Result<(u64, bool), String> {
    use std::os::fd::AsRawFd;
    let mut added = 0u64;
    for f in files {
        for n in numbers.clone() {
            // SAFETY: dup2 onto a number this process does not use (the
            // caller's range), epoll_ctl on our descriptors and a local
            // event, close of that dup.
            unsafe {
                if libc::dup2(f.as_raw_fd(), n) < 0 {
                    return Err(e("dup2"));
                }
                for ep in eps {
                    if limit == Some(added) {
                        break;
                    }
                    let mut ev = libc::epoll_event {
                        events: libc::EPOLLIN as u32,
                        u64: 0,
                    };
                    if libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, n, &mut ev) < 0 {
                        let errno = errno();
                        libc::close(n);
                        return match errno {
                            libc::ENOSPC => Ok((added, true)),
                            _ => Err(format!("epoll_ctl=errno{errno}")),
                        };
                    }
                    added += 1;
                }
                libc::close(n);
            }
            if limit == Some(added) {
                return Ok((added, false));
            }
        }
    }
    Ok((added, false))
}

/// The host's own epoll takes `n` watches (then gives them back): `ok`,
/// or what refused it and after how many.
fn take_watches(n: u64) -> String {
    // SAFETY: epoll_create1, eventfd and epoll_ctl on this process's own
    // new descriptors and a local event; each closed here.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        if ep < 0 {
            return e("epoll_create1");
        }
        let mut fds = Vec::new();
        let mut out = "ok".to_string();
        for i in 0..n {
            let fd = libc::eventfd(0, libc::EFD_CLOEXEC);
            if fd < 0 {
                out = format!("{} after={i}", e("eventfd"));
                break;
            }
            fds.push(fd);
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 0,
            };
            if libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) < 0 {
                out = format!("{} after={i}", e("epoll_ctl"));
                break;
            }
        }
        for fd in fds {
            libc::close(fd);
        }
        libc::close(ep);
        out
    }
}

/// Each pool in turn: a sandbox fills it and holds it while the host and
/// a second sandbox take one; the fill's figures must keep within the
/// bound the inventory states.
pub(in super::super) fn filled_pools_leave_the_host_its_share() -> Outcome {
    let (dir, exe) = helper_copy();
    let result = (|| {
        let rt = rt();
        let (landlock, root) = (on_container(), is_root());
        // The sandbox's rlimit is never above the hard limit it would
        // have had.
        let mut mq_lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit into a local.
        unsafe { libc::getrlimit(libc::RLIMIT_MSGQUEUE, &mut mq_lim) };
        let msgqueue = MSGQUEUE.min(mq_lim.rlim_max);
        let mut failures = Vec::new();
        for pool in POOLS {
            let act = |what: &str| {
                spec(exe.to_str().unwrap(), &[])
                    .env(SCENARIO_ENV, HELPER)
                    .env("CORDON_HELPER_ACT", format!("{what}-{pool}"))
                    .env("CORDON_MQ_PREFIX", mq_prefix())
            };
            let mut filler = act("fill");
            if pool == "unix-buffers" || pool == "epoll-watches" {
                filler = filler.limits(Limits {
                    memory_bytes: Some(FILL_LIMIT),
                    deadline: Some(Duration::from_secs(60)),
                    ..Limits::default()
                });
            }
            // As another user the sandbox's epoll watches are the caller's
            // uid's count (README "Kernel quotas"): the host fills that
            // count but for a share, which the fill must then stop at, and
            // which leaves the host refused while the sandbox holds it.
            // Only where no other process of the uid is starved meanwhile.
            let epoll_hold = match pool == "epoll-watches" && !root {
                false => None,
                true => match alone_in_uid() {
                    Ok(()) => Some(hold_epoll_count_but(EPOLL_HEADROOM)?),
                    Err(others) => {
                        println!(
                            "reduced: epoll-watches: other processes of this uid ({others}) \
                             would be starved, so its count was not filled to show that the \
                             sandbox takes from it"
                        );
                        None
                    }
                },
            };
            let epoll_shared = epoll_hold.is_some();
            let (mut child, line, _) = start_held(&rt, &spawner(), filler, "")?;
            // The runner's own watches come and go (a pipe it stops
            // reading), so the host asks for more than they could free.
            let host = match epoll_shared {
                true => take_watches(EPOLL_SLACK),
                false => take(pool),
            };
            let second = if epoll_shared {
                // The runner registers a child's pipes with epoll, so with
                // the uid's count full even starting one fails.
                match rt.block_on(async { spawner().spawn(&act("take")).map(|_| ()) }) {
                    Err(e) => format!("spawn: {e}"),
                    Ok(()) => "started".into(),
                }
            } else {
                run(act("take"))
                    .map(|r| r.stdout.trim().to_string())
                    .unwrap_or_else(|e| e)
            };
            drop(child.stdin.take());
            let outcome = rt.block_on(child.wait()).map_err(|e| e.to_string())?;
            // With the sandbox gone, the host's share is back.
            let host_after = epoll_shared.then(|| take_watches(EPOLL_SLACK));
            let held = epoll_hold.map(|h| h.held);
            println!(
                "note: {pool}: the sandbox: {line:?} ({outcome:?}); the host: {host}; \
                 a second sandbox: {second}{}",
                match (held, &host_after) {
                    (Some(held), Some(after)) => format!(
                        " (the host held {held} watches of its uid's count before; \
                         after the sandbox ended it got {after})"
                    ),
                    _ => String::new(),
                }
            );
            let mut fail = |why: String| failures.push(format!("{pool}: {why} ({line:?})"));
            if line.starts_with("unconfined") {
                fail("the program ran without its seccomp filter".into());
                continue;
            }
            let want_host = if epoll_shared {
                "epoll_ctl=errno28"
            } else {
                "ok"
            };
            if !host.starts_with(want_host) {
                fail(format!("the host got {host:?}, want {want_host:?}"));
            }
            if epoll_shared && host_after.as_deref() != Some("ok") {
                fail(format!(
                    "after the sandbox ended the host got {host_after:?}: its refusal was \
                     not the sandbox's holding"
                ));
            }
            // Where the sandbox shares the caller's count (README: the
            // caller's uid's share), the second sandbox may be refused.
            let shared = !root && pool == "fds-in-flight";
            // Tier landlock as the caller's uid refuses inotify outright.
            let refused = landlock && !root && pool == "inotify-watches";
            let want_second = if refused {
                "inotify_init1=errno1".to_string()
            } else if pool == "mq-bytes" && landlock {
                // No IPC namespace: they would be the host's.
                "mq_open=errno1".to_string()
            } else if epoll_shared {
                // With the uid's epoll count full, not even the runner can
                // start it (it registers the child's pipes).
                "spawn: … (os error 28)".to_string()
            } else {
                "ok".to_string()
            };
            let second_ok = match epoll_shared {
                true => second.starts_with("spawn: ") && second.ends_with("(os error 28)"),
                // Made (its own IPC namespace, its own count or what is
                // left of the caller's), whether or not it could open it.
                false if pool == "mq-bytes" && !landlock => second.starts_with("ok"),
                false => second == want_second,
            };
            if !shared && !second_ok {
                fail(format!(
                    "a second sandbox got {second:?}, want {want_second:?}"
                ));
            }
            let (n, stop) = match pool {
                "inotify-watches" => (figure(&line, "watches"), word(&line, "wstop")),
                "open-files" => (figure(&line, "open"), word(&line, "stop")),
                "fds-in-flight" => (figure(&line, "inflight"), word(&line, "stop")),
                "epoll-watches" => (figure(&line, "watches"), word(&line, "stop")),
                "locked-memory" => (figure(&line, "locked"), word(&line, "stop")),
                "file-locks" => (figure(&line, "locks"), word(&line, "stop")),
                "mq-bytes" => (figure(&line, "bytes"), word(&line, "stop")),
                _ => (figure(&line, "queued"), word(&line, "stop")),
            };
            let bound_ok = match pool {
                "inotify-watches" if refused => word(&line, "istop") == "errno1" && n == 0,
                // Its own user namespace's quota.
                "inotify-watches" if !landlock => n <= INOTIFY_WATCHES && stop == "errno28",
                // Its own uid's count (root host), at the host's per-uid
                // limit: the host's own uid is apart.
                "inotify-watches" => {
                    n <= sysctl("/proc/sys/fs/inotify/max_user_watches") && stop == "errno28"
                }
                "open-files" => n <= OPEN_FILES && stop == "errno24",
                // ETOOMANYREFS once the uid's count passes RLIMIT_NOFILE.
                "fds-in-flight" => n <= OPEN_FILES + SCM_MAX_FD && stop == "errno109",
                // A root host's cgroup charges each watch: killed (or
                // ENOMEM) at the memory limit before the fill's cap.
                "epoll-watches" if root => {
                    outcome == ExitOutcome::MemoryExceeded || (n < EPOLL_CAP && stop == "errno12")
                }
                // An unprivileged host's: the caller's own count, and
                // nothing else: the fill takes the share the host left,
                // far past open files × processes, and ENOSPC is the
                // caller's count.
                "epoll-watches" if epoll_shared => {
                    n <= EPOLL_HEADROOM && n + EPOLL_SLACK >= EPOLL_HEADROOM && stop == "errno28"
                }
                // Without filling the count first: the fill reaches its
                // own cap, past open files × processes.
                "epoll-watches" => n >= EPOLL_CAP && stop == "cap",
                "locked-memory" => n <= MEMLOCK && (stop == "errno12" || stop == "errno1"),
                // No count: the fill reaches its own cap.
                "file-locks" => n == 5_000 && stop == "cap",
                // Tier landlock: refused by seccomp, so its bound is the
                // refusal (without it the queues are made in the host's
                // IPC namespace, Landlock's EACCES notwithstanding, and
                // outlive the sandbox: `mq_leaked` finds them).
                "mq-bytes" if landlock => figure(&line, "queues") == 0 && stop == "errno1",
                // The quota's rlimit stopped it (EMFILE), with less than
                // the smallest queue left of it: counted in the sandbox's
                // user namespace and again in the caller's (ucounts), so
                // as another user the caller keeps the rest of its own.
                "mq-bytes" => n <= msgqueue && n + mq_charge(1, 1) > msgqueue && stop == "errno24",
                // A root host's cgroup charges the queued data: the fill is
                // killed at the memory limit before its own cap.
                _ if root => outcome == ExitOutcome::MemoryExceeded,
                // Elsewhere each socket's send buffer bounds it.
                _ => n <= figure(&line, "pairs") * 2 * sysctl("/proc/sys/net/core/wmem_max"),
            };
            if !bound_ok {
                fail(format!(
                    "the fill passed the inventory's bound: {n} (stop {stop:?})"
                ));
            }
            if pool == "mq-bytes" {
                // Queues are private to the sandbox's IPC namespace: none
                // of its names is in the host's, even after it ended.
                let leaked = mq_leaked();
                if !leaked.is_empty() {
                    fail(format!(
                        "queues of the sandboxes were in the host's IPC namespace (removed \
                         now): {leaked:?}"
                    ));
                }
                if !landlock {
                    if let Err(why) = mq_control(&rt, &act, root, msgqueue) {
                        fail(format!("control: {why}"));
                    }
                }
            }
        }
        ensure(failures.is_empty(), || failures.join("\n"))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The control: the message-queue fill without the quota's rlimit
/// (`kernel_quotas` off) takes more than the quota: as root, of its own
/// uid's count; as another user, of the caller's, whose own queue is then
/// refused (only where no other process of the uid is starved meanwhile).
fn mq_control(
    rt: &tokio::runtime::Runtime,
    act: &dyn Fn(&str) -> ChildSpec,
    root: bool,
    msgqueue: u64,
) -> Outcome {
    if let (false, Err(others)) = (root, alone_in_uid()) {
        println!(
            "reduced: mq-bytes: other processes of this uid ({others}) would be starved, so \
             the control without the quota did not run"
        );
        return Ok(());
    }
    let sp = without(|l| l.kernel_quotas = false);
    let (mut child, line, _) = start_held(rt, &sp, act("fill"), "")?;
    let host = take("mq-bytes");
    drop(child.stdin.take());
    let _ = rt.block_on(child.wait());
    println!("note: mq-bytes without the quota's rlimit: the sandbox: {line:?}; the host: {host}");
    let want_host = if root { "ok" } else { "mq_open=errno24" };
    ensure(
        figure(&line, "bytes") > msgqueue && word(&line, "stop") == "errno24" && host == want_host,
        || format!("the sandbox: {line:?}, the host: {host:?} (want {want_host:?})"),
    )
}
