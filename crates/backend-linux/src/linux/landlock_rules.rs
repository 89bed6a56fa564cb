//! The Landlock ruleset: which paths get which rights.
//!
//! Built in the parent with the `landlock` crate, handling every access
//! right of the running kernel's ABI with `CompatLevel::HardRequirement`
//! (nothing the ABI offers is silently dropped). The child only calls
//! `landlock_restrict_self` on the resulting fd.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    make_bitflags, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};

/// System directories granted read + execute so that dynamically linked
/// programs start. Missing ones are skipped; symlinked ones (merged /usr)
/// are canonicalised and deduplicated.
pub const SYSTEM_EXEC_DIRS: &[&str] = &[
    "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Single files under /etc granted read-only. Not /etc wholesale.
pub const SYSTEM_READ_FILES: &[&str] = &[
    // The dynamic loader's cache of library locations.
    "/etc/ld.so.cache",
    // Time zone for localtime(3).
    "/etc/localtime",
    // getpwuid/getgrgid (id, whoami, python's pwd, git's ident lookup) and
    // how to resolve them.
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    // git dies when the system config exists but cannot be read.
    "/etc/gitconfig",
    // OpenSSL's config: node (and anything linking OpenSSL 3) refuses to
    // start when it exists but cannot be read.
    "/etc/ssl/openssl.cnf",
    // The time zone's name and the locale aliases (glibc, Java, Python).
    "/etc/timezone",
    "/etc/locale.alias",
    "/etc/default/locale",
];

/// Public system configuration that package managers, build tools and
/// interactive programs read (found by tracing `pip install`, `npm
/// install`, `git clone`, `make`/`gcc`, `bash -i`, `python3`, `vi`, `less`
/// with `strace`), granted read-only **only when world-readable** (mode
/// `o+r`, looked at each spawn): a file root keeps private (a token in
/// `/etc/npmrc` or `/etc/pip.conf` made 0600) stays out. Secrets are never
/// listed (`/etc/shadow`, `/etc/gshadow`, `/etc/ssl/private`,
/// `/etc/sudoers*`, `/etc/ssh`, `/etc/krb5.keytab`: a test holds them out).
pub const SYSTEM_PUBLIC_FILES: &[&str] = &[
    // The distribution's name and version (pip's platform tags, Python's
    // `platform`, `distro`).
    "/etc/debian_version",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/issue",
    // Package managers' system-wide settings (index mirrors, CA files).
    "/etc/pip.conf",
    "/etc/xdg/pip/pip.conf",
    "/etc/npmrc",
    // Name and service lookup: `localhost`, ports by name (the proxy does
    // the real resolving; libraries still read them).
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    // File types (Python's `mimetypes`, Go's `mime`).
    "/etc/mime.types",
    // Interactive programs under `-t`: readline, bash, vim, nano.
    "/etc/inputrc",
    "/etc/bash.bashrc",
    "/etc/vim/vimrc",
    "/etc/nanorc",
    "/etc/ld.so.preload",
];

/// Directories under /etc granted read-only: public configuration that
/// runtimes read at start, nothing secret. `/etc/ssl/private` (keys) is
/// deliberately not among them: only the public certificates are.
pub const SYSTEM_READ_DIRS: &[&str] = &[
    // CA certificates, for TLS clients (which still cannot connect: the
    // network is denied, but libraries load them at start).
    "/etc/ssl/certs",
    // Debian's alternatives: /usr/bin/java -> /etc/alternatives/java -> ...
    "/etc/alternatives",
    // Terminal descriptions (ncurses looks here before /usr/share/terminfo).
    "/etc/terminfo",
];

/// Prefixes of directories in /etc granted read-only, found when the
/// ruleset is built: a runtime's own configuration whose name carries its
/// version. OpenJDK's `conf/` (`java.security`, `jvm.cfg`, …) is a set of
/// symlinks into `/etc/java-<version>-openjdk`; the JVM aborts without it.
/// Debian's `python3*` dirs hold `sitecustomize.py` and the interpreter's
/// defaults (`debian_config`).
pub const SYSTEM_READ_DIR_PREFIXES: &[&str] = &["java-", "python3"];

/// Devices granted read + write (+ truncate for `> /dev/null`, + ioctl so
/// `isatty()` gets its usual ENOTTY). `/dev/tty` opens the opener's own
/// controlling terminal, never another's: a sandbox has none (`ENXIO`)
/// unless it was given a pty of its own (`StdioMode::Terminal`), which
/// `less`, `git` and `ssh` then open to talk to the user.
pub const SYSTEM_RW_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// Devices granted read-only.
pub const SYSTEM_READ_DEVICES: &[&str] = &["/dev/urandom", "/dev/random"];

/// What a grant is for; decides the rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The scratch dir: everything but device nodes.
    Scratch,
    /// Package dir and system dirs: read + execute.
    ReadExec,
    /// Extra read-only grants: read (+ execute for directories).
    ReadOnly,
    /// Extra read-write grants: read + write, no execute, no devices.
    ReadWrite,
    /// A container's writable root: everything but making device nodes,
    /// execute included.
    Container,
    /// Device files read + write.
    RwDevice,
    /// Read-only files and devices.
    ReadFileOnly,
}

