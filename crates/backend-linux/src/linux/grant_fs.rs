//! Filesystems no grant may reach: where a file opened through a grant
//! takes from a pool the whole host shares, whatever the seccomp filter
//! says of the calls.
//!
//! - **hugetlbfs**: `mmap` of a file there (even `MAP_PRIVATE` of a file
//!   opened read-only, which reserves pages for copy-on-write) takes huge
//!   pages from the host's pool (`vm.nr_hugepages`) without the
//!   `MAP_HUGETLB` flag the filter refuses. systemd hosts mount one at
//!   `/dev/hugepages`, so `--ro /dev` or `--ro /` is refused there.
//!
//! A grant is refused when its path is on such a filesystem, or when it is
//! a directory with such a mount anywhere below it (this process's mount
//! table: what the sandbox's view is built from).

use std::path::Path;

use cordon_core::mountinfo::Mount;

use super::landlock_rules::{Grant, PathRule};

/// `HUGETLBFS_MAGIC` (`statfs`'s `f_type`).
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;

/// The filesystem types refused, by mountinfo's name and `statfs` magic.
const POOLED: [(&str, i64); 1] = [("hugetlbfs", HUGETLBFS_MAGIC)];

/// Refuses any rule of `rules` (the caller's grants, not the backend's
/// optional system set) that reaches a filesystem of [`POOLED`]. A
/// `fresh_scratch` (made empty for this sandbox) has nothing mounted
/// below it: only its own filesystem is checked, and the mount table is
/// read only when another directory is granted.
///
/// # Errors
/// What reaches it, and what to grant instead; or that the mount table
/// could not be read (a check that cannot look must not pass).
pub(crate) fn refuse_pooled(rules: &[PathRule], fresh_scratch: bool) -> Result<(), String> {
    let granted = rules.iter().filter(|r| !r.optional);
    let mut mounts: Option<Vec<Mount>> = None;
    for r in granted {
        if let Some(fs) = pooled_at(&r.path) {
            return Err(format!(
                "`{}` is on a {fs} filesystem: a file there takes from the host's huge page \
                 pool, which one sandbox could empty for every other user; grant a path on \
                 another filesystem",
                r.path.display()
            ));
        }
        if !r.is_dir || (fresh_scratch && r.grant == Grant::Scratch) {
            continue;
        }
        if mounts.is_none() {
            mounts = Some(cordon_core::mountinfo::read().map_err(|e| {
                format!("cannot read /proc/self/mountinfo to check the grants: {e}")
            })?);
        }
        if let Some(m) = mounts.as_deref().and_then(|m| pooled_below(m, &r.path)) {
            return Err(format!(
                "`{}` has a {} mount below it, at `{}`: a file there takes from the host's \
                 huge page pool, which one sandbox could empty for every other user; grant \
                 the directories you need beside it instead",
                r.path.display(),
                m.fstype,
                m.at.display()
            ));
        }
    }
    Ok(())
}

/// The refused filesystem type `path` is on, if it is.
fn pooled_at(path: &Path) -> Option<&'static str> {
    let st = rustix::fs::statfs(path).ok()?;
    POOLED
        .iter()
        .find(|(_, magic)| st.f_type as i64 == *magic)
        .map(|(name, _)| *name)
}

/// A mount of a refused type at or below `dir`.
fn pooled_below<'a>(mounts: &'a [Mount], dir: &Path) -> Option<&'a Mount> {
    mounts
        .iter()
        .find(|m| m.at.starts_with(dir) && POOLED.iter().any(|(name, _)| m.fstype == *name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_below_a_granted_dir_is_found() {
        let mounts = cordon_core::mountinfo::parse(
            "22 1 0:21 / / rw - ext4 /dev/vda rw\n\
             30 22 0:40 / /dev/hugepages rw - hugetlbfs hugetlbfs rw,pagesize=2M\n\
             31 22 0:41 / /devx rw - tmpfs none rw\n",
        );
        let at = |d: &str| pooled_below(&mounts, Path::new(d)).map(|m| m.id);
        assert_eq!(at("/"), Some(30));
        assert_eq!(at("/dev"), Some(30));
        assert_eq!(at("/dev/hugepages"), Some(30));
        assert_eq!(at("/devx"), None);
        assert_eq!(at("/usr"), None);
    }
}
