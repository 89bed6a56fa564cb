//! P5 — filesystem confinement: reading a canary outside the grants fails;
//! creating, writing,
//! truncating or renaming into a place outside scratch (host temp dir, the
//! suite's stand-in home, the package dir) fails; symlinks and hardlinks
//! made in scratch do not reach outside; metadata writes to a host file of
//! the sandbox's own uid outside every grant (`chmod` incl. 06777,
//! `fchmodat`, `utimensat`, `setxattr`, `chown`) fail; and setuid/setgid
//! bits the child plants on a copy of an executable in scratch are not
//! honoured. Reading and executing the package dir and read/write/delete in
//! scratch work.
//!
//! The canary is world-readable in a world-accessible dir the suite made,
//! so only the sandbox stands in the way. (The host's own secrets, such as
//! `/etc/shadow`, are not tried: file modes protect those from any
//! non-root reader, so they prove little, and the unconfined baseline runs
//! this same code, so it may only aim at what the suite planted.)
//!
//! The host verifies: nothing was created outside, the canary is unchanged
//! and has one link, the metadata target's mode, owner, times and xattrs
//! are unchanged; while the child is held, it inspects the planted files
//! through `/proc/<program>/root/<scratch>` and the mount they live on
//! (`statvfs`'s `ST_NOSUID`, `/proc/<program>/mountinfo`), and, as root,
//! executes them as another uid and reads the resulting euid/egid.
//!
//! Denials: `EPERM`/`EACCES`; `EXDEV` for a link or rename only when the
//! host confirms canary, scratch and temp dir share one filesystem (it is
//! how Landlock refuses to move a file across its rules, but also what any
//! kernel says across filesystems); and `EROFS` for the metadata writes:
//! `chmod`, `chown`, `utimensat` and `setxattr` all call `mnt_want_write()`
//! (fs/namespace.c) on the path's mount before any permission check, and
//! it refuses with `EROFS` when that mount is read-only — a refusal of the
//! write itself, which the host confirms changed nothing. `EROFS` counts
//! for creating and writing files outside scratch too: `open_last_lookups`
//! takes `mnt_want_write()` for `O_CREAT`/`O_TRUNC`/write opens and
//! `lookup_open` answers `EROFS` when it failed, before any LSM hook — the
//! read-only mount is the first layer (a backend's mount namespace), the
//! LSM the second; the host confirms nothing was created or changed.
//! `EXDEV` also counts for the rename out of scratch when the child sees
//! scratch on a different mount than the target (`do_renameat2` refuses
//! any rename across mounts): then nothing can leave scratch by rename at
//! all, which is the property checked, and the host confirms the target
//! is absent.

use std::path::{Path, PathBuf};

use cordon_core::{CheckResult, Evidence, ProbeId, ProbeStatus};

use crate::child::{self, errno, Reporter, DENIED, PROBE_ARG};
use crate::harness::{fail, pass, random_token, unreachable, verdict, ProbeContext, Hold, Ids};
use crate::inspect;
use crate::registry::{manifest, HostConditions, Manifest, Probe, ProbeArgs};

/// P5 in the registry (`probes/mod.rs`).
pub(crate) struct P5;

#[async_trait::async_trait]
impl Probe for P5 {
    fn id(&self) -> ProbeId {
        ProbeId::P5
    }