/// One path rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathRule {
    /// Canonical path.
    pub path: PathBuf,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// What it is for.
    pub grant: Grant,
    /// Skipped when the path does not exist (the backend's system set,
    /// which varies between distributions); a policy grant is required.
    pub optional: bool,
}

/// The rights for `grant` on a directory or a file, within `abi`.
pub(crate) fn rights(abi: ABI, grant: Grant, is_dir: bool) -> BitFlags<AccessFs> {
    let all = AccessFs::from_all(abi);
    let read_dir = make_bitflags!(AccessFs::{ReadFile | ReadDir});
    let devices = make_bitflags!(AccessFs::{MakeChar | MakeBlock});
    let wanted = match grant {
        Grant::Scratch | Grant::Container => all & !devices,
        Grant::ReadExec => read_dir | AccessFs::Execute,
        Grant::ReadOnly if is_dir => read_dir | AccessFs::Execute,
        Grant::ReadOnly => BitFlags::from(AccessFs::ReadFile),
        Grant::ReadWrite => read_dir | (AccessFs::from_write(abi) & !devices),
        Grant::RwDevice => make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate | IoctlDev}),
        Grant::ReadFileOnly => BitFlags::from(AccessFs::ReadFile),
    };
    let wanted = wanted & all;
    if is_dir {
        wanted
    } else {
        // Directory-only rights on a file rule are an error for the kernel.
        wanted & AccessFs::from_file(abi)
    }
}

/// Canonicalises a grant path: it must be absolute and exist (a dangling
/// symlink is an error naming the link).
/// The first symlink that resolving `path` goes through and that neither
/// this process's euid nor root owns (the kernel's `protected_symlinks`
/// rule, for every directory, not only sticky ones), if any.
fn foreign_symlink(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut todo: Vec<std::ffi::OsString> = path
        .components()
        .rev()
        .map(|c| c.as_os_str().to_os_string())
        .collect();
    let mut at = PathBuf::from("/");
    // A bound on links followed, as the kernel's 40.
    let mut links = 0;
    while let Some(part) = todo.pop() {
        match part.to_str() {
            Some("/") | Some(".") => continue,
            Some("..") => {
                at.pop();
                continue;
            }
            _ => {}
        }
        let next = at.join(&part);
        let Ok(meta) = next.symlink_metadata() else {
            return None; // canonicalize reports what is missing
        };
        if !meta.file_type().is_symlink() {
            at = next;
            continue;
        }
        links += 1;
        if meta.uid() != 0 && meta.uid() != me {
            return Some(next);
        }
        let Ok(target) = std::fs::read_link(&next) else {
            return None;
        };
        if links > 40 {
            return None;
        }
        if target.is_absolute() {
            at = PathBuf::from("/");
        }
        todo.extend(
            target
                .components()
                .rev()
                .map(|c| c.as_os_str().to_os_string()),
        );
    }
    None
}

pub(crate) fn canonical_grant(kind: &str, path: &Path) -> Result<(PathBuf, bool), String> {
    if !path.is_absolute() {
        return Err(format!(
            "{kind} path `{}` is not absolute: give an absolute path",
            path.display()
        ));
    }
    if let Some(link) = foreign_symlink(path) {
        return Err(format!(
            "{kind} path `{}` goes through the symlink `{}`, which is neither yours nor \
             root's: another user could point it anywhere you may reach; give the path it \
             should resolve to",
            path.display(),
            link.display()
        ));
    }
    match path.canonicalize() {
        Ok(p) => {
            let is_dir = p
                .metadata()
                .map_err(|e| format!("{kind} path `{}` is not usable: {e}", path.display()))?
                .is_dir();
            Ok((p, is_dir))
        }
        Err(e) => {
            let dangling = path
                .symlink_metadata()
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
            if dangling {
                Err(format!(
                    "{kind} path `{}` is a dangling symlink ({e}): point it at an existing path \
                     or remove it from the policy",
                    path.display()
                ))
            } else {
                Err(format!(
                    "{kind} path `{}` does not exist or cannot be resolved ({e}): create it or \
                     remove it from the policy",
                    path.display()
                ))
            }
        }
    }
}

