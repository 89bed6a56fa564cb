//! The Seatbelt profile generator: a pure function of the policy and a
//! path canonicaliser.
//!
//! Policy paths never appear in the profile text. Each one is referenced as
//! `(param "KEY")` and its value travels as a separate `-DKEY=VALUE`
//! argument to `sandbox-exec`, so a path containing quotes, parentheses,
//! semicolons or newlines cannot change the meaning of the profile. Only
//! this crate's own constants (the system runtime set) are written as SBPL
//! string literals, through [`sbpl_string`].

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use cordon_core::{Network, SandboxPolicy};

/// Turns a path into the canonical path Seatbelt will see.
///
/// Seatbelt matches the *resolved* path of every vnode: a rule for `/tmp/x`
/// never matches, because the kernel sees `/private/tmp/x`. Every policy
/// path therefore goes through a canonicaliser before it reaches the
/// profile. The trait exists so tests can inject a resolver; production
/// code uses [`FsCanonicalizer`].
///
/// Any `Fn(&Path) -> io::Result<PathBuf> + Send + Sync` is a canonicaliser.
pub trait Canonicalize: Send + Sync {
    /// Resolves every symlink in `path` and returns the absolute result.
    /// A path that does not exist yields an error of kind
    /// [`io::ErrorKind::NotFound`].
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
}

impl<F> Canonicalize for F
where
    F: Fn(&Path) -> io::Result<PathBuf> + Send + Sync,
{
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self(path)
    }
}

/// The real canonicaliser: [`std::fs::canonicalize`] (`realpath(3)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct FsCanonicalizer;

impl Canonicalize for FsCanonicalizer {
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }
}

/// Which part of the policy a path came from (used in error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRole {
    /// [`SandboxPolicy::scratch_dir`].
    Scratch,
    /// [`SandboxPolicy::package_dir`].
    Package,
    /// An entry of [`SandboxPolicy::program_files`].
    Program,
    /// An entry of [`SandboxPolicy::read_only`].
    ReadOnly,
    /// An entry of [`SandboxPolicy::read_write`].
    ReadWrite,
}

impl std::fmt::Display for PathRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathRole::Scratch => "scratch dir",
            PathRole::Package => "package dir",
            PathRole::Program => "program file",
            PathRole::ReadOnly => "read-only grant",
            PathRole::ReadWrite => "read-write grant",
        })
    }
}

/// Why no profile could be built for a policy. Nothing is spawned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// A policy path is relative.
    #[error("{role} `{}` is not an absolute path; give the sandbox absolute paths only", path.display())]
    NotAbsolute {
        /// Where the path came from.
        role: PathRole,
        /// The path as given.
        path: PathBuf,
    },
    /// A policy path is not valid UTF-8.
    #[error(
        "{role} `{}` is not valid UTF-8; Seatbelt profiles only match UTF-8 paths — \
         rename it, or grant a parent directory whose path is UTF-8",
        path.display()
    )]
    NotUtf8 {
        /// Where the path came from.
        role: PathRole,
        /// The path as given (or as canonicalised).
        path: PathBuf,
    },
    /// A policy path contains a NUL byte, which no OS path can hold.
    #[error("{role} `{}` contains a NUL byte; remove it from the policy", path.display())]
    ContainsNul {
        /// Where the path came from.
        role: PathRole,
        /// The path as given.
        path: PathBuf,
    },
    /// A path could not be canonicalised (for the scratch and package dir:
    /// also when it does not exist).
    #[error(
        "cannot resolve {role} `{}`: {source}; make sure it exists and every \
         directory on the way is searchable",
        path.display()
    )]
    Canonicalize {
        /// Where the path came from.
        role: PathRole,
        /// The path as given.
        path: PathBuf,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// The policy asks for a network mode this backend does not know.
    #[error(
        "network policy {network:?} is not supported by the macOS backend; \
         only Network::Deny can be enforced — use it or pick another backend"
    )]
    UnsupportedNetwork {
        /// The requested mode.
        network: Network,
    },
}