    fn title(&self) -> &'static str {
        "Filesystem confinement"
    }

    fn checks(&self, host: &HostConditions) -> Manifest {
        let mut m = manifest(CHECKS);
        if host.as_root {
            m.insert("host-setid-scratch-exec".into(), Evidence::Host);
        }
        m
    }

    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
        use std::os::unix::fs::MetadataExt;
        let token = random_token();
        let tmp_dir = std::env::temp_dir()
            .canonicalize()
            .unwrap_or_else(|_| std::env::temp_dir());
        let targets: Vec<(&str, PathBuf)> = vec![
            ("out_tmp", tmp_dir.join(format!("cordon-p5-{token}"))),
            ("out_home", ctx.home_dir.join(format!(".cordon-p5-{token}"))),
            ("out_pkg", ctx.pkg_dir.join(format!("p5-{token}"))),
            (
                "rename_to",
                tmp_dir.join(format!("cordon-p5-renamed-{token}")),
            ),
        ];
        let mut args: Vec<(String, String)> = targets
            .iter()
            .map(|(k, p)| (k.to_string(), p.display().to_string()))
            .collect();
        args.push(("canary".into(), ctx.canary_file.display().to_string()));
        let same_fs = {
            let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
            let scratch_base = ctx.spawner.config().scratch_base.clone();
            let d = dev(&ctx.canary_file);
            d.is_some() && d == dev(&scratch_base) && d == dev(&tmp_dir)
        };
        args.push(("same_fs".into(), same_fs.to_string()));
        args.push(("exe".into(), ctx.exe.display().to_string()));
        args.push(("package_file".into(), ctx.package_file.display().to_string()));
        let mut checks = Vec::new();
        // What the child may make in the host's temp dir must not outlive
        // the host (the baseline's child makes them, unconfined).
        for (_, path) in targets.iter().filter(|(_, p)| p.starts_with(&tmp_dir)) {
            if let Err(e) = ctx.guard_path(path) {
                checks.push(unreachable("host-out_tmp-absent", e));
                return checks;
            }
        }
        let meta_path = ctx.outside_dir.join(format!("meta-{token}.txt"));
        let meta_before = match plant_meta(&meta_path, ctx.sandbox, ctx.host_uid) {
            Ok(m) => {
                args.push(("meta".into(), meta_path.display().to_string()));
                Some(m)
            }
            Err(e) => {
                checks.push(unreachable(
                    "host-meta-unchanged",
                    format!("cannot plant {}: {e}", meta_path.display()),
                ));
                None
            }
        };

        let exe_bytes = std::fs::read(&ctx.exe).unwrap_or_default();
        let mut on_hold = |h: &Hold<'_>| {
            let mut out = vec![canary_links(&ctx.canary_file)];
            out.extend(setid_planted(h, ctx, &exe_bytes));
            out
        };
        let run = ctx.run_held("P5", &args, &mut on_hold).await;
        let mut hold_checks = vec!["host-canary-not-linked", "host-setid-scratch-mount"];
        if ctx.host_uid == 0 {
            hold_checks.push("host-setid-scratch-exec");
        }
        checks.extend(run.missed_hold("planted", &hold_checks));

        for (key, path) in &targets {
            let name = format!("host-{key}-absent");
            if let Ok(m) = path.symlink_metadata() {
                checks.push(fail(&name, format!("the child created {}", path.display())));
                let _ = if m.is_dir() {
                    std::fs::remove_dir_all(path)
                } else {
                    std::fs::remove_file(path)
                };
            } else {
                checks.push(pass(&name, "nothing was created"));
            }
        }
        match std::fs::read(&ctx.canary_file) {
            Ok(c) if c == ctx.canary_content => {
                checks.push(pass("host-canary-unchanged", "canary intact"))
            }
            Ok(_) => checks.push(fail(
                "host-canary-unchanged",
                "the child modified the canary file",
            )),
            Err(e) => checks.push(fail("host-canary-unchanged", format!("canary gone: {e}"))),
        }
        if let Some(before) = meta_before {
            checks.push(match meta_of(&meta_path) {
                Ok(now) => verdict(
                    "host-meta-unchanged",
                    now == before,
                    if now == before {
                        "mode, owner, times and xattr unchanged".to_string()
                    } else {
                        format!("the child changed the host file's metadata: {before:?} -> {now:?}")
                    },
                ),
                Err(e) => fail("host-meta-unchanged", format!("the host file is gone: {e}")),
            });
        }
        checks.extend(run.into_checks());
        checks
    }

    fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
        let get = |k: &str| args.get(k).cloned().unwrap_or_default();
        let rename_to = get("rename_to");
        let cross_denied: &[i32] = if get("same_fs") == "true" || on_different_mounts(".", &rename_to) {
            &[libc::EACCES, libc::EPERM, libc::EXDEV]
        } else {
            &DENIED
        };
        let canary = get("canary");
        r.forbidden("read-outside-canary", child::read_file(&canary), &DENIED);
        for key in ["out_tmp", "out_home", "out_pkg"] {
            if let Some(p) = args.get(key) {
                r.forbidden(
                    &format!("create-{key}"),
                    child::write_file(p, libc::O_CREAT | libc::O_EXCL),
                    &META_DENIED,
                );
            }
        }
        r.forbidden(
            "write-canary",
            child::write_file(&canary, libc::O_APPEND),
            &META_DENIED,
        );
        r.forbidden(
            "truncate-canary",
            child::write_file(&canary, libc::O_TRUNC),
            &META_DENIED,
        );

        // Rename a scratch file out of scratch.
        let _ = std::fs::write("to-move", b"x");
        let (from, to) = (child::cstr("to-move"), child::cstr(&rename_to));
        // SAFETY: valid C strings.
        let rc = unsafe { libc::rename(from.as_ptr(), to.as_ptr()) };
        r.forbidden(
            "rename-out-of-scratch",
            if rc == 0 {
                Ok(format!("moved to {rename_to}"))
            } else {
                Err(errno())
            },
            cross_denied,
        );

        // A symlink in scratch pointing outside: creating it is harmless, using it is not.
        let link = child::cstr("link-out");
        let target = child::cstr(&canary);
        // SAFETY: valid C strings.
        if unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) } == 0 {
            r.forbidden("read-via-symlink", child::read_file("link-out"), &DENIED);
            r.forbidden(
                "write-via-symlink",
                child::write_file("link-out", libc::O_APPEND),
                &META_DENIED,
            );
        } else {
            r.check(
                "read-via-symlink",
                ProbeStatus::Unreachable,
                format!(
                    "cannot create a symlink in scratch: {}",
                    child::errno_name(errno())
                ),
            );
        }
        // The link, if made, stays until the host has counted the canary's links.
        let hard = child::cstr("hard-out");
        // SAFETY: valid C strings.
        let rc = unsafe { libc::link(target.as_ptr(), hard.as_ptr()) };
        r.forbidden(
            "hardlink-outside-file",
            if rc == 0 {
                Ok("linked the canary into scratch".into())
            } else {
                Err(errno())
            },
            cross_denied,
        );

        if let Some(meta) = args.get("meta") {
            metadata_writes(r, meta);
        }
        read_grant_metadata_writes(r, &get("package_file"));
        plant_setid(r, &get("exe"));
        r.hold("planted");

        // Positive control: a program in the package dir can be executed.
        r.control("control-package-exec", exec_package(&get("exe")));
    }
}

