//! Staging the worker program where the sandbox uid can execute it.

use std::path::{Path, PathBuf};

pub(super) struct Staged {
    pub(super) _dir: tempfile::TempDir,
    pub(super) program: PathBuf,
    pub(super) dir: PathBuf,
}

/// Puts `program` into a fresh 0755 temp dir (so uid 65534 can execute it,
/// and the sandbox grants that dir only). A program that anyone may already
/// read and execute is hard-linked (copying a 20 MB binary dominated
/// `cordon star run`); otherwise, or across filesystems, it is copied.
pub(super) fn stage(program: &Path) -> std::io::Result<Staged> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("cordon-star-worker-")
        .permissions(std::fs::Permissions::from_mode(0o755))
        .tempdir()?;
    let name = program
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "cordon-star-worker".into());
    let dst = dir.path().join(name);
    // link(2) does not follow symlinks: link the file itself.
    let target = program.canonicalize()?;
    let meta = std::fs::metadata(&target)?;
    let world_runnable = meta.is_file() && meta.permissions().mode() & 0o005 == 0o005;
    if !(world_runnable && std::fs::hard_link(&target, &dst).is_ok()) {
        std::fs::copy(program, &dst)?;
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755))?;
    }
    let dir_path = dir.path().canonicalize()?;
    Ok(Staged {
        program: dir_path.join(dst.file_name().unwrap_or_default()),
        dir: dir_path,
        _dir: dir,
    })
}