/// Landlock rights are inherited down the tree and only ever added: a
/// read-only grant inside the scratch dir or a read-write grant would be
/// writable anyway. Refuse such a policy instead of weakening it silently.
pub(crate) fn check_no_read_only_under_writable(rules: &[PathRule]) -> Result<(), String> {
    for ro in rules.iter().filter(|r| r.grant == Grant::ReadOnly) {
        for w in rules.iter().filter(|r| {
            matches!(
                r.grant,
                Grant::Scratch | Grant::ReadWrite | Grant::Container
            ) && r.is_dir
        }) {
            if ro.path.starts_with(&w.path) {
                return Err(format!(
                    "read-only grant `{}` lies inside the writable {} `{}`: Landlock rights are \
                     inherited down the tree, so it would be writable. Move it out of `{}` or \
                     drop the grant",
                    ro.path.display(),
                    if w.grant == Grant::Scratch {
                        "scratch dir"
                    } else {
                        "read-write grant"
                    },
                    w.path.display(),
                    w.path.display()
                ));
            }
        }
    }
    Ok(())
}

/// The minimal system set, as listed (not canonicalised: [`build`] opens
/// each path, following symlinks, skips the ones that do not exist on
/// this host and the duplicates merged `/usr` makes, by inode).
pub(crate) fn system_rules() -> Vec<PathRule> {
    let mut out = Vec::new();
    let mut push = |paths: &[&str], grant: Grant| {
        for p in paths {
            out.push(PathRule {
                path: PathBuf::from(p),
                is_dir: false,
                grant,
                optional: true,
            });
        }
    };
    push(SYSTEM_EXEC_DIRS, Grant::ReadExec);
    push(SYSTEM_READ_FILES, Grant::ReadFileOnly);
    let public: Vec<&str> = SYSTEM_PUBLIC_FILES
        .iter()
        .copied()
        .filter(|p| world_readable(Path::new(p)))
        .collect();
    push(&public, Grant::ReadFileOnly);
    push(SYSTEM_READ_DIRS, Grant::ReadOnly);
    let versioned = versioned_etc_dirs();
    let versioned: Vec<&str> = versioned.iter().map(String::as_str).collect();
    push(&versioned, Grant::ReadOnly);
    push(SYSTEM_RW_DEVICES, Grant::RwDevice);
    push(SYSTEM_READ_DEVICES, Grant::ReadFileOnly);
    out
}

/// True when `path` (its target, for a link) is a regular file every user
/// may read.
fn world_readable(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.mode() & 0o004 != 0)
}

/// The `/etc` dirs named by [`SYSTEM_READ_DIR_PREFIXES`] (`/etc/python3.12`,
/// say), sorted. Listing `/etc` cost about 60 µs per spawn, so the list is
/// kept and read again only when `/etc`'s modification time (which every
/// entry added, removed or renamed changes) is not the one it was read at.
fn versioned_etc_dirs() -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    type Listing = Option<((i64, i64), Vec<String>)>;
    static CACHE: std::sync::Mutex<Listing> = std::sync::Mutex::new(None);
    let stamp = std::fs::metadata("/etc").map(|m| (m.mtime(), m.mtime_nsec()));
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let (Ok(now), Some((then, list))) = (&stamp, cache.as_ref()) {
        if now == then {
            return list.clone();
        }
    }
    let mut versioned: Vec<String> = std::fs::read_dir("/etc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| SYSTEM_READ_DIR_PREFIXES.iter().any(|p| n.starts_with(p)))
                .map(|n| format!("/etc/{n}"))
                .collect()
        })
        .unwrap_or_default();
    versioned.sort();
    *cache = stamp.ok().map(|s| (s, versioned.clone()));
    versioned
}

/// Device, inode and directory-ness of an open fd.
fn fd_identity(fd: &PathFd) -> std::io::Result<(u64, u64, bool)> {
    use std::os::fd::{AsFd, AsRawFd};
    // SAFETY: fstat writes into `st`; the fd is open for the call.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_fd().as_raw_fd(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        st
    };
    Ok((
        st.st_dev as u64,
        st.st_ino as u64,
        st.st_mode & libc::S_IFMT == libc::S_IFDIR,
    ))
}

