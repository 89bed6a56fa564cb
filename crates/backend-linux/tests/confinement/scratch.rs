//! What the host does with a sandbox's scratch after it, tried by the
//! trees and leftovers a hostile sandbox makes: removed whatever its
//! depth, and never left where a later sandbox of the same uid can read
//! it.

use super::*;

/// How deep the chain is: well past the fd limit the scenario sets on
/// itself (`FD_LIMIT`), which a removal holding an fd per level hits.
const CHAIN: usize = 1_000;
const FD_LIMIT: u64 = 256;

/// A sandbox builds a directory chain deeper than the host's
/// `RLIMIT_NOFILE` in its scratch (renaming the chain into a new top at
/// each step keeps every path short); when it has ended, nothing of the
/// scratch is left in the base. (In tier namespaces the scratch is a
/// private mount and nothing reaches the base at all; tier landlock's is
/// the host's own dir, which the removal used to leave, `EMFILE`.)
pub(super) fn scratch_deeper_than_the_fd_limit_is_removed() -> Outcome {
    let limit = libc::rlimit {
        rlim_cur: FD_LIMIT,
        rlim_max: FD_LIMIT,
    };
    // SAFETY: setrlimit on this scenario's own process, a plain struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
    }
    let base = existing_scratch();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let mut cfg = config();
    cfg.scratch_base = base.path().to_path_buf();
    let chain = format!(
        "import os\nos.mkdir('top')\nfor _ in range({CHAIN}):\n    os.mkdir('new')\n    \
         os.rename('top', 'new/d')\n    os.rename('new', 'top')\nprint('built')"
    );
    let r = run_with(&spawner_with(cfg), py(&chain))?;
    ensure(r.stdout == "built\n", || {
        format!("the chain was not built: {r}")
    })?;
    let left: Vec<_> = dir_listing(base.path())
        .into_iter()
        .filter(|(n, _)| n.to_string_lossy().starts_with(cordon_core::SCRATCH_PREFIX))
        .collect();
    ensure(left.is_empty(), || {
        format!("the scratch stayed behind after the sandbox: {left:?}")
    })
}

/// The helper that plays the killed host of
/// [`a_reused_uid_finds_nothing_of_its_last_holder`].
pub(super) const HOLDER_HELPER: &str = "uid_holder_helper";
const BASE_ENV: &str = "CORDON_TEST_SCRATCH_BASE";

/// The uid of the one-uid pool: outside the default range, which other
/// tests' sandboxes lease from.
fn pool_uid() -> u32 {
    cordon_backend_linux::UidPool::DEFAULT_FIRST
        + cordon_backend_linux::UidPool::DEFAULT_COUNT
        + 1_000
}

fn one_uid_backend() -> Result<LinuxBackend, String> {
    Ok(LinuxBackend::new().with_uid_pool(cordon_backend_linux::UidPool::new(pool_uid(), 1)?))
}

/// The killed host: runs a tier-landlock sandbox of the one-uid pool that
/// writes a secret into its scratch, prints the scratch's path, and
/// sleeps; the scenario SIGKILLs this process, so no handback runs.
pub(super) fn holder_helper() -> ! {
    use tokio::io::AsyncBufReadExt;
    let base = std::env::var(BASE_ENV).unwrap_or_default();
    let r = (|| -> Result<String, String> {
        let mut cfg = config();
        cfg.scratch_base = PathBuf::from(base);
        let sp = Spawner::confined(Arc::new(one_uid_backend()?.with_tier(Tier::Landlock)), cfg);
        rt().block_on(async {
            let mut child = sp
                .spawn(&sh(
                    "echo \"the last holder's\" > secret; pwd; exec sleep 600",
                ))
                .map_err(|e| e.to_string())?;
            let out = child.stdout.take().ok_or("no stdout")?;
            let mut lines = tokio::io::BufReader::new(out).lines();
            let line = lines.next_line().await.map_err(|e| e.to_string())?;
            // Never reaped: the host is killed with the child running.
            std::mem::forget(child);
            line.ok_or_else(|| "the sandbox printed nothing".to_string())
        })
    })();
    println!("{}", r.unwrap_or_else(|e| format!("error: {e}")));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs(600));
    std::process::exit(0);
}

/// A root host's sandbox uid is reused: the host of a tier-landlock
/// sandbox is SIGKILLed (no handback runs, its scratch stays, the uid's
/// and 0700, with a secret in it, and the lease dies with it); a later
/// sandbox of either tier that gets the same uid (a pool of one), with its
/// scratch in another base and a read-only grant of the first, finds it
/// out of reach.
pub(super) fn a_reused_uid_finds_nothing_of_its_last_holder() -> Outcome {
    use std::os::unix::fs::MetadataExt;
    if !is_root() {
        // Only a root host leases uids.
        return Ok(());
    }
    let uid = pool_uid();
    let base = existing_scratch();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut helper = Command::new(exe)
        .env(SCENARIO_ENV, HOLDER_HELPER)
        .env(BASE_ENV, base.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    let read = std::io::BufRead::read_line(
        &mut std::io::BufReader::new(helper.stdout.take().unwrap()),
        &mut line,
    );
    let _ = helper.kill();
    let _ = helper.wait();
    read.map_err(|e| e.to_string())?;
    let left = PathBuf::from(line.trim());
    ensure(left.is_absolute(), || {
        format!("the killed host said {line:?}")
    })?;
    // Its sandbox dies with it (parent-death signal); the uid is free for
    // the next holder once no task of it is left.
    let deadline = Instant::now() + Duration::from_secs(60);
    while uid_has_tasks(uid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    ensure(!uid_has_tasks(uid), || {
        "the killed host's sandbox lives on".into()
    })?;
    // Positive control: the leftover is there, the uid's, with the secret.
    let owner = std::fs::metadata(&left).map(|m| m.uid()).ok();
    ensure(owner == Some(uid), || {
        format!("no leftover of uid {uid} to try: {left:?} is uid {owner:?}'s")
    })?;
    // The next holder's scratch is in another base (so its own sweep of
    // that base does not race the reclaim), with the first base granted.
    let other_base = existing_scratch();
    std::fs::set_permissions(other_base.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let mut cfg = config();
    cfg.scratch_base = other_base.path().to_path_buf();
    cfg.read_only = vec![base.path().to_path_buf()];
    let sp = Spawner::confined(Arc::new(one_uid_backend()?), cfg);
    let read = format!(
        "import os\nprint(os.getuid())\ntry:\n    print(open({s:?}).read())\nexcept OSError as e:\n    \
         print('refused', e.errno)",
        s = left.join("secret").to_str().unwrap()
    );
    let r = run_with(&sp, py(&read))?;
    ensure(!r.stdout.contains("the last holder's"), || {
        format!("the sandbox read what the uid's last holder left: {r}")
    })?;
    ensure(r.stdout.contains("refused"), || {
        format!("the read was not tried: {r}")
    })?;
    // The leftover is still there for a sweep of its base, now root's.
    let owner = std::fs::metadata(&left).map(|m| m.uid()).ok();
    ensure(owner == Some(0), || {
        format!("the leftover is uid {owner:?}'s, not handed back to root")
    })
}

/// Whether the kernel knows a task of `uid` (`getpriority(PRIO_USER)`
/// fails with `ESRCH` when none).
fn uid_has_tasks(uid: u32) -> bool {
    // SAFETY: getpriority reads the scheduler state only.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: as above.
    let r = unsafe { libc::getpriority(libc::PRIO_USER, uid) };
    !(r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
}
