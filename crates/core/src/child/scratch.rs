//! A child's scratch dir: made for it (or the caller's, kept), and
//! removed with the child unless kept.

use std::path::{Path, PathBuf};

/// The scratch directory of one child; removed on drop unless kept.
#[derive(Debug)]
pub(crate) struct ScratchGuard {
    path: PathBuf,
    owned: Option<tempfile::TempDir>,
    fresh: bool,
}

impl ScratchGuard {
    pub(crate) fn borrowed(path: PathBuf) -> Self {
        ScratchGuard {
            path,
            owned: None,
            fresh: false,
        }
    }

    /// A mount point the backend covers with a private filesystem in the
    /// sandbox: fresh for the child, nothing to remove on the host.
    pub(crate) fn private(mountpoint: PathBuf) -> Self {
        ScratchGuard {
            path: mountpoint,
            owned: None,
            fresh: true,
        }
    }

    pub(crate) fn owned(dir: tempfile::TempDir, canonical: PathBuf, keep: bool) -> Self {
        if keep {
            let _ = dir.keep();
            ScratchGuard {
                path: canonical,
                owned: None,
                fresh: true,
            }
        } else {
            ScratchGuard {
                path: canonical,
                owned: Some(dir),
                fresh: true,
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// True when the runner created the directory for this child.
    pub(crate) fn is_fresh(&self) -> bool {
        self.fresh
    }

    pub(crate) fn remove(&mut self) {
        if let Some(dir) = self.owned.take() {
            let path = dir.path().to_path_buf();
            // `keep`: the dir is ours to remove from here on, also if
            // the first try fails.
            let path_kept = dir.keep();
            if std::fs::remove_dir_all(&path_kept).is_err() {
                // The sandbox may have left a dir it cannot be entered or
                // emptied through (mode 0500, say): it is the caller's
                // (or root's) own, so give each dir back its owner's
                // rights and try once more.
                make_dirs_removable(&path_kept);
                if let Err(e) = std::fs::remove_dir_all(&path_kept) {
                    tracing::warn!(path = %path.display(), error = %e, "could not remove scratch dir");
                }
            }
        }
    }
}

/// Gives every dir under `dir` (itself included) `rwx` for its owner, on
/// its own fd (opened without following a link), so that a tree a sandbox
/// left can be removed.
fn make_dirs_removable(dir: &Path) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
    else {
        return;
    };
    let Ok(meta) = f.metadata() else { return };
    let _ = f.set_permissions(std::fs::Permissions::from_mode(
        (meta.permissions().mode() & 0o7777) | 0o700,
    ));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            make_dirs_removable(&entry.path());
        }
    }
}

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        self.remove();
    }
}
