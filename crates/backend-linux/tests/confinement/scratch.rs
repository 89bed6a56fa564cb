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

/// A root host's sandbox uid is reused: a later sandbox that gets the
/// same uid (a pool of one) and a read-only grant of the scratch base
/// finds nothing of the earlier holder's there. The earlier holder's
/// scratch is planted as a killed host leaves it in tier landlock (its
/// dir and file the uid's own, 0700/0600, no handback ran), which any
/// tier's sandbox of that uid could read through a grant of the base.
pub(super) fn a_reused_uid_finds_nothing_of_its_last_holder() -> Outcome {
    if !is_root() {
        // Only a root host leases uids.
        return Ok(());
    }
    // Outside the default range, which other tests' sandboxes lease from.
    let uid = cordon_backend_linux::UidPool::DEFAULT_FIRST
        + cordon_backend_linux::UidPool::DEFAULT_COUNT
        + 1_000;
    let pool = cordon_backend_linux::UidPool::new(uid, 1)?;
    let base = existing_scratch();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    // Its creator's pid names a live process now (pids are reused: here,
    // this one), so no sweep takes it: only the handback stands between
    // it and the next holder of the uid.
    let left = base.path().join(format!(
        "{}{}-Dead01",
        cordon_core::SCRATCH_PREFIX,
        std::process::id()
    ));
    std::fs::create_dir(&left).map_err(|e| e.to_string())?;
    std::fs::write(left.join("secret"), "the last holder's").map_err(|e| e.to_string())?;
    for (p, mode) in [(&left, 0o700), (&left.join("secret"), 0o600)] {
        std::os::unix::fs::chown(p, Some(uid), Some(uid)).map_err(|e| e.to_string())?;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| e.to_string())?;
    }
    let mut cfg = config();
    cfg.scratch_base = base.path().to_path_buf();
    cfg.read_only = vec![base.path().to_path_buf()];
    let sp = Spawner::confined(Arc::new(LinuxBackend::new().with_uid_pool(pool)), cfg);
    let secret = left.join("secret");
    let read = format!(
        "import os\nprint(os.getuid())\ntry:\n    print(open({s:?}).read())\nexcept OSError as e:\n    \
         print('refused', e.errno)",
        s = secret.to_str().unwrap()
    );
    let r = run_with(&sp, py(&read))?;
    ensure(!r.stdout.contains("the last holder's"), || {
        format!("the sandbox read what the uid's last holder left: {r}")
    })?;
    ensure(r.stdout.contains("refused"), || {
        format!("the read was not tried: {r}")
    })?;
    // The leftover is still there, the caller's now.
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(&left).map(|m| m.uid()).ok();
    ensure(owner == Some(0), || {
        format!("the leftover is uid {owner:?}'s, not handed back to root")
    })
}
