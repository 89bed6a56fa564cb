//! The pools of the inventory (README "Kernel pools shared beyond the
//! sandbox") that run in a sandbox and have no scenario of their own: for
//! each, one sandbox takes all it can and holds it, and meanwhile the host
//! and a second sandbox each take one. The scenario checks the bound the
//! inventory states for the tier and the caller (a quota that stopped the
//! fill, a limit), and that neither the host nor the second sandbox was
//! refused, except where the inventory says the caller's uid's count is
//! shared (descriptors in flight on an unprivileged host).

use super::super::own_uid::{helper_copy, start_held};
use super::super::*;
use super::{errno, HELPER};

/// The pools, by the name their acts take (`fill-<pool>`, `take-<pool>`).
const POOLS: [&str; 7] = [
    "inotify-watches",
    "open-files",
    "fds-in-flight",
    "epoll-watches",
    "unix-buffers",
    "locked-memory",
    "file-locks",
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
            _ => format!("unknown pool {pool:?}"),
        }
    }
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

/// Each pool in turn: a sandbox fills it and holds it while the host and
/// a second sandbox take one; the fill's figures must keep within the
/// bound the inventory states.
pub(in super::super) fn filled_pools_leave_the_host_its_share() -> Outcome {
    let (dir, exe) = helper_copy();
    let result = (|| {
        let rt = rt();
        let (landlock, root) = (on_container(), is_root());
        let mut failures = Vec::new();
        for pool in POOLS {
            let act = |what: &str| {
                spec(exe.to_str().unwrap(), &[])
                    .env(SCENARIO_ENV, HELPER)
                    .env("CORDON_HELPER_ACT", format!("{what}-{pool}"))
            };
            let mut filler = act("fill");
            if pool == "unix-buffers" || pool == "epoll-watches" {
                filler = filler.limits(Limits {
                    memory_bytes: Some(FILL_LIMIT),
                    deadline: Some(Duration::from_secs(60)),
                    ..Limits::default()
                });
            }
            let (mut child, line, _) = start_held(&rt, &spawner(), filler, "")?;
            let host = take(pool);
            let second = run(act("take"))
                .map(|r| r.stdout.trim().to_string())
                .unwrap_or_else(|e| e);
            drop(child.stdin.take());
            let outcome = rt.block_on(child.wait()).map_err(|e| e.to_string())?;
            println!(
                "note: {pool}: the sandbox: {line:?} ({outcome:?}); the host: {host}; \
                 a second sandbox: {second}"
            );
            let mut fail = |why: String| failures.push(format!("{pool}: {why} ({line:?})"));
            if line.starts_with("unconfined") {
                fail("the program ran without its seccomp filter".into());
                continue;
            }
            if host != "ok" {
                fail(format!("the host was refused: {host}"));
            }
            // Where the sandbox shares the caller's count (README: the
            // caller's uid's share), the second sandbox may be refused.
            let shared = !root && pool == "fds-in-flight";
            // Tier landlock as the caller's uid refuses inotify outright.
            let refused = landlock && !root && pool == "inotify-watches";
            let want_second = if refused {
                "inotify_init1=errno1"
            } else {
                "ok"
            };
            if !shared && second != want_second {
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
                _ => (figure(&line, "queued"), word(&line, "stop")),
            };
            let sysctl = |path: &str| -> u64 {
                std::fs::read_to_string(path)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0)
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
                // An unprivileged host's: nothing but the caller's own
                // count (`fs.epoll.max_user_watches`) holds it, as the
                // inventory says; the fill reaches its own cap.
                "epoll-watches" => n >= EPOLL_CAP && stop == "cap",
                "locked-memory" => n <= MEMLOCK && (stop == "errno12" || stop == "errno1"),
                // No count: the fill reaches its own cap.
                "file-locks" => n == 5_000 && stop == "cap",
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
        }
        ensure(failures.is_empty(), || failures.join("\n"))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
