//! A container's state on the host: `<root>/<id>/state.json`, written by
//! the runtime only (the state root is the runtime's own, 0700, never a
//! sandbox's), replaced whole (`hostfs::OutputFile`) so a reader never
//! sees half of it.

use std::path::{Path, PathBuf};

use cordon_core::hostfs;
use serde::{Deserialize, Serialize};

/// Where state lives when `--root` is not given.
pub const DEFAULT_ROOT: &str = "/run/cordon-runtime";

/// What the runtime knows of one container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The container's id.
    pub id: String,
    /// The bundle directory, canonical.
    pub bundle: PathBuf,
    /// The monitor's pid: the container's pid as the caller knows it (the
    /// pid file's), whose exit status is the container's.
    pub pid: i32,
    /// The monitor's start time (`/proc/<pid>/stat` field 22), so that a
    /// reused pid is never taken for it.
    pub start_time: u64,
    /// Set once `start` released the monitor.
    pub started: bool,
    /// Once started: the container's sandbox (its init's host pid and
    /// start time), which `exec` enters.
    #[serde(default)]
    pub sandbox: Option<cordon_core::policy::RunningContainer>,
    /// The bundle's annotations.
    pub annotations: std::collections::HashMap<String, String>,
}

/// A checked container id: what runc accepts (letters, digits, `_`, `-`,
/// `.`, not starting with `.`), at most 1024 bytes.
pub fn check_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 1024
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid container id `{id}`: letters, digits, `_`, `-` and `.` only, not starting \
             with `.`"
        ))
    }
}

/// The state root: made 0700 if missing; refused if it is not a
/// directory of this user's that no one else may write.
pub fn root_dir(root: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if !root.is_absolute() {
        return Err(format!(
            "--root `{}` must be an absolute path",
            root.display()
        ));
    }
    match std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(root)
    {
        Ok(()) => {}
        Err(e) => return Err(format!("--root `{}`: {e}", root.display())),
    }
    let m = std::fs::symlink_metadata(root).map_err(|e| format!("--root: {e}"))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.mode() & 0o022 != 0 {
        return Err(format!(
            "--root `{}` must be a directory of uid {me} that no one else may write",
            root.display()
        ));
    }
    Ok(root.to_path_buf())
}

/// The state dir of `id` under `root`.
pub fn dir(root: &Path, id: &str) -> PathBuf {
    root.join(id)
}

/// The copy of the bundle's `config.json` kept at `create`.
pub fn config_copy(root: &Path, id: &str) -> PathBuf {
    dir(root, id).join("config.json")
}

impl Record {
    /// Writes this record into its state dir.
    pub fn store(&self, root: &Path) -> Result<(), String> {
        let path = dir(root, &self.id).join("state.json");
        let bytes = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        hostfs::OutputFile::create(&path)
            .and_then(|f| f.commit(&bytes))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Reads the record of `id`.
    pub fn load(root: &Path, id: &str) -> Result<Record, String> {
        check_id(id)?;
        let path = dir(root, id).join("state.json");
        let bytes = hostfs::read_private(&path, 1 << 20).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("container `{id}` does not exist")
            } else {
                format!("cannot read {}: {e}", path.display())
            }
        })?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Whether the monitor still runs (same pid, same start time, not a
    /// zombie).
    pub fn monitor_alive(&self) -> bool {
        start_time(self.pid) == Some(self.start_time)
    }
}

/// Field 22 of `/proc/<pid>/stat`, or `None` when the process is gone
/// or a zombie.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start
    // after the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); field 22 is rest[19].
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        for ok in ["abc", "a.b-c_d", "0123456789abcdef"] {
            assert!(check_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "../x", "a/b", "a b", ".hidden", "a\0b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        assert!(check_id(&"a".repeat(1025)).is_err());
    }

    #[test]
    fn this_process_has_a_start_time() {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        assert!(start_time(me).is_some());
        assert_eq!(start_time(i32::MAX), None);
    }
}
