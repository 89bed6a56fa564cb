//! `/proc/<pid>/mountinfo` and `/proc/self/cgroup`, read one way for every
//! crate that needs them: the policy loader (where a file's filesystem
//! is mounted), the probes (a mount's options in a sandbox), the backend
//! and the gate (their own cgroup directory) and the grant checks (which
//! filesystems a grant reaches).
//!
//! The format is the kernel's (`proc(5)`): one mount per line, fields
//! separated by spaces, optional fields up to a lone `-`, paths with
//! spaces, tabs, newlines and backslashes written as octal escapes
//! (`\040`). Lines that do not parse are skipped. Linux only; elsewhere
//! [`read`] finds nothing to read.
//!
//! ```
//! let line = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw,errors=continue";
//! let m = &cordon_core::mountinfo::parse(line)[0];
//! assert_eq!(m.at, std::path::Path::new("/mnt/a b"));
//! assert_eq!((m.fstype.as_str(), m.dev.as_str()), ("ext3", "98:0"));
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mount {
    /// The mount's ID (field 1).
    pub id: u64,
    /// Its parent's ID (field 2).
    pub parent: u64,
    /// The filesystem's device, `major:minor` (field 3).
    pub dev: String,
    /// The directory of its filesystem it shows (field 4).
    pub root: PathBuf,
    /// Where it is mounted (field 5).
    pub at: PathBuf,
    /// The per-mount options (field 6: `ro`, `nosuid`, …).
    pub options: String,
    /// The filesystem type (after the `-`).
    pub fstype: String,
    /// The filesystem's source (`/dev/sda1`, `none`, …).
    pub source: String,
    /// The per-superblock options (for a v1 cgroup hierarchy, its
    /// controllers).
    pub super_options: String,
}

/// The mounts in `text` (mountinfo's format), in the kernel's order: a
/// later mount at the same point is on top of an earlier one.
pub fn parse(text: &str) -> Vec<Mount> {
    parse_bytes(text.as_bytes())
}

/// [`parse`] of the raw bytes: the kernel escapes only space, tab,
/// newline and backslash, so a mount point may hold any other byte, valid
/// UTF-8 or not (any user with `fusermount` can make one), and one such
/// line must not hide the rest.
pub fn parse_bytes(text: &[u8]) -> Vec<Mount> {
    text.split(|b| *b == b'\n').filter_map(parse_line).collect()
}

fn parse_line(line: &[u8]) -> Option<Mount> {
    let sep = line.windows(3).position(|w| w == b" - ")?;
    let (pre, post) = (&line[..sep], &line[sep + 3..]);
    let f: Vec<&[u8]> = pre.split(|b| *b == b' ').collect();
    let mut post = post.split(|b| *b == b' ');
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse().ok();
    Some(Mount {
        id: number(f.first()?)?,
        parent: number(f.get(1)?)?,
        dev: text(f.get(2)?),
        root: PathBuf::from(unescape_bytes(f.get(3)?)),
        at: PathBuf::from(unescape_bytes(f.get(4)?)),
        options: text(f.get(5)?),
        fstype: text(post.next()?),
        source: unescape_bytes(post.next().unwrap_or(b""))
            .to_string_lossy()
            .into_owned(),
        super_options: text(post.next().unwrap_or(b"")),
    })
}

/// This process's mounts (`/proc/self/mountinfo`).
///
/// # Errors
/// The file could not be read (no procfs, or not Linux).
pub fn read() -> std::io::Result<Vec<Mount>> {
    read_of("self")
}

/// The mounts process `pid` sees (`/proc/<pid>/mountinfo`; `"self"` for
/// this one).
///
/// # Errors
/// The file could not be read (the process is gone, or not ours to read).
pub fn read_of(pid: &str) -> std::io::Result<Vec<Mount>> {
    Ok(parse_bytes(&std::fs::read(format!(
        "/proc/{pid}/mountinfo"
    ))?))
}