/// Every check P5 makes on any host (those of some hosts only are added
/// in [`P5::checks`]).
const CHECKS: &[(&str, Evidence)] = &[
    ("host-out_tmp-absent", Evidence::Host),
    ("host-out_home-absent", Evidence::Host),
    ("host-out_pkg-absent", Evidence::Host),
    ("host-rename_to-absent", Evidence::Host),
    ("host-canary-unchanged", Evidence::Host),
    ("host-meta-unchanged", Evidence::Host),
    ("read-outside-canary", Evidence::Child),
    ("create-out_tmp", Evidence::Child),
    ("create-out_home", Evidence::Child),
    ("create-out_pkg", Evidence::Child),
    ("write-canary", Evidence::Child),
    ("truncate-canary", Evidence::Child),
    ("rename-out-of-scratch", Evidence::Child),
    ("read-via-symlink", Evidence::Child),
    ("write-via-symlink", Evidence::Child),
    ("hardlink-outside-file", Evidence::Child),
    ("chmod-outside", Evidence::Child),
    ("chmod-setid-outside", Evidence::Child),
    ("fchmodat-outside", Evidence::Child),
    ("utimensat-outside", Evidence::Child),
    ("setxattr-outside", Evidence::Child),
    ("chown-outside", Evidence::Child),
    ("fchmod-read-grant", Evidence::Child),
    ("fsetxattr-read-grant", Evidence::Child),
    ("host-canary-not-linked", Evidence::Host),
    ("host-setid-scratch-mount", Evidence::Host),
    ("control-package-exec", Evidence::Child),
];