/// A generated Seatbelt profile: the SBPL text plus the parameter values it
/// references. Feed both to `sandbox-exec` with
/// [`SeatbeltProfile::sandbox_exec_args`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltProfile {
    /// The SBPL text. It contains no policy path.
    pub text: String,
    /// `(KEY, VALUE)` pairs, passed as `-DKEY=VALUE`. Keys are
    /// `[A-Z0-9_]+`; values are canonical, UTF-8 absolute paths.
    pub params: Vec<(String, String)>,
    /// Extra grants that were dropped because they do not exist (they grant
    /// nothing; a path that appears later stays denied).
    pub skipped: Vec<PathBuf>,
}

impl SeatbeltProfile {
    /// The arguments that go between `/usr/bin/sandbox-exec` and the
    /// program: `-p <text> -DKEY=VALUE ... --`.
    pub fn sandbox_exec_args(&self) -> Vec<OsString> {
        let mut args = Vec::with_capacity(self.params.len() + 3);
        args.push(OsString::from("-p"));
        args.push(OsString::from(&self.text));
        for (key, value) in &self.params {
            args.push(OsString::from(format!("-D{key}={value}")));
        }
        args.push(OsString::from("--"));
        args
    }

    /// The parameters rendered one per line as `KEY=VALUE` (values
    /// debug-escaped so a newline in a path stays on its line). Used for
    /// golden files and logs.
    pub fn params_listing(&self) -> String {
        self.params
            .iter()
            .map(|(k, v)| format!("{k}={v:?}\n"))
            .collect()
    }
}

/// Read-only system paths every program needs to start: libraries, the
/// dyld shared cache, the standard tools, locale and time zone data.
///
/// - `/usr/lib`, `/usr/bin`, `/bin`: libSystem, dyld, the base tools;
/// - `/usr/share`: zoneinfo, locale, terminfo, misc. data;
/// - `/System/Library`, `/System/Cryptexes`,
///   `/System/Volumes/Preboot/Cryptexes/OS`: frameworks and the dyld
///   shared cache (its home on macOS 13 and later). Not `/System` as a
///   whole: `/System/Volumes/Data` is the firmlinked data volume that holds
///   every user's home;
/// - `/Library/Apple`: Rosetta and Apple-provided system extensions;
/// - `/private/var/db/timezone` and `/private/etc/localtime`: `localtime(3)`;
/// - `/private/var/select/sh`: which shell `/bin/sh` dispatches to.
pub const SYSTEM_READ_EXEC: &[&str] = &[
    "/usr/lib",
    "/usr/bin",
    "/bin",
    "/System/Library",
    "/System/Cryptexes",
    "/System/Volumes/Preboot/Cryptexes/OS",
    "/Library/Apple",
];

/// Read-only system data (no exec), matched as subpaths.
pub const SYSTEM_READ_DATA: &[&str] = &["/usr/share", "/private/var/db/timezone"];

/// Single read-only system files, matched literally.
pub const SYSTEM_READ_FILES: &[&str] = &[
    "/private/etc/localtime",
    "/private/var/select/sh",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
];

/// Device files that are readable and writable.
pub const SYSTEM_READ_WRITE_FILES: &[&str] =
    &["/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr"];

/// Set-user-ID programs in the granted system directories. Executing them
/// is denied: macOS has no `no_new_privs`, so a set-uid binary would run
/// with its owner's uid (still inside this profile). Best effort: a set-uid
/// file inside a package or read-only grant is not covered.
pub const SETUID_DENYLIST: &[&str] = &[
    "/usr/bin/at",
    "/usr/bin/atq",
    "/usr/bin/atrm",
    "/usr/bin/batch",
    "/usr/bin/crontab",
    "/usr/bin/login",
    "/usr/bin/newgrp",
    "/usr/bin/quota",
    "/usr/bin/su",
    "/usr/bin/sudo",
    "/usr/bin/top",
    "/bin/ps",
];

