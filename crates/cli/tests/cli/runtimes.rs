//! The common runtimes start under plain `cordon run`, default flags, as
//! root and as uid 65534: a hello-world each, checked by its output. A
//! runtime that is not installed fails its test with the package to
//! install (`.ci/run` installs them all); it is never counted as passing.
//!
//! The same hello-worlds run in tier landlock where a container runtime's
//! seccomp filter refuses user namespaces (cordon picks that tier by
//! itself there, and says so in one line), as root and as uid 65534.
//!
//! Also: when a program cannot start, or dies on a path the sandbox
//! denied, cordon's notes name the path and the flag that would grant it
//! (or why none would), and for a script the interpreter it resolved.

use std::path::Path;
use std::process::Command;

use crate::common::{cordon, run, text, unprivileged};
use crate::container_filter;

/// PATH for the runs: the system's, not a developer's shims.
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// One hello-world.
struct Runtime {
    name: &'static str,
    /// What must be installed for it (on [`PATH`]).
    needs: &'static str,
    /// The Debian package that provides it.
    package: &'static str,
    /// What cordon runs: the runtime, or sh when a source file must be
    /// written into the scratch dir first.
    program: &'static str,
    args: &'static [&'static str],
    stdout: &'static str,
}

const fn rt(
    name: &'static str,
    needs: &'static str,
    package: &'static str,
    program: &'static str,
    args: &'static [&'static str],
    stdout: &'static str,
) -> Runtime {
    Runtime {
        name,
        needs,
        package,
        program,
        args,
        stdout,
    }
}

const RUNTIMES: &[Runtime] = &[
    rt("sh", "sh", "dash", "sh", &["-c", "echo hello"], "hello\n"),
    rt(
        "bash",
        "bash",
        "bash",
        "bash",
        &["-c", "echo hello ${BASH_VERSINFO[0]}"],
        "hello 5\n",
    ),
    rt(
        "python3",
        "python3",
        "python3",
        "python3",
        &["-c", "import ssl, json; print(json.dumps('hello'))"],
        "\"hello\"\n",
    ),
    rt(
        "node",
        "node",
        "nodejs",
        "node",
        &[
            "-e",
            "console.log('hello', require('crypto').createHash('sha256').update('x').digest('hex').length)",
        ],
        "hello 64\n",
    ),
    rt(
        "java",
        "java",
        "default-jre-headless",
        "sh",
        &[
            "-c",
            "printf 'public class H { public static void main(String[] a) throws Exception { \
             System.out.println(\"hello \" + java.security.MessageDigest.getInstance(\"SHA-256\").digest(new byte[1]).length); } }' > H.java \
             && java H.java",
        ],
        "hello 32\n",
    ),
    rt(
        "perl",
        "perl",
        "perl",
        "perl",
        &["-e", "print \"hello\\n\""],
        "hello\n",
    ),
    rt(
        "gcc",
        "gcc",
        "gcc",
        "sh",
        &[
            "-c",
            "printf '#include <stdio.h>\\nint main(void){puts(\"hello\");return 0;}\\n' > a.c \
             && gcc a.c -o a && ./a",
        ],
        "hello\n",
    ),
    rt(
        "make",
        "make",
        "make",
        "sh",
        &["-c", "printf 'all:\\n\\t@echo hello\\n' > Makefile && make -s"],
        "hello\n",
    ),
    rt(
        "git",
        "git",
        "git",
        "sh",
        &[
            "-c",
            "git init -q r && cd r && git -c user.name=n -c user.email=n@example.com commit -q \
             --allow-empty -m hello && git log --format=%s",
        ],
        "hello\n",
    ),
    rt(
        "sqlite3",
        "sqlite3",
        "sqlite3",
        "sqlite3",
        &[":memory:", "select 'hello';"],
        "hello\n",
    ),
];

fn installed(program: &str) -> bool {
    PATH.split(':')
        .any(|d| Path::new(d).join(program).is_file())
}

/// Where the hello-worlds run.
#[derive(Clone, Copy, PartialEq)]
enum Host {
    /// This host as it is.
    AsItIs,
    /// Under a container runtime's seccomp filter: no user namespaces, so
    /// tier landlock, which cordon must name. `as_root`: cordon runs as
    /// root.
    Container { as_root: bool },
}

/// The runtimes that do not start in tier landlock (`as_root`: cordon
/// runs as root, so the sandbox has a uid of its own), and why: what the
/// tier gives up (README.md, "Tiers"). Each is checked to fail, so the
/// list stays true.
fn fails_in_tier_landlock(name: &str, as_root: bool) -> Option<&'static str> {
    match name {
        // pthread_getattr_np reads /proc/self/maps: no /proc is granted.
        "java" => Some("no /proc"),
        // ld's chmod of its output and git's of its lock file: as the
        // caller's own uid, path-based metadata writes are refused.
        "gcc" | "git" if !as_root => Some("no path-based chmod"),
        _ => None,
    }
}