/// The xattr the host plants on the metadata target.
const XATTR: &str = "user.cordon";
/// Its value.
const XATTR_VALUE: &[u8] = b"planted";
/// The atime and mtime the host gives the metadata target (2001-09-09).
const PLANTED_TIME: i64 = 1_000_000_000;

/// Denials for a write outside the grants (data or metadata): see the
/// module doc for `EROFS`.
const META_DENIED: [i32; 3] = [libc::EPERM, libc::EACCES, libc::EROFS];

/// Whether `a` and `b`'s parent directory are on different mounts, as the
/// child sees them.
fn on_different_mounts(a: &str, b: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let parent = Path::new(b).parent().unwrap_or(Path::new("/"));
    match (std::fs::metadata(a), std::fs::metadata(parent)) {
        (Ok(x), Ok(y)) => x.dev() != y.dev(),
        _ => false,
    }
}

/// The planted files in scratch: name and mode the child gives them.
const SETID_FILES: [(&str, u32); 2] = [("sid", 0o4755), ("sgid", 0o6755)];

/// What the host can observe of the metadata target.
#[derive(Debug, PartialEq)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    atime: (i64, i64),
    mtime: (i64, i64),
    ctime: (i64, i64),
    xattr: Option<Vec<u8>>,
}

fn meta_of(path: &Path) -> std::io::Result<Meta> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path)?;
    Ok(Meta {
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        atime: (m.atime(), m.atime_nsec()),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
        xattr: get_xattr(path),
    })
}