/// sysctls a CLI runtime reads at startup (CPU count and features, page
/// size, OS version). Notably absent: `kern.proc.*`, which lists host
/// processes.
const SYSCTL_NAMES: &[&str] = &[
    "hw.activecpu",
    "hw.byteorder",
    "hw.cachelinesize",
    "hw.cpufamily",
    "hw.cpusubtype",
    "hw.cputype",
    "hw.logicalcpu",
    "hw.logicalcpu_max",
    "hw.machine",
    "hw.memsize",
    "hw.model",
    "hw.ncpu",
    "hw.nperflevels",
    "hw.pagesize",
    "hw.physicalcpu",
    "hw.physicalcpu_max",
    "kern.argmax",
    "kern.maxfilesperproc",
    "kern.maxproc",
    "kern.ngroups",
    "kern.osproductversion",
    "kern.osrelease",
    "kern.ostype",
    "kern.osvariant_status",
    "kern.osversion",
    "kern.secure_kernel",
    "kern.usrstack64",
    "kern.version",
    "machdep.cpu.brand_string",
    "sysctl.proc_cputype",
    "sysctl.proc_translated",
];

const SYSCTL_PREFIXES: &[&str] = &["hw.optional.", "hw.perflevel"];

/// The only Mach services a sandboxed program may look up: user and group
/// lookups (`getpwuid`, used by shells and `id`). DNS (mDNSResponder),
/// preferences, the pasteboard, launchd services: all denied.
const MACH_SERVICES: &[&str] = &["com.apple.system.opendirectoryd.libinfo"];

/// Renders `s` as an SBPL string literal, escaping `\` and `"` and spelling
/// control characters out. Used only for this crate's constants: policy
/// paths are passed as parameters, never spliced.
pub fn sbpl_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x};", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

mod paths;

use paths::{optional, required, utf8};

struct Builder {
    text: String,
    params: Vec<(String, String)>,
}

impl Builder {
    fn line(&mut self, s: &str) {
        self.text.push_str(s);
        self.text.push('\n');
    }

    fn param(&mut self, key: String, value: &str) -> String {
        let reference = format!("(param {})", sbpl_string(&key));
        self.params.push((key, value.to_string()));
        reference
    }
}