/// Builds the ruleset for `abi` and returns its fd (`O_CLOEXEC`).
/// `connect_port`: the one TCP port the sandbox may connect to (the
/// egress proxy's, in the sandbox's own network); `None`: no TCP at all.
/// Below ABI 4 Landlock has no network rights, and the network namespace
/// and the seccomp filter hold alone.
/// What the ruleset says of TCP (Landlock ABI 4 and later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetRules {
    /// Every bind and connect denied (`Network::Deny`).
    Denied,
    /// A connect to this port only: the egress proxy's (`Network::Allow`).
    ProxyPort(u16),
    /// Not handled: the sandbox's own network namespace, which is never
    /// the host's, bounds it (`Network::Namespace`).
    Open,
}

pub(crate) fn build(
    abi_version: i32,
    rules: &[PathRule],
    net: NetRules,
) -> Result<OwnedFd, String> {
    let abi = ABI::from(abi_version);
    if abi == ABI::Unsupported {
        return Err("Landlock is not supported by this kernel".into());
    }
    let ll = |e: landlock::RulesetError| format!("cannot build the Landlock ruleset: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(ll)?;
    if abi >= ABI::V4 && net != NetRules::Open {
        // Every TCP bind and connect is denied, but a connect to the
        // egress proxy's port (below).
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(ll)?;
    }
    if abi >= ABI::V6 {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(ll)?;
    }
    let mut created = ruleset.create().map_err(ll)?;
    if let (NetRules::ProxyPort(port), true) = (net, abi >= ABI::V4) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(ll)?;
    }
    let mut seen: Vec<(u64, u64, Grant)> = Vec::new();
    for r in rules {
        let fd = match PathFd::new(&r.path) {
            Ok(fd) => fd,
            // A system path this host does not have grants nothing.
            Err(_) if r.optional && !r.path.exists() => continue,
            Err(e) => {
                return Err(format!(
                    "cannot open `{}` for a Landlock rule: {e}",
                    r.path.display()
                ))
            }
        };
        // The kind of the file actually opened (a grant may have been
        // checked earlier; a symlinked system path is followed here).
        let (dev, ino, is_dir) = fd_identity(&fd).map_err(|e| {
            format!(
                "cannot stat `{}` for a Landlock rule: {e}",
                r.path.display()
            )
        })?;
        if seen.contains(&(dev, ino, r.grant)) {
            continue;
        }
        seen.push((dev, ino, r.grant));
        let access = rights(abi, r.grant, is_dir);
        if access.is_empty() {
            continue;
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| {
                format!(
                    "cannot add the Landlock rule for `{}`: {e}",
                    r.path.display()
                )
            })?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| "the Landlock ruleset has no file descriptor (Landlock unsupported)".into())
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's UAPI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const LANDLOCK_RULE_PATH_BENEATH: libc::c_uint = 1;

/// Adds a rule for the private tmpfs now mounted on the cwd (the
/// scratch) with `rights` to `ruleset`, before `landlock_restrict_self`
/// snapshots it: Landlock ignores a rule on a mount point hidden under a
/// mount, so the rule must name the tmpfs root, which exists only in the
/// child. Async-signal-safe.
pub(crate) fn add_scratch_rule(ruleset: &std::os::fd::OwnedFd, rights: u64) -> std::io::Result<()> {
    add_mount_rule(ruleset, c".", rights)
}

/// Adds a rule with `rights` for the root of the mount now at `path` (a
/// reviewed dir's overlay, as [`add_scratch_rule`] for the scratch's
/// tmpfs). Async-signal-safe.
pub(crate) fn add_mount_rule(
    ruleset: &std::os::fd::OwnedFd,
    path: &std::ffi::CStr,
    rights: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: raw syscalls on a NUL-terminated string, an fd we own and a
    // struct the kernel reads `size_of` bytes from.
    unsafe {
        let dir = libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let attr = PathBeneathAttr {
            allowed_access: rights,
            parent_fd: dir,
        };
        let r = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        );
        let err = std::io::Error::last_os_error();
        libc::close(dir);
        if r < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// `landlock_restrict_self(ruleset, 0)`: the calling thread (the whole
/// program, single-threaded here) is confined by the ruleset from now on,
/// and so is everything it starts. Async-signal-safe.
pub(crate) fn restrict_self(ruleset: &std::os::fd::OwnedFd, flags: u32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a raw syscall on an fd we own.
    super::sys::check_long(unsafe {
        libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), flags)
    })
}

/// `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` (ABI 7): log the domain's
/// refusals after the program's exec too (explain mode, `audit.rs`).
pub(crate) const LOG_NEW_EXEC_ON: u32 = 1 << 1;

#[cfg(test)]
mod tests;