fn hello_worlds(who: &str, host: Host, mut cmd: impl FnMut() -> Command) {
    let mut failures = Vec::new();
    for r in RUNTIMES {
        let name = r.name;
        if !installed(r.needs) {
            failures.push(format!(
                "{name}: `{}` is not installed (not a pass): install the Debian package `{}`, as \
                 .ci/run does",
                r.needs, r.package
            ));
            continue;
        }
        let mut c = cmd();
        c.env("PATH", PATH)
            .args(["run", "--", r.program])
            .args(r.args);
        if host != Host::AsItIs {
            container_filter::install_on(&mut c);
        }
        let out = run(&mut c);
        let (so, se) = (text(&out.stdout), text(&out.stderr));
        let tier_named = host == Host::AsItIs
            || se.contains("cordon: sandbox tier landlock: no namespaces, because tier namespaces is unavailable here");
        let known = match host {
            Host::Container { as_root } => fails_in_tier_landlock(name, as_root),
            Host::AsItIs => None,
        };
        if let Some(why) = known {
            if out.status.code() == Some(0) && so == r.stdout {
                failures.push(format!(
                    "{name} as {who} started, but fails_in_tier_landlock says it cannot \
                     ({why}): update the list and the README"
                ));
            } else if !tier_named {
                failures.push(format!("{name} as {who}: the tier is not named:\n{se}"));
            } else {
                println!("{name} as {who}: fails as listed ({why})");
            }
            continue;
        }
        if out.status.code() != Some(0) || so != r.stdout || !tier_named {
            failures.push(format!(
                "{name} as {who}: status {:?}, stdout {so:?} (want {:?}), stderr:\n{se}",
                out.status.code(),
                r.stdout
            ));
        } else {
            println!("{name} as {who}: ok");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn common_runtimes_run_with_default_flags_as_the_caller() {
    let cache = crate::common::shared_cache();
    hello_worlds("the caller", Host::AsItIs, || cordon(cache.path()));
}

#[test]
fn common_runtimes_run_with_default_flags_as_uid_65534() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sub = dir.path().join("nobody");
    hello_worlds("uid 65534 (or the caller)", Host::AsItIs, || {
        unprivileged(&sub)
    });
}

#[test]
fn common_runtimes_run_in_a_container_as_the_caller() {
    let cache = crate::common::shared_cache();
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    hello_worlds(
        "the caller, in a container",
        Host::Container { as_root },
        || cordon(cache.path()),
    );
}

#[test]
fn common_runtimes_run_in_a_container_as_uid_65534() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sub = dir.path().join("nobody");
    hello_worlds(
        "uid 65534 (or the caller), in a container",
        Host::Container { as_root: false },
        || unprivileged(&sub),
    );
}

/// A file the sandbox is not granted: the note names it and `--ro`.
#[test]
fn a_denied_path_is_named_with_the_flag_that_grants_it() {
    use std::os::unix::fs::PermissionsExt;
    let cache = crate::common::shared_cache();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = dir.path().join("data.txt");
    std::fs::write(&f, "x").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(cordon(cache.path())
        .env("PATH", PATH)
        .args(["run", "--", "/bin/cat"])
        .arg(&f));
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "the program was denied {}; if it should read it, grant it with --ro {}",
            f.display(),
            f.display()
        )),
        "{err}"
    );
    // The note is right: with the grant it works.
    let out = run(cordon(cache.path())
        .env("PATH", PATH)
        .args(["run", "--ro"])
        .arg(&f)
        .args(["--", "/bin/cat"])
        .arg(&f));
    assert_eq!(text(&out.stdout), "x", "{}", text(&out.stderr));
}

/// As root a shim under a 0700 home (pyenv's, say) cannot even be
/// executed by the sandbox's uid; a wrapper that execs something there
/// dies on it. Both notes say what the program resolved to, that it is a
/// script and by which interpreter, and why no flag helps. (As a normal
/// user the sandbox keeps the caller's uid, so only the wrapper's case
/// arises, and `--ro` is the fix.)
#[test]
fn a_shim_the_sandbox_uid_cannot_reach_is_explained() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let cache = crate::common::shared_cache();
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let shims = home.path().join("shims");
    std::fs::create_dir(&shims).unwrap();
    let shim = shims.join("tool");
    std::fs::write(&shim, "#!/usr/bin/env bash\nexec \"$0.real\" \"$@\"\n").unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    if root {
        let out = run(cordon(cache.path())
            .env("PATH", format!("{}:{PATH}", shims.display()))
            .args(["run", "--", "tool"]));
        let err = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{err}");
        assert!(
            err.contains(&format!(
                "`tool` resolved to {}, a script run by /usr/bin/env",
                shim.display()
            )),
            "{err}"
        );
        assert!(
            err.contains(&format!(
                "which cannot reach {}: {} is mode 0700",
                shim.display(),
                home.path().display()
            )),
            "{err}"
        );
        assert!(err.contains("No flag grants that"), "{err}");
    }

    // A readable wrapper whose target is in the 0700 home.
    let open = tempfile::tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let wrapper = open.path().join("wrapper");
    let target = home.path().join("real-tool");
    std::fs::write(&target, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {} \"$@\"\n", target.display()),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(cordon(cache.path())
        .env("PATH", PATH)
        .args(["run", "--"])
        .arg(&wrapper));
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("{} is a script run by", wrapper.display())),
        "{err}"
    );
    let want = if root {
        format!(
            "the program was denied {}: the sandbox, which runs as a uid of its own (such as \
             2000000000), cannot read it",
            target.display()
        )
    } else {
        format!(
            "the program was denied {}; if it should read it, grant it with --ro {}",
            target.display(),
            target.display()
        )
    };
    assert!(err.contains(&want), "{err}");
}