fn get_xattr(path: &Path) -> Option<Vec<u8>> {
    let p = child::cstr(&path.display().to_string());
    let name = child::cstr(XATTR);
    let mut buf = [0u8; 64];
    // SAFETY: lgetxattr writes at most buf.len() bytes into buf.
    let n = unsafe { libc::lgetxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

/// Plants the metadata target: the sandbox uid's own file (so only the
/// sandbox stands in the way), with an xattr and old times.
fn plant_meta(path: &Path, sandbox: Ids, host_uid: u32) -> std::io::Result<Meta> {
    use std::io::Write as _;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;
    // On the new file's fd only: the dir is world-writable, and a path
    // could meanwhile name another user's symlink.
    let mut f = crate::harness::create_new_file(path)?;
    f.write_all(b"metadata target\n")?;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    if host_uid == 0 {
        std::os::unix::fs::fchown(&f, Some(sandbox.uid), Some(sandbox.gid))?;
    }
    let name = child::cstr(XATTR);
    let t = libc::timespec {
        tv_sec: PLANTED_TIME,
        tv_nsec: 0,
    };
    // SAFETY: an fd we own, valid C strings, buffer and timespec pair.
    unsafe {
        if libc::fsetxattr(
            f.as_raw_fd(),
            name.as_ptr(),
            XATTR_VALUE.as_ptr().cast(),
            XATTR_VALUE.len(),
            0,
        ) != 0
            || libc::futimens(f.as_raw_fd(), [t, t].as_ptr()) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    meta_of(path)
}

/// At the hold: the canary has one link (no hardlink to it in scratch).
fn canary_links(canary: &Path) -> CheckResult {
    use std::os::unix::fs::MetadataExt;
    const NAME: &str = "host-canary-not-linked";
    match std::fs::metadata(canary) {
        Ok(m) => verdict(
            NAME,
            m.nlink() == 1,
            format!("the canary has {} link(s)", m.nlink()),
        ),
        Err(e) => fail(NAME, format!("canary gone: {e}")),
    }
}

/// One planted file as the host sees it through the program's root.
struct Planted {
    path: PathBuf,
    mode: u32,
    uid: u32,
    gid: u32,
}

/// At the hold: the setuid/setgid copies in scratch mean nothing.
fn setid_planted(h: &Hold<'_>, ctx: &ProbeContext, exe_bytes: &[u8]) -> Vec<CheckResult> {
    use std::os::unix::fs::MetadataExt;
    const MOUNT: &str = "host-setid-scratch-mount";
    const EXEC: &str = "host-setid-scratch-exec";
    let as_root = ctx.host_uid == 0;
    let Some(pid) = h.pid else {
        let mut out = vec![unreachable(MOUNT, "the program was not found by its token")];
        if as_root {
            out.push(unreachable(EXEC, "the program was not found by its token"));
        }
        return out;
    };
    // The scratch dir as the program sees it: its host path under the
    // program's root (the sandbox may mount over it), else its cwd.
    let mut dir = inspect::in_root(pid, h.scratch);
    if !dir.join(SETID_FILES[0].0).exists() {
        dir = PathBuf::from(format!("/proc/{pid}/cwd"));
    }
    let planted: Vec<Planted> = SETID_FILES
        .iter()
        .filter_map(|(name, _)| {
            let path = dir.join(name);
            let m = std::fs::metadata(&path).ok()?;
            Some(Planted {
                path,
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
            })
        })
        .collect();
    let with_bits: Vec<&Planted> = planted.iter().filter(|p| p.mode & 0o6000 != 0).collect();
    let mount = inspect::mount_of(pid, h.scratch)
        .map(|(mp, opts)| format!("mounted at {mp} with {opts}"))
        .unwrap_or_else(|| "mount not found in mountinfo".into());
    let mut out = Vec::new();
    let nosuid = with_bits.first().map(|p| inspect::is_nosuid(&p.path));
    out.push(match nosuid {
        None if planted.is_empty() => unreachable(
            MOUNT,
            "the child planted no file in scratch (see its setid-copy info)",
        ),
        None => pass(
            MOUNT,
            format!("the setuid/setgid bits did not stick ({mount})"),
        ),
        Some(Ok(true)) => pass(MOUNT, format!("scratch is nosuid ({mount})")),
        Some(Ok(false)) => fail(
            MOUNT,
            format!(
                "{} on a mount without nosuid ({mount}): anyone may run it as its owner",
                with_bits
                    .iter()
                    .map(|p| format!("{:o} uid {} gid {}", p.mode, p.uid, p.gid))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Some(Err(e)) => unreachable(MOUNT, format!("statvfs: {e}")),
    });
    if as_root {
        out.push(exec_as_other(&with_bits, ctx.sandbox, exe_bytes));
    }
    out
}

/// As root: runs each planted setid file as an unrelated uid and reads the
/// euid/egid it got. Never runs a file owned by root, nor one whose bytes
/// are not the probe executable's.
fn exec_as_other(files: &[&Planted], sandbox: Ids, exe_bytes: &[u8]) -> CheckResult {
    const NAME: &str = "host-setid-scratch-exec";
    if files.is_empty() {
        return pass(NAME, "no planted file kept a setuid/setgid bit");
    }
    let mut honoured = Vec::new();
    for f in files {
        if f.uid == 0 || f.gid == 0 {
            honoured.push(format!(
                "{} is setid root on a suid mount (not executed, for safety)",
                f.path.display()
            ));
            continue;
        }
        let Some(other) = [65533u32, 65532, 65531]
            .into_iter()
            .find(|u| *u != sandbox.uid && *u != f.uid && *u != f.gid)
        else {
            return unreachable(NAME, "no spare uid to run the file as");
        };
        match run_ids(&f.path, other, exe_bytes) {
            Ok((euid, egid)) => {
                if euid != other || egid != other {
                    honoured.push(format!(
                        "{} ({:o}) run by uid {other} got euid {euid}, egid {egid}",
                        f.path.display(),
                        f.mode
                    ));
                }
            }
            Err(e) => return unreachable(NAME, format!("{}: {e}", f.path.display())),
        }
    }
    verdict(
        NAME,
        honoured.is_empty(),
        if honoured.is_empty() {
            "run as another uid, the planted files gave it no other id".to_string()
        } else {
            honoured.join("; ")
        },
    )
}

/// Opens `path`, checks its bytes are the probe executable's, and runs it
/// from that very fd (`/proc/self/fd/N`) as `uid` in `ids` mode.
fn run_ids(path: &Path, uid: u32, exe_bytes: &[u8]) -> Result<(u32, u32), String> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes != exe_bytes {
        return Err("not the probe executable: refusing to run it".into());
    }
    let out = std::process::Command::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .arg(PROBE_ARG)
        .arg("ids")
        .env_clear()
        .current_dir("/")
        .uid(uid)
        .gid(uid)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("exec as uid {uid}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut f = text.trim().split('\t');
    match (f.next(), f.next(), f.next()) {
        (Some("IDS"), Some(e), Some(g)) => Ok((
            e.parse().map_err(|_| "bad euid")?,
            g.parse().map_err(|_| "bad egid")?,
        )),
        _ => Err(format!("unexpected output {text:?} ({})", out.status)),
    }
}

/// Copies the executable into scratch twice and sets setuid / setgid bits;
/// the host judges what they are worth.
fn plant_setid(r: &mut Reporter, exe: &str) {
    use std::os::unix::fs::PermissionsExt;
    // An executable larger than the file size limit (a debug build) makes
    // the copy fail with EFBIG, reported below, instead of killing the
    // child with SIGXFSZ where the scratch is on a disk (no tmpfs to
    // fill first).
    // SAFETY: sets this process's disposition of one signal to ignore.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    for (name, mode) in SETID_FILES {
        // The chmod is tried whether or not the copy was cut short: the
        // host judges the bits on whatever file is there, and a short
        // copy must not read as "the bits did not stick" untried.
        let copied = std::fs::copy(exe, name);
        let chmod = std::fs::set_permissions(name, std::fs::Permissions::from_mode(mode));
        r.info(
            &format!("setid-copy-{name}"),
            match (copied, chmod) {
                (Ok(_), Ok(())) => format!("chmod {mode:o} ok"),
                (Err(e), Ok(())) => format!("copy cut short ({e}); chmod {mode:o} ok"),
                (Ok(_), Err(e)) => format!("chmod {mode:o}: {e}"),
                (Err(c), Err(e)) => format!("copy cut short ({c}); chmod {mode:o}: {e}"),
            },
        );
    }
}

/// Writes to a host file's metadata only, never its contents.
fn metadata_writes(r: &mut Reporter, meta: &str) {
    let p = child::cstr(meta);
    let rc = |v: libc::c_int| if v == 0 { Ok(()) } else { Err(errno()) };
    // SAFETY: each call gets valid C strings and in-bounds buffers.
    unsafe {
        r.forbidden(
            "chmod-outside",
            rc(libc::chmod(p.as_ptr(), 0o600)).map(|_| "chmod 600".into()),
            &META_DENIED,
        );
        r.forbidden(
            "chmod-setid-outside",
            rc(libc::chmod(p.as_ptr(), 0o6777)).map(|_| "chmod 6777".into()),
            &META_DENIED,
        );
        let (dir, name) = meta.rsplit_once('/').unwrap_or((".", meta));
        let dirfd = child::open(dir, libc::O_PATH | libc::O_DIRECTORY).unwrap_or(libc::AT_FDCWD);
        let target = if dirfd == libc::AT_FDCWD { meta } else { name };
        let t = child::cstr(target);
        let res = rc(libc::fchmodat(dirfd, t.as_ptr(), 0o640, 0));
        if dirfd != libc::AT_FDCWD {
            child::close(dirfd);
        }
        r.forbidden(
            "fchmodat-outside",
            res.map(|_| "fchmodat 640".into()),
            &META_DENIED,
        );
        r.forbidden(
            "utimensat-outside",
            rc(libc::utimensat(
                libc::AT_FDCWD,
                p.as_ptr(),
                std::ptr::null(),
                0,
            ))
            .map(|_| "set its times to now".into()),
            &META_DENIED,
        );
        let name = child::cstr(XATTR);
        r.forbidden(
            "setxattr-outside",
            rc(libc::setxattr(
                p.as_ptr(),
                name.as_ptr(),
                b"pwned".as_ptr().cast(),
                5,
                0,
            ))
            .map(|_| "set an xattr".into()),
            &META_DENIED,
        );
        // chown to our own ids; inside a user namespace without a mapping
        // our ids have no kernel id (EINVAL), so fall back to the no-op
        // chown(-1, -1), which is still a metadata write (it sets ctime).
        let mut res = rc(libc::chown(p.as_ptr(), libc::getuid(), libc::getgid()))
            .map(|_| "chown to its own ids".to_string());
        if res == Err(libc::EINVAL) {
            res = rc(libc::chown(p.as_ptr(), u32::MAX, u32::MAX))
                .map(|_| "chown(-1, -1)".to_string());
        }
        r.forbidden("chown-outside", res, &META_DENIED);
    }
}

/// Metadata writes on a descriptor of a file the sandbox may only read
/// (the package's data file, opened read-only): its mode set to what it
/// is, and an xattr. Each is a write
/// that needs no write access to the descriptor, only ownership, which a
/// sandbox of the caller's uid has; a read-only mount (`EROFS`), the
/// filter (`EPERM`) or file ownership (`EPERM`) must refuse it.
fn read_grant_metadata_writes(r: &mut Reporter, file: &str) {
    let fd = match child::open(file, libc::O_RDONLY | libc::O_CLOEXEC) {
        Ok(fd) => fd,
        Err(e) => {
            for name in ["fchmod-read-grant", "fsetxattr-read-grant"] {
                r.check(
                    name,
                    ProbeStatus::Unreachable,
                    format!("cannot open the granted file: {}", child::errno_name(e)),
                );
            }
            return;
        }
    };
    let rc = |v: libc::c_int| if v == 0 { Ok(()) } else { Err(errno()) };
    // SAFETY: an fd we opened, valid C strings and in-bounds buffers.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let mode = if libc::fstat(fd, &mut st) == 0 { st.st_mode & 0o7777 } else { 0o644 };
        r.forbidden(
            "fchmod-read-grant",
            rc(libc::fchmod(fd, mode)).map(|_| format!("fchmod {mode:o} on a read-only fd")),
            &META_DENIED,
        );
        let name = child::cstr(XATTR);
        r.forbidden(
            "fsetxattr-read-grant",
            rc(libc::fsetxattr(fd, name.as_ptr(), b"pwned".as_ptr().cast(), 5, 0))
                .map(|_| "set an xattr on a read-only fd".into()),
            &META_DENIED,
        );
        child::close(fd);
    }
}

fn exec_package(exe: &str) -> Result<(), String> {
    let prog = child::cstr(exe);
    let a0 = child::cstr(exe);
    let a1 = child::cstr(PROBE_ARG);
    let a2 = child::cstr("noop");
    let argv = [a0.as_ptr(), a1.as_ptr(), a2.as_ptr(), std::ptr::null()];
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // SAFETY: the forked child only calls execve and _exit.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(format!("fork: {}", child::errno_name(errno())));
        }
        if pid == 0 {
            libc::execve(prog.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            Ok(())
        } else {
            Err(format!(
                "executing {exe} from the package dir failed (status {status})"
            ))
        }
    }
}
