//! P6's sandbox-wide disk check, for a backend that claims `sandbox` scope
//! for `limit_disk`: the scratch dir of a discarded (fresh) scratch holds at
//! most `Limits::disk_bytes`, however the child spreads its writes.
//!
//! The child writes files into its scratch, each well below RLIMIT_FSIZE
//! (so the per-file limit never stops it), until a write fails or it has
//! written four times the limit. At the hold the **host** sums the sizes of
//! the files in the child's scratch (reached through `/proc/<pid>/root`, in
//! the sandbox's own mount namespace), then the child deletes them.
//!
//! - **Fail**: the host counts more than `disk_bytes` + [`MARGIN`].
//! - **Pass**: the host counts at most that, and the write that stopped the
//!   child failed with `ENOSPC` (a full filesystem: a size-limited tmpfs,
//!   `shmem_get_folio_gfp()`/`shmem_inode_acct_blocks()`, mm/shmem.c) or
//!   `EDQUOT` (a quota, `dquot_alloc_space()`, fs/quota/dquot.c).
//! - Anything else (another errno, or no error yet the host counts little)
//!   is inconclusive.

use std::path::{Path, PathBuf};

use cordon_core::CheckResult;

use crate::child::{close, errno, errno_name, open, Reporter};
use crate::harness::{fail, pass, unreachable, Hold};
use crate::inspect;

/// The check's name.
pub(crate) const NAME: &str = "sandbox-disk-limit";

/// What the host tolerates above `disk_bytes`: tmpfs rounds its size up to
/// whole pages and a quota may let a last block through; 1 MiB covers both
/// with room to spare, and is 1/64 of the probe's 64 MiB.
const MARGIN: u64 = 1 << 20;

/// The host's side, at hold `disk:<why>` (`why`: the errno that stopped
/// the child, or `none`).
pub(crate) fn at_hold(h: &Hold<'_>, limit: u64, why: &str) -> CheckResult {
    let Some(pid) = h.pid else {
        return unreachable(NAME, "the program was not found by its token");
    };
    let in_root = inspect::in_root(pid, h.scratch);
    let dir = if in_root.is_dir() {
        in_root
    } else {
        PathBuf::from(format!("/proc/{pid}/cwd"))
    };
    let (bytes, files) = match stored(&dir) {
        Ok(v) => v,
        Err(e) => {
            return unreachable(
                NAME,
                format!("cannot list the child's scratch {}: {e}", dir.display()),
            )
        }
    };
    judge(bytes, files, limit, why)
}

/// The verdict on `bytes` in `files` files counted in a scratch limited to
/// `limit`, the child having stopped with `why`.
fn judge(bytes: u64, files: u64, limit: u64, why: &str) -> CheckResult {
    if bytes > limit + MARGIN {
        fail(
            NAME,
            format!(
                "the host counts {bytes} bytes in {files} files in the sandbox's scratch; the \
                 limit is {limit} (+ {MARGIN} margin); the child stopped with {why}"
            ),
        )
    } else if why == "ENOSPC" || why == "EDQUOT" {
        pass(
            NAME,
            format!(
                "writing stopped with {why}; the host counts {bytes} bytes in {files} files in \
                 the sandbox's scratch (limit {limit} + {MARGIN} margin)"
            ),
        )
    } else {
        unreachable(
            NAME,
            format!(
                "the child stopped with {why}, not ENOSPC or EDQUOT, and the host counts only \
                 {bytes} bytes in the sandbox's scratch (limit {limit})"
            ),
        )
    }
}

/// The sizes of the regular files under `dir` (not following symlinks)
/// and how many there are.
fn stored(dir: &Path) -> std::io::Result<(u64, u64)> {
    let (mut bytes, mut files) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let m = std::fs::symlink_metadata(e.path())?;
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                bytes += m.len();
                files += 1;
            }
        }
    }
    Ok((bytes, files))
}

/// The child's side: fills its scratch (its cwd) with files of at most a
/// quarter of `limit` and below `fsize`, until a write fails or it wrote
/// four times `limit`; holds; deletes them. `limit` 0: not asked to.
pub(crate) fn child(r: &mut Reporter, limit: u64, fsize: u64) {
    if limit == 0 {
        return;
    }
    let mut per_file = (limit / 4).max(4096);
    if fsize > 0 {
        per_file = per_file.min(fsize / 2);
    }
    let cap = limit.saturating_mul(4);
    let chunk = vec![0x5au8; 1 << 20];
    // A write past RLIMIT_FSIZE would fail with EFBIG rather than kill.
    // SAFETY: setting a signal disposition.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let (mut written, mut files, mut err) = (0u64, 0u32, 0i32);
    'fill: while written < cap {
        let fd = match open(&format!("fill-{files}"), libc::O_WRONLY | libc::O_CREAT) {
            Ok(fd) => fd,
            Err(e) => {
                err = e;
                break;
            }
        };
        files += 1;
        let mut in_file = 0u64;
        while in_file < per_file && written < cap {
            let len = (chunk.len() as u64)
                .min(per_file - in_file)
                .min(cap - written);
            // SAFETY: writing `len` (≤ chunk.len()) bytes from `chunk`.
            let n = unsafe { libc::write(fd, chunk.as_ptr().cast(), len as usize) };
            if n <= 0 {
                // A write of 0 bytes has no errno: inconclusive below.
                err = if n < 0 { errno() } else { -1 };
                close(fd);
                break 'fill;
            }
            in_file += n as u64;
            written += n as u64;
        }
        close(fd);
    }
    r.info("disk-written", format!("{written} bytes in {files} files"));
    let why = match err {
        0 => "none".to_string(),
        -1 => "a write of 0 bytes".to_string(),
        e => errno_name(e),
    };
    r.hold(&format!("disk:{why}"));
    for i in 0..files {
        let _ = std::fs::remove_file(format!("fill-{i}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_core::ProbeStatus;

    #[test]
    fn verdicts() {
        let limit = 64 << 20;
        assert_eq!(judge(limit, 5, limit, "ENOSPC").status, ProbeStatus::Pass);
        assert_eq!(judge(limit, 5, limit, "EDQUOT").status, ProbeStatus::Pass);
        // Past the limit: a breach, whatever stopped the child.
        assert_eq!(
            judge(4 * limit, 16, limit, "none").status,
            ProbeStatus::Fail
        );
        assert_eq!(
            judge(limit + MARGIN + 1, 6, limit, "ENOSPC").status,
            ProbeStatus::Fail
        );
        // Stopped by something else, or the host sees nothing: undecided.
        assert_eq!(
            judge(32 << 20, 2, limit, "EFBIG").status,
            ProbeStatus::Unreachable
        );
        assert_eq!(judge(0, 0, limit, "none").status, ProbeStatus::Unreachable);
    }

    #[test]
    fn stored_counts_regular_files_below_a_dir() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), [0u8; 100]).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/b"), [0u8; 28]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("l")).unwrap();
        assert_eq!(stored(dir.path()).unwrap(), (128, 2));
    }
}
