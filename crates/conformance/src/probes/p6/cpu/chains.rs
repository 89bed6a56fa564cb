//! P6's CPU chains, the child's side of `sandbox-cpu-limit` (mode
//! `P6-cpu`): forked links that burn CPU time and report their chain's
//! total, without allocating (each runs in a forked child of a
//! single-threaded process).

use std::collections::BTreeMap;

use crate::child::{errno, Reporter};

fn num(args: &BTreeMap<String, String>, k: &str) -> u64 {
    args.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The child's side (mode `P6-cpu`): runs the chains, one link at a time
/// per chain, until each reaches its cap or the sandbox is stopped.
///
/// The program ignores `SIGCHLD`, so the kernel reaps each link the moment
/// it exits and its CPU time reaches no parent's `cutime`: a backend that
/// sums the CPU time of the live process tree from `/proc` never sees more
/// than the running links, and only accounting for the sandbox as a whole
/// (a cgroup) stops the chains.
pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let plan = Plan {
        link_ns: num(args, "link_ms") * 1_000_000,
        step_ns: num(args, "step_ms").max(1) * 1_000_000,
        cap_ns: num(args, "cap_ms") * 1_000_000,
    };
    let chains = num(args, "chains").min(MAX_CHAINS as u64) as usize;
    r.info("cpu-chains", chains);
    // SAFETY: setting this single-threaded process's SIGCHLD disposition.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    // Per chain: the read end of the running link's pipe (EOF once the
    // link has exited) and the CPU time its finished links burned.
    let mut running = [-1i32; MAX_CHAINS];
    let mut before = [0u64; MAX_CHAINS];
    let mut links = [0u64; MAX_CHAINS];
    loop {
        for c in 0..chains {
            if running[c] >= 0 || before[c] >= plan.cap_ns {
                continue;
            }
            links[c] += 1;
            match start_link(c as u64, before[c], links[c], &plan) {
                Ok(fd) => running[c] = fd,
                Err(e) => {
                    r.info("chain-error", format!("fork: errno {e}"));
                    before[c] = plan.cap_ns;
                }
            }
        }
        let mut polls = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        }; MAX_CHAINS];
        for c in 0..chains {
            polls[c].fd = running[c];
        }
        if running[..chains].iter().all(|fd| *fd < 0) {
            break;
        }
        // SAFETY: polling our own pipe fds (a negative fd is ignored).
        unsafe { libc::poll(polls.as_mut_ptr(), chains as libc::nfds_t, 1000) };
        for c in 0..chains {
            if polls[c].revents == 0 {
                continue;
            }
            let mut b = 0u8;
            // SAFETY: reading one byte from our own pipe; 0 is EOF.
            if unsafe { libc::read(running[c], (&mut b as *mut u8).cast(), 1) } == 0 {
                // SAFETY: closing our own read end.
                unsafe { libc::close(running[c]) };
                running[c] = -1;
                before[c] += plan.link_ns;
            }
        }
    }
    r.info("cpu-chains-ended", "on their own");
}

/// How many chains the child runs at most.
const MAX_CHAINS: usize = 8;

/// Forks one link of chain `c`, which holds the write end of a fresh pipe
/// until it exits; returns the read end, or the errno.
fn start_link(c: u64, before: u64, link: u64, plan: &Plan) -> Result<i32, i32> {
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into a local array; fork of this single-threaded
    // process, whose child runs only raw syscalls and `_exit`s.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(errno());
        }
        let pid = libc::fork();
        if pid == 0 {
            libc::close(fds[0]);
            burn(c, before, link, plan);
        }
        let e = errno();
        libc::close(fds[1]);
        if pid < 0 {
            libc::close(fds[0]);
            return Err(e);
        }
    }
    Ok(fds[0])
}

/// What each link of a chain does, in ns of CPU time.
struct Plan {
    link_ns: u64,
    step_ns: u64,
    cap_ns: u64,
}

/// This process's CPU time (a forked process starts at 0).
fn own_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// One link: burns `link_ns` of CPU (or up to the chain's cap), reporting
/// the chain's total every step; never returns. Runs in a forked child of
/// a single-threaded process: raw syscalls and stack buffers only.
fn burn(c: u64, before: u64, link: u64, plan: &Plan) -> ! {
    let mut next_report = plan.step_ns;
    let mut x = 0u64;
    loop {
        for i in 0..20_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let Some(own) = own_cpu_ns() else {
            // A chain that cannot read its CPU time reports nothing true:
            // said, so the check decides nothing.
            line(b"chain-error", b"clock_gettime failed in link ", link, None);
            // SAFETY: ending this process.
            unsafe { libc::_exit(1) };
        };
        let done = own >= plan.link_ns || before + own >= plan.cap_ns;
        if own >= next_report || done {
            report(c, before + own, link);
            next_report = own + plan.step_ns;
        }
        if done {
            // SAFETY: ending this process.
            unsafe { libc::_exit(0) };
        }
    }
}

/// `INFO chain<c> <total ms>,<link>`.
fn report(c: u64, total_ns: u64, link: u64) {
    let mut key = *b"chain0";
    key[5] = b'0' + (c % 10) as u8;
    line(&key, b"", total_ns / 1_000_000, Some(link));
}

/// Writes `INFO <key> <prefix><a>[,<b>]` with one `write` (atomic on a
/// pipe below PIPE_BUF), without allocating.
fn line(key: &[u8], prefix: &[u8], a: u64, b: Option<u64>) {
    let mut buf = [0u8; 128];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        for &x in bytes {
            if n < buf.len() {
                buf[n] = x;
                n += 1;
            }
        }
    };
    put(b"INFO\t");
    put(key);
    put(b"\t");
    put(prefix);
    put(digits(a).as_slice());
    if let Some(b) = b {
        put(b",");
        put(digits(b).as_slice());
    }
    put(b"\n");
    // SAFETY: writing `n` initialised bytes of a local to stdout.
    unsafe { libc::write(1, buf.as_ptr().cast(), n) };
}

/// The decimal digits of `v`, on the stack.
struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn digits(mut v: u64) -> Digits {
    let mut d = Digits {
        buf: [0; 20],
        start: 20,
    };
    loop {
        d.start -= 1;
        d.buf[d.start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return d;
        }
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_decimal() {
        assert_eq!(digits(0).as_slice(), b"0");
        assert_eq!(digits(1750).as_slice(), b"1750");
        assert_eq!(digits(u64::MAX).as_slice(), b"18446744073709551615");
    }
}
