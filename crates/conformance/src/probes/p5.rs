//! P5 — filesystem confinement: reading a canary outside the grants and
//! `/etc/shadow` fails; creating, writing, truncating or renaming into a
//! place outside scratch (host temp dir, `$HOME`, the package dir) fails;
//! symlinks and hardlinks made in scratch do not reach outside. Reading and
//! executing the package dir and read/write/delete in scratch work.
//! The host verifies that nothing was created and the canary is unchanged.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cordon_core::{CheckResult, ProbeStatus};

use crate::child::{self, errno, Reporter, PROBE_ARG};
use crate::harness::{fail, pass, random_token, Ctx};

pub(crate) async fn host(ctx: &Ctx) -> Vec<CheckResult> {
    let token = random_token();
    let tmp_dir = std::env::temp_dir()
        .canonicalize()
        .unwrap_or_else(|_| std::env::temp_dir());
    let targets: Vec<(&str, PathBuf)> = [
        Some(("out_tmp", tmp_dir.join(format!("cordon-p5-{token}")))),
        std::env::var_os("HOME").map(|h| {
            (
                "out_home",
                PathBuf::from(h).join(format!(".cordon-p5-{token}")),
            )
        }),
        Some(("out_pkg", ctx.pkg_dir.join(format!("p5-{token}")))),
        Some((
            "rename_to",
            tmp_dir.join(format!("cordon-p5-renamed-{token}")),
        )),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut args: Vec<(String, String)> = targets
        .iter()
        .map(|(k, p)| (k.to_string(), p.display().to_string()))
        .collect();
    args.push(("canary".into(), ctx.canary_file.display().to_string()));
    // EXDEV is how Landlock refuses a link or rename across its rules, but
    // also what any kernel says across filesystems: it only counts as a
    // denial when canary, scratch and temp dir share one filesystem.
    let same_fs = {
        use std::os::unix::fs::MetadataExt;
        let dev = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.dev()).ok();
        let scratch_base = ctx.spawner.config().scratch_base.clone();
        let d = dev(&ctx.canary_file);
        d.is_some() && d == dev(&scratch_base) && d == dev(&tmp_dir)
    };
    args.push(("same_fs".into(), same_fs.to_string()));
    args.push(("exe".into(), ctx.exe.display().to_string()));
    let run = ctx.run("P5", &args).await;

    let mut checks = Vec::new();
    for (key, path) in &targets {
        let name = format!("host-{key}-absent");
        if path.symlink_metadata().is_ok() {
            checks.push(fail(&name, format!("the child created {}", path.display())));
            let _ = std::fs::remove_file(path);
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
    checks.extend(run.into_checks());
    checks
}

const DENIED: [i32; 2] = [libc::EACCES, libc::EPERM];

pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let get = |k: &str| args.get(k).cloned().unwrap_or_default();
    let cross_denied: &[i32] = if get("same_fs") == "true" {
        &[libc::EACCES, libc::EPERM, libc::EXDEV]
    } else {
        &DENIED
    };
    let canary = get("canary");
    r.forbidden("read-outside-canary", child::read_file(&canary), &DENIED);
    match child::read_file("/etc/shadow") {
        Err(libc::ENOENT) => r.check(
            "read-etc-shadow",
            ProbeStatus::Pass,
            "no /etc/shadow on this host",
        ),
        res => r.forbidden("read-etc-shadow", res, &DENIED),
    }
    for key in ["out_tmp", "out_home", "out_pkg"] {
        if let Some(p) = args.get(key) {
            r.forbidden(
                &format!("create-{key}"),
                child::write_file(p, libc::O_CREAT | libc::O_EXCL),
                &DENIED,
            );
        }
    }
    r.forbidden(
        "write-canary",
        child::write_file(&canary, libc::O_APPEND),
        &DENIED,
    );
    r.forbidden(
        "truncate-canary",
        child::write_file(&canary, libc::O_TRUNC),
        &DENIED,
    );

    // Rename a scratch file out of scratch.
    let _ = std::fs::write("to-move", b"x");
    let rename_to = get("rename_to");
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
            &DENIED,
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

    // Positive control: a program in the package dir can be executed.
    r.control("control-package-exec", exec_package(&get("exe")));
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
