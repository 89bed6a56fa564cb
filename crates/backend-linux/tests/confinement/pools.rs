//! Host-wide kernel pools (README "Kernel pools shared beyond the
//! sandbox"): a sandbox tries to drain one, and the host checks it still
//! gets its share while the sandbox holds what it took.

use super::own_uid::{helper_copy, start_held};
use super::*;

#[path = "pool_fills.rs"]
mod fills;
pub(super) use fills::filled_pools_leave_the_host_its_share;

/// The helper mode of the in-sandbox programs here (this binary,
/// re-executed).
pub(super) const HELPER: &str = "pools_helper";

/// How many contexts the drain makes at most: `fs.aio-max-nr` is 65 536
/// by default and the first calls ask for 32 767 events, so about 17 do;
/// the cap keeps a host with a huge maximum from paying for the attempt.
const MAX_CONTEXTS: u32 = 256;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Whether this process runs under a seccomp filter with no_new_privs:
/// the drain refuses to run otherwise, so an unconfined run (a broken
/// backend, a test run without one) fails the scenario instead of taking
/// the host's AIO events.
fn confined() -> bool {
    // SAFETY: prctl reads of this process's own state.
    unsafe {
        // The unused arguments must be 0, or the kernel says EINVAL.
        libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) == 2
            && libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1
    }
}