/// The mount that holds `path` (a real path, no links): the one with the
/// deepest mount point above it, the last listed where several share it.
pub fn holding<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.at))
        .fold(None, |best: Option<&Mount>, m| match best {
            Some(b) if b.at.components().count() > m.at.components().count() => best,
            _ => Some(m),
        })
}

/// This process's own cgroup directory of `controller` (a v1 hierarchy's,
/// by the controller its superblock options name; `None`: the v2 one):
/// the path `/proc/self/cgroup` gives (`cgroups`, its text) below the
/// mount point of that hierarchy's root. `None` where no mount of the
/// hierarchy's root is visible (below another root the path would not
/// line up).
pub fn own_cgroup_dir(
    cgroups: &str,
    mounts: &[Mount],
    controller: Option<&str>,
) -> Option<PathBuf> {
    let mount = mounts.iter().find(|m| {
        let hit = match controller {
            None => m.fstype == "cgroup2",
            Some(c) => m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == c),
        };
        hit && m.root == Path::new("/")
    })?;
    let path = cgroups.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let _id = f.next()?;
        let list = f.next()?;
        let path = f.next()?;
        let hit = match controller {
            None => list.is_empty(),
            Some(c) => list.split(',').any(|x| x == c),
        };
        hit.then(|| path.to_string())
    })?;
    Some(mount.at.join(path.trim_start_matches('/')))
}

/// Undoes mountinfo's octal escapes (`\040` for a space); a backslash
/// not followed by three octal digits stays as it is.
pub fn unescape(s: &str) -> OsString {
    unescape_bytes(s.as_bytes())
}

fn unescape_bytes(b: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
31 22 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw
40 22 0:30 / /tmp/a\\040b rw shared:4 - tmpfs none\\040x rw,size=1k
41 40 0:31 / /tmp/a\\040b/c rw - hugetlbfs none rw,pagesize=2M
bad line
";

    #[test]
    fn parses_fields_and_escapes() {
        let m = parse(TEXT);
        assert_eq!(m.len(), 5);
        assert_eq!(m[3].at, Path::new("/tmp/a b"));
        assert_eq!(m[3].source, "none x");
        assert_eq!(m[3].options, "rw");
        assert_eq!((m[4].id, m[4].parent), (41, 40));
        assert_eq!(m[4].fstype, "hugetlbfs");
        assert_eq!(unescape("/a\\040b\\x"), OsString::from("/a b\\x"));
    }

    #[test]
    fn a_mount_point_that_is_not_utf8_hides_no_other_line() {
        let mut text = b"22 1 0:21 / / rw - ext4 /dev/vda rw\n".to_vec();
        text.extend_from_slice(b"23 22 0:22 / /tmp/x\xff rw - tmpfs none rw\n");
        text.extend_from_slice(b"24 22 0:23 / /dev/hugepages rw - hugetlbfs none rw\n");
        let m = parse_bytes(&text);
        assert_eq!(m.len(), 3);
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(m[1].at.as_os_str().as_bytes(), b"/tmp/x\xff");
        assert_eq!(m[2].fstype, "hugetlbfs");
    }

    #[test]
    fn the_deepest_mount_holds_a_path() {
        let m = parse(TEXT);
        let at = |p: &str| holding(&m, Path::new(p)).map(|m| m.id);
        assert_eq!(at("/tmp/a b/c/d"), Some(41));
        assert_eq!(at("/tmp/a b/x"), Some(40));
        assert_eq!(at("/tmp/a bc"), Some(22));
    }

    #[test]
    fn own_cgroup_dirs() {
        let m = parse(TEXT);
        let cg = "12:memory:/user/1\n0::/init.scope\n";
        assert_eq!(
            own_cgroup_dir(cg, &m, Some("memory")),
            Some(PathBuf::from("/sys/fs/cgroup/memory/user/1"))
        );
        assert_eq!(
            own_cgroup_dir(cg, &m, None),
            Some(PathBuf::from("/sys/fs/cgroup/unified/init.scope"))
        );
        assert_eq!(own_cgroup_dir(cg, &m, Some("pids")), None);
    }
}