/// Builds the Seatbelt profile for `policy`, resolving every path with
/// `canon`.
///
/// Grants, after canonicalisation:
/// - scratch dir: read + write (`file-read*`, `file-write*`);
/// - package dir and read-only grants: read, exec and executable mapping;
/// - read-write grants: read + write;
/// - the system runtime set ([`SYSTEM_READ_EXEC`], [`SYSTEM_READ_DATA`],
///   [`SYSTEM_READ_FILES`]) read-only, and [`SYSTEM_READ_WRITE_FILES`];
/// - metadata (`stat`) of every ancestor directory of a grant, which
///   `realpath(3)` and `getcwd(3)` need;
/// - a read-only grant or package dir strictly inside a writable one stays
///   read-only, and its ancestors inside the writable area cannot be
///   unlinked or renamed (so `mv` cannot carry it out from under the rule).
///
/// Extra grants that do not exist are skipped (listed in
/// [`SeatbeltProfile::skipped`]); a missing scratch or package dir is an
/// error.
pub fn build_profile(
    policy: &SandboxPolicy,
    canon: &dyn Canonicalize,
) -> Result<SeatbeltProfile, ProfileError> {
    match &policy.network {
        Network::Deny => {}
        other => {
            return Err(ProfileError::UnsupportedNetwork {
                network: other.clone(),
            })
        }
    }

    let scratch = required(PathRole::Scratch, &policy.scratch_dir, canon)?;
    let package = policy
        .package_dir
        .as_deref()
        .map(|p| required(PathRole::Package, p, canon))
        .transpose()?;
    let mut program_files: Vec<PathBuf> = Vec::new();
    for p in &policy.program_files {
        let c = required(PathRole::Program, p, canon)?;
        if !program_files.contains(&c) {
            program_files.push(c);
        }
    }
    let mut skipped = Vec::new();
    let mut read_only: Vec<PathBuf> = Vec::new();
    for p in &policy.read_only {
        match optional(PathRole::ReadOnly, p, canon)? {
            Some(c) if !read_only.contains(&c) => read_only.push(c),
            Some(_) => {}
            None => skipped.push(p.clone()),
        }
    }
    let mut read_write: Vec<PathBuf> = Vec::new();
    for p in &policy.read_write {
        match optional(PathRole::ReadWrite, p, canon)? {
            Some(c) if !read_write.contains(&c) => read_write.push(c),
            Some(_) => {}
            None => skipped.push(p.clone()),
        }
    }

    // Writable roots and the read-only paths strictly inside one of them.
    let writable: Vec<&PathBuf> = std::iter::once(&scratch).chain(&read_write).collect();
    let protected: Vec<PathBuf> = package
        .iter()
        .chain(&read_only)
        .filter(|ro| writable.iter().any(|w| ro.starts_with(w) && ro != w))
        .cloned()
        .collect();
    let protected_ancestors: BTreeSet<PathBuf> = protected
        .iter()
        .flat_map(|p| p.ancestors().skip(1).map(Path::to_path_buf))
        .filter(|a| writable.iter().any(|w| a.starts_with(w)))
        .collect();

    // Ancestors of constants are written as literals; ancestors of policy
    // paths that are not already among them become parameters.
    let constant_paths = SYSTEM_READ_EXEC
        .iter()
        .chain(SYSTEM_READ_DATA)
        .chain(SYSTEM_READ_FILES)
        .chain(SYSTEM_READ_WRITE_FILES);
    let constant_ancestors: BTreeSet<PathBuf> = constant_paths
        .flat_map(|p| Path::new(p).ancestors().skip(1).map(Path::to_path_buf))
        .collect();
    let policy_ancestors: BTreeSet<PathBuf> = std::iter::once(&scratch)
        .chain(&package)
        .chain(&program_files)
        .chain(&read_only)
        .chain(&read_write)
        .flat_map(|p| p.ancestors().skip(1).map(Path::to_path_buf))
        .filter(|a| !constant_ancestors.contains(a))
        .collect();

    let mut b = Builder {
        text: String::new(),
        params: Vec::new(),
    };
    b.line("(version 1)");
    b.line(";; Generated by cordon-backend-macos. Policy paths are never spliced into");
    b.line(";; this text: each arrives as a -DKEY=VALUE parameter of sandbox-exec.");
    b.line("(deny default)");
    b.line("");
    b.line(";; Processes: fork and exec; signals and process info only inside this sandbox.");
    b.line("(allow process-fork)");
    b.line("(allow signal (target same-sandbox))");
    b.line("(allow process-info* (target same-sandbox))");
    b.line("");
    b.line(";; System runtime: read, exec and map executable.");
    b.line("(allow file-read* process-exec* file-map-executable");
    for p in SYSTEM_READ_EXEC {
        b.line(&format!("    (subpath {})", sbpl_string(p)));
    }
    b.line(")");
    b.line(";; System data: read only.");
    b.line("(allow file-read*");
    for p in SYSTEM_READ_DATA {
        b.line(&format!("    (subpath {})", sbpl_string(p)));
    }
    for p in SYSTEM_READ_FILES {
        b.line(&format!("    (literal {})", sbpl_string(p)));
    }
    b.line(")");
    b.line(";; Standard devices: read and write.");
    b.line("(allow file-read* file-write-data");
    for p in SYSTEM_READ_WRITE_FILES {
        b.line(&format!("    (literal {})", sbpl_string(p)));
    }
    b.line("    (subpath \"/dev/fd\")");
    b.line(")");
    b.line(";; stat() of the directories above every grant (realpath, getcwd).");
    b.line("(allow file-read-metadata");
    for a in &constant_ancestors {
        // Constants are ASCII by construction.
        b.line(&format!(
            "    (literal {})",
            sbpl_string(&a.to_string_lossy())
        ));
    }
    b.line(")");
    b.line("");

    b.line(";; Scratch dir: read and write.");
    let r = b.param("SCRATCH".into(), &utf8(PathRole::Scratch, scratch.clone())?);
    b.line(&format!("(allow file-read* file-write* (subpath {r}))"));
    if let Some(pkg) = &package {
        b.line(";; Package dir: read and exec.");
        let r = b.param("PACKAGE".into(), &utf8(PathRole::Package, pkg.clone())?);
        b.line(&format!(
            "(allow file-read* process-exec* file-map-executable (subpath {r}))"
        ));
    }
    if !program_files.is_empty() {
        b.line(";; The program and its interpreter or loader: read and exec, file by file.");
    }
    for (i, p) in program_files.iter().enumerate() {
        let r = b.param(format!("PROGRAM_{i}"), &utf8(PathRole::Program, p.clone())?);
        b.line(&format!(
            "(allow file-read* process-exec* file-map-executable (literal {r}))"
        ));
    }
    if !read_only.is_empty() {
        b.line(";; Read-only grants: read and exec.");
    }
    for (i, p) in read_only.iter().enumerate() {
        let r = b.param(format!("RO_{i}"), &utf8(PathRole::ReadOnly, p.clone())?);
        b.line(&format!(
            "(allow file-read* process-exec* file-map-executable (subpath {r}))"
        ));
    }
    if !read_write.is_empty() {
        b.line(";; Read-write grants.");
    }
    for (i, p) in read_write.iter().enumerate() {
        let r = b.param(format!("RW_{i}"), &utf8(PathRole::ReadWrite, p.clone())?);
        b.line(&format!("(allow file-read* file-write* (subpath {r}))"));
    }
    if !policy_ancestors.is_empty() {
        b.line("(allow file-read-metadata");
        for (i, a) in policy_ancestors.iter().enumerate() {
            let r = b.param(
                format!("ANCESTOR_{i}"),
                &utf8(PathRole::Scratch, a.clone())?,
            );
            b.line(&format!("    (literal {r})"));
        }
        b.line(")");
    }
    b.line("");

    b.line(";; No network: no TCP/UDP/raw socket, no connect or bind to any socket");
    b.line(";; path. Creating UNIX-domain sockets stays possible for socketpair().");
    b.line("(deny network*)");
    b.line("(allow system-socket (socket-domain AF_UNIX))");
    b.line("");
    b.line(";; Mach services and sysctls an ordinary CLI program needs.");
    b.line("(allow mach-lookup");
    for s in MACH_SERVICES {
        b.line(&format!("    (global-name {})", sbpl_string(s)));
    }
    b.line(")");
    b.line("(allow sysctl-read");
    for s in SYSCTL_NAMES {
        b.line(&format!("    (sysctl-name {})", sbpl_string(s)));
    }
    for s in SYSCTL_PREFIXES {
        b.line(&format!("    (sysctl-name-prefix {})", sbpl_string(s)));
    }
    b.line(")");

    b.line("");
    b.line(";; Set-user-ID system programs: no exec (there is no no_new_privs).");
    b.line("(deny process-exec*");
    for p in SETUID_DENYLIST {
        b.line(&format!("    (literal {})", sbpl_string(p)));
    }
    b.line(")");

    if !protected.is_empty() {
        b.line("");
        b.line(";; Read-only paths inside writable ones stay read-only, and the");
        b.line(";; directories leading to them cannot be renamed or removed.");
        b.line(";; Denials come last: a later rule overrides an earlier one.");
        for (i, p) in protected.iter().enumerate() {
            let r = b.param(
                format!("PROTECTED_{i}"),
                &utf8(PathRole::ReadOnly, p.clone())?,
            );
            b.line(&format!("(deny file-write* (subpath {r}))"));
        }
        for (i, a) in protected_ancestors.iter().enumerate() {
            let r = b.param(
                format!("PROTECTED_ANCESTOR_{i}"),
                &utf8(PathRole::ReadOnly, a.clone())?,
            );
            b.line(&format!("(deny file-write-unlink (literal {r}))"));
        }
    }

    Ok(SeatbeltProfile {
        text: b.text,
        params: b.params,
        skipped,
    })
}

#[cfg(test)]
mod tests;