/// The helper: `CORDON_HELPER_ACT` says what to do; it prints one line
/// and holds what it took until its stdin closes.
pub(super) fn helper() -> ! {
    let act = std::env::var("CORDON_HELPER_ACT").unwrap_or_default();
    let out = match act.as_str() {
        "aio-drain" if !confined() => "unconfined: not draining".to_string(),
        "aio-drain" => aio_drain(),
        a if a.starts_with("fill-") && !confined() => format!("unconfined: not filling ({a})"),
        a => match (a.strip_prefix("fill-"), a.strip_prefix("take-")) {
            (Some(pool), _) => fills::fill(pool),
            (_, Some(pool)) => fills::take(pool),
            _ => format!("unknown act {act:?}"),
        },
    };
    println!("{out}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut b = [0u8; 1];
    let _ = std::io::stdin().read(&mut b);
    std::process::exit(0);
}

/// `io_setup(32767)` until it fails (the attack), then halving
/// the size down to 1, so not even one event is left; then each other AIO
/// call on a context that does not exist: with the fix each says
/// `ENOSYS`, without a filter `EINVAL`. The contexts stay until exit.
fn aio_drain() -> String {
    let mut out = Vec::new();
    let (mut n, mut size) = (0, 32767u32);
    let stop = loop {
        if n == MAX_CONTEXTS {
            break "cap".to_string();
        }
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context's id into `ctx`.
        if unsafe { libc::syscall(libc::SYS_io_setup, size, &mut ctx) } == 0 {
            n += 1;
        } else if errno() == libc::EAGAIN && size > 1 {
            size /= 2;
        } else {
            break format!("errno{}", errno());
        }
    };
    out.push(format!("contexts={n} stop={stop}"));
    // SAFETY: calls on context id 0, which names no context: each fails
    // without touching memory (nr 0, null pointers).
    unsafe {
        for (name, r) in [
            (
                "io_submit",
                libc::syscall(libc::SYS_io_submit, 0u64, 0i64, 0usize),
            ),
            (
                "io_getevents",
                libc::syscall(libc::SYS_io_getevents, 0u64, 0i64, 0i64, 0usize, 0usize),
            ),
            (
                "io_cancel",
                libc::syscall(libc::SYS_io_cancel, 0u64, 0usize, 0usize),
            ),
            ("io_destroy", libc::syscall(libc::SYS_io_destroy, 0u64)),
        ] {
            out.push(format!("{name}=errno{}", if r == 0 { 0 } else { errno() }));
        }
    }
    out.join(" ")
}

/// The host's own `io_setup(1)`, destroyed at once: `ok` or the errno.
fn host_io_setup() -> String {
    let mut ctx: libc::c_ulong = 0;
    // SAFETY: io_setup writes `ctx`; io_destroy frees that context.
    unsafe {
        if libc::syscall(libc::SYS_io_setup, 1u32, &mut ctx) != 0 {
            return format!("errno{}", errno());
        }
        libc::syscall(libc::SYS_io_destroy, ctx);
    }
    "ok".into()
}

fn aio_nr() -> Result<u64, String> {
    std::fs::read_to_string("/proc/sys/fs/aio-nr")
        .map_err(|e| format!("/proc/sys/fs/aio-nr: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("/proc/sys/fs/aio-nr: {e}"))
}

/// Issue 44, finding 1: kernel AIO events are one count for the whole
/// host (`fs.aio-nr` against `fs.aio-max-nr`). A sandbox calls
/// `io_setup(32767)` until it fails and holds what it got; meanwhile the
/// host's own `io_setup` must still work, and the host's count must not
/// have moved. With `io_setup` allowed (before decision 0014), the
/// sandbox took every event in a few calls and the host got `EAGAIN`
/// until it ended.
pub(super) fn aio_pool_stays_the_hosts() -> Outcome {
    let (dir, exe) = helper_copy();
    let result = (|| {
        let rt = rt();
        let before = aio_nr()?;
        let token = sleep_token();
        let spec = spec(exe.to_str().unwrap(), &[token.as_str()])
            .env(SCENARIO_ENV, HELPER)
            .env("CORDON_HELPER_ACT", "aio-drain");
        let (mut child, line, _) = start_held(&rt, &spawner(), spec, &token)?;
        // While the sandbox holds whatever it took.
        let during = aio_nr();
        let host_during = host_io_setup();
        drop(child.stdin.take());
        let _ = rt.block_on(child.wait());
        let host_after = host_io_setup();
        let during = during?;
        println!(
            "note: sandbox: {line}; fs.aio-nr {before} before, {during} while it held, \
             fs.aio-max-nr {}",
            std::fs::read_to_string("/proc/sys/fs/aio-max-nr")
                .unwrap_or_default()
                .trim()
        );
        ensure(!line.starts_with("unconfined"), || {
            format!("the program ran without its seccomp filter: {line}")
        })?;
        ensure(host_during == "ok" && host_after == "ok", || {
            format!(
                "the host's io_setup failed ({host_during} while the sandbox held, \
                 {host_after} after): the sandbox drained the host's AIO events: {line}"
            )
        })?;
        // ENOSYS: unlisted, so programs fall back to their thread-pool I/O.
        let want = "contexts=0 stop=errno38 io_submit=errno38 io_getevents=errno38 \
                    io_cancel=errno38 io_destroy=errno38";
        ensure(line == want, || {
            format!("kernel AIO in the sandbox: want {want:?}, got {line:?}")
        })?;
        // Other processes of the host may use AIO meanwhile: the count may
        // move, but not by the sandbox's 32 767-event contexts.
        ensure(during < before + 32767, || {
            format!("fs.aio-nr grew from {before} to {during} while the sandbox held")
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Huge pages (README "Kernel pools shared beyond the sandbox"): a file on
/// hugetlbfs takes from the host's pool when mapped, with no flag for the
/// filter to refuse, so no grant may reach one. A hugetlbfs mount of the
/// test's own below a granted dir, and the mount itself as a grant, are
/// refused before anything runs; with the mount gone the same grant runs
/// (the control: what refused it was the mount).
pub(super) fn a_grant_reaching_huge_pages_is_refused() -> Outcome {
    if !is_root() {
        return Err("this scenario needs root, to mount hugetlbfs (CI runs as root)".into());
    }
    let dir = existing_scratch();
    let huge = dir.path().join("huge");
    std::fs::create_dir(&huge).map_err(|e| e.to_string())?;
    let c = std::ffi::CString::new(huge.to_str().unwrap()).unwrap();
    // SAFETY: mounting a new hugetlbfs on the test's own empty dir.
    let r = unsafe {
        libc::mount(
            c"none".as_ptr(),
            c.as_ptr(),
            c"hugetlbfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(format!(
            "cannot mount hugetlbfs for the test: {}",
            std::io::Error::last_os_error()
        ));
    }
    let marker = dir.path().join("ran");
    let try_grant = |grant: &Path| {
        let mut cfg = config();
        cfg.read_only = vec![grant.to_path_buf()];
        rt().block_on(async {
            spawner_with(cfg)
                .spawn(&sh(&format!("touch {}", marker.display())))
                .map(|_| ())
        })
    };
    let result = (|| {
        for grant in [dir.path(), huge.as_path()] {
            match try_grant(grant) {
                Err(SpawnError::Wrap(e)) => {
                    let msg = e.to_string();
                    ensure(
                        msg.contains("hugetlbfs") && msg.contains("huge page pool"),
                        || format!("the refusal of {} does not say why: {msg}", grant.display()),
                    )?;
                }
                Err(e) => return Err(format!("unexpected error kind: {e}")),
                Ok(()) => {
                    return Err(format!(
                        "a grant of {} reaching a hugetlbfs mount was let through",
                        grant.display()
                    ))
                }
            }
        }
        ensure(!marker.exists(), || "the program ran".into())
    })();
    // SAFETY: unmounting the test's own mount.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    result?;
    match try_grant(dir.path()) {
        Ok(()) => Ok(()),
        Err(e) => Err(format!(
            "control: without the mount the grant is refused: {e}"
        )),
    }
}
