//! The seccomp filters alone, on the real kernel: real programs work under
//! them and the denials hold.
//!
//! The filters are compiled from the backend's own `src/linux/filter.rs`
//! (included below with `#[path]`, so this is the code `wrap` uses, not a
//! copy). A child installs them in a `pre_exec` hook (`no_new_privs`, then
//! `seccomp(SECCOMP_SET_MODE_FILTER)` per program, in order) and execs:
//! real tools (`sh`, `python3`, `gcc`, `git`, `make`, `tar`, `cp -p`,
//! `perl`, `sqlite3`, `node`, `java`), or this binary
//! in *probe* mode, which issues one raw syscall and prints the result.
//! Every denial is also probed with no filter and with the deny-list pair, so
//! each check shows what it catches when the protection is missing. One
//! scenario asks the kernel for its verdict on 46 000 calls without running
//! any of them, under `programs()` and under the filter pair seccompiler
//! compiles from the same tables, and requires the same answers.
//!
//! `harness = false`: every scenario runs in its own process; as root each
//! runs twice, as root and as uid 65534. Prints `N passed, M failed`. A
//! tool that is not installed fails its scenario with the Debian package
//! to install (`.ci/run` installs them all): a missing runtime is never a
//! pass. `-- --measure` prints instruction counts, install times and
//! syscall costs instead, for `programs()` and the deny-list pair next to
//! the filters seccompiler compiles from the same tables (a one-shot
//! figure, not a test). Arguments as libtest's (`tests/common/driver.rs`):
//! bare words filter, `--exact`, `--skip NAME`, `--list`; a filter that
//! matches no scenario is an error.

#[cfg(target_os = "linux")]
#[path = "common/driver.rs"]
mod driver;

#[cfg(target_os = "linux")]
#[allow(dead_code, unused_imports)]
#[path = "../src/linux/seccomp/mod.rs"]
mod filter;

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("0 passed, 0 failed (seccomp exists on Linux only)");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixDatagram;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use super::filter;

    const SCENARIO_ENV: &str = "CORDON_SECCOMP_SCENARIO";
    const PROBE_ENV: &str = "CORDON_SECCOMP_PROBE";
    const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

    // ------------------------------------------------------------ outcome

    /// Why a scenario failed.
    type Outcome = String;

    fn fail<T>(msg: impl Into<String>) -> Result<T, Outcome> {
        Err(msg.into())
    }

    fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), Outcome> {
        if cond {
            Ok(())
        } else {
            fail(msg())
        }
    }

    // ---------------------------------------------------------- scenarios

    type Scenario = (&'static str, fn() -> Result<(), Outcome>);

    fn scenarios() -> Vec<Scenario> {
        vec![
            ("filters_in_force", filters_in_force),
            ("works_sh", works_sh),
            ("works_python3", works_python3),
            ("works_gcc", works_gcc),
            ("works_git", works_git),
            ("works_make", works_make),
            ("works_tar", works_tar),
            ("works_cp_p", works_cp_p),
            ("works_perl", works_perl),
            ("works_sqlite3", works_sqlite3),
            ("works_node", works_node),
            ("works_java", works_java),
            ("helper_calls_work", helper_calls_work),
            ("denials_hold", denials_hold),
            (
                "unix_dgram_cannot_reach_host_path",
                unix_dgram_cannot_reach_host_path,
            ),
            ("x32_call_is_killed", x32_call_is_killed),
            (
                "kernel_verdicts_match_seccompilers",
                kernel_verdicts_match_seccompilers,
            ),
            (
                "backend_installs_filters_by_layer",
                backend_installs_filters_by_layer,
            ),
        ]
    }

    pub fn main() {
        if let Ok(probe) = std::env::var(PROBE_ENV) {
            let arg = std::env::args().nth(1).unwrap_or_default();
            println!("{}", run_probe(&probe, &arg));
            std::process::exit(0);
        }
        if let Ok(name) = std::env::var(SCENARIO_ENV) {
            let Some((_, run)) = scenarios().into_iter().find(|(n, _)| *n == name) else {
                eprintln!("unknown scenario {name}");
                std::process::exit(2);
            };
            match run() {
                Ok(()) => std::process::exit(0),
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
            }
        }
        let selection = super::driver::Selection::from_env();
        if selection.flags.iter().any(|a| a == "--measure") {
            measure();
            return;
        }
        let names: Vec<&str> = scenarios().iter().map(|(n, _)| *n).collect();
        drive(&selection.chosen_or_exit(&names));
    }

    fn drive(chosen: &[&str]) {
        let exe = std::env::current_exe().expect("current_exe");
        // SAFETY: geteuid cannot fail.
        let is_root = unsafe { libc::geteuid() } == 0;
        let nobody = is_root.then(|| copy_for_nobody(&exe));
        let (mut passed, mut failed) = (0, Vec::new());
        for &name in chosen {
            let mut runs = vec![("host", exe.clone(), false)];
            if let Some((_, copy)) = &nobody {
                runs.push(("uid65534", copy.clone(), true));
            }
            for (label, bin, as_nobody) in runs {
                let started = Instant::now();
                let mut cmd = Command::new(&bin);
                cmd.env(SCENARIO_ENV, name);
                if as_nobody {
                    cmd.env_clear()
                        .env(SCENARIO_ENV, name)
                        .env("PATH", PATH)
                        .env("HOME", "/nonexistent")
                        .current_dir("/tmp")
                        .uid(65534)
                        .gid(65534);
                }
                let r = run_child(cmd, Duration::from_secs(300));
                let ms = started.elapsed().as_millis();
                match r.status.and_then(|s| s.code()) {
                    Some(0) => {
                        passed += 1;
                        println!("test {name} [{label}] ... ok ({ms} ms)");
                    }
                    _ => {
                        println!(
                            "test {name} [{label}] ... FAILED ({ms} ms)\n  status: {:?}\n  stdout: {}\n  stderr: {}",
                            r.status, r.stdout, r.stderr
                        );
                        failed.push(format!("{name} [{label}]"));
                    }
                }
            }
        }
        println!("\n{passed} passed, {} failed", failed.len());
        for f in &failed {
            println!("  failed: {f}");
        }
        if let Some((dir, _)) = nobody {
            let _ = std::fs::remove_dir_all(dir);
        }
        if !failed.is_empty() {
            std::process::exit(1);
        }
    }

    /// A copy of this binary that uid 65534 can run.
    fn copy_for_nobody(exe: &Path) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("cordon-seccomp-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let copy = dir.join("seccomp_programs");
        std::fs::copy(exe, &copy).expect("copy test binary");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        (dir, copy)
    }

    // ------------------------------------------------------ running a child

    /// Which filters the child installs before exec.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Filters {
        /// None (the control: what the protection changes).
        None,
        /// `filter::deny_list_programs()` (the deny-list pair).
        DenyList,
        /// `filter::programs()` (one filter).
        Programs,
        /// What seccompiler compiled from the same tables before
        /// `filter.rs` had its own compiler (allowlist + explicit-deny).
        Reference,
        /// The deny-list pair as seccompiler compiled it.
        DenyListReference,
    }

    fn compiled(f: Filters) -> Vec<filter::Program> {
        match f {
            Filters::None => Vec::new(),
            Filters::DenyList => filter::deny_list_programs().expect("deny_list_programs"),
            Filters::Programs => filter::programs().expect("programs"),
            Filters::Reference => reference::programs(),
            Filters::DenyListReference => reference::deny_list(),
        }
    }

    /// Installs `progs` on the calling process, in order. Runs after fork:
    /// raw syscalls on memory prepared before it, no allocation.
    fn install(progs: &[filter::Program]) -> std::io::Result<()> {
        // SAFETY: prctl/seccomp on integers and on `progs`, which outlives
        // the calls.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for p in progs {
                let fprog = libc::sock_fprog {
                    len: p.len() as libc::c_ushort,
                    filter: p.as_ptr() as *mut libc::sock_filter,
                };
                if libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                    0 as libc::c_ulong,
                    &fprog as *const libc::sock_fprog,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// `program args…` in `dir` (also HOME and TMPDIR), under `filters`,
    /// with a clean environment.
    fn command(filters: Filters, dir: &Path, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", dir)
            .env("TMPDIR", dir)
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        let progs = compiled(filters);
        // SAFETY: `install` is async-signal-safe (see there).
        unsafe {
            cmd.pre_exec(move || install(&progs));
        }
        cmd
    }

    struct Ran {
        status: Option<std::process::ExitStatus>,
        stdout: String,
        stderr: String,
    }

    impl std::fmt::Display for Ran {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "status {:?}, stdout {:?}, stderr {:?}",
                self.status,
                self.stdout,
                tail(&self.stderr)
            )
        }
    }

    fn tail(s: &str) -> &str {
        let cut = s.len().saturating_sub(1500);
        let cut = (cut..=s.len())
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(0);
        &s[cut..]
    }

    /// Runs `cmd` to completion (killed after `limit`), capturing output.
    /// A spawn failure (e.g. a filter the kernel refused) is a `None`
    /// status with the error in `stderr`.
    fn run_child(mut cmd: Command, limit: Duration) -> Ran {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Ran {
                    status: None,
                    stdout: String::new(),
                    stderr: format!("spawn failed: {e}"),
                }
            }
        };
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let t_err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let status = super::driver::wait_within(&mut child, limit);
        Ran {
            status,
            stdout: t_out.join().unwrap_or_default(),
            stderr: t_err.join().unwrap_or_default(),
        }
    }

    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("cordon-seccomp-")
            .tempdir()
            .expect("tempdir")
    }

    /// The tool's path in PATH, if it is installed.
    fn which(tool: &str) -> Option<PathBuf> {
        PATH.split(':')
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.is_file())
    }

    /// The path of `name`, or a failure naming `package`, the Debian
    /// package to install for it: a missing tool is never a pass.
    fn installed(name: &str, package: &str) -> Result<PathBuf, Outcome> {
        which(name).ok_or_else(|| {
            format!(
                "`{name}` is not installed (looked in {PATH}; not a pass): install the Debian \
                 package `{package}`, as .ci/run does"
            )
        })
    }

    /// Runs a tool under `programs()`; a tool that is not installed fails
    /// the scenario ([`installed`]).
    fn tool(name: &str, args: &[&str], package: &str, dir: &Path) -> Result<Ran, Outcome> {
        let path = installed(name, package)?;
        let r = run_child(
            command(Filters::Programs, dir, &path, args),
            Duration::from_secs(240),
        );
        if r.status.map(|s| s.success()) != Some(true) {
            return fail(format!("{name} {args:?} failed under the filters: {r}"));
        }
        Ok(r)
    }

    fn sh(script: &str, dir: &Path) -> Result<Ran, Outcome> {
        tool("sh", &["-c", script], "dash", dir)
    }

    // ------------------------------------------------------- works cases

    fn filters_in_force() -> Result<(), Outcome> {
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        for (f, want) in [
            (Filters::Programs, "Seccomp=2 filters=1 nnp=1"),
            (Filters::DenyList, "Seccomp=2 filters=2 nnp=1"),
            (Filters::None, "Seccomp=0 filters=0 nnp=1"),
        ] {
            let got = probe(f, d.path(), &exe, "status", "");
            ensure(got == want, || format!("{f:?}: want {want}, got {got}"))?;
        }
        Ok(())
    }

    fn works_sh() -> Result<(), Outcome> {
        let d = scratch();
        let r = sh("echo hi | tr a-z A-Z", d.path())?;
        ensure(r.stdout == "HI\n", || format!("{r}"))
    }

    fn works_python3() -> Result<(), Outcome> {
        let d = scratch();
        let code = r#"
import os, json, threading, subprocess, hashlib, socket, multiprocessing
open('f.json', 'w').write(json.dumps({'a': 1}))
box = []
t = threading.Thread(target=lambda: box.append(1)); t.start(); t.join()
sub = subprocess.run(['/bin/echo', 'sub'], capture_output=True).stdout.decode().strip()
a, b = socket.socketpair(); a.sendall(b'x'); pair = b.recv(1).decode()
with multiprocessing.Pool(2) as p:
    sq = sum(p.map(abs, [-1, -2, -3]))
print(json.load(open('f.json'))['a'], len(box), sub, pair, sq, len(os.urandom(8)),
      hashlib.sha256(b'').hexdigest()[:8])
"#;
        let r = tool("python3", &["-c", code], "python3", d.path())?;
        ensure(r.stdout == "1 1 sub x 6 8 e3b0c442\n", || format!("{r}"))
    }

    fn works_gcc() -> Result<(), Outcome> {
        installed("gcc", "gcc")?;
        let d = scratch();
        let src = r#"#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
static void *run(void *p) { *(int *)p = 42; return 0; }
int main(void) {
    int v = 0; pthread_t t;
    if (pthread_create(&t, 0, run, &v) || pthread_join(t, 0)) return 1;
    pid_t pid = fork();
    if (pid == 0) _exit(7);
    int st; waitpid(pid, &st, 0);
    printf("compiled ok %d %d\n", v, WEXITSTATUS(st));
    return 0;
}
"#;
        std::fs::write(d.path().join("hello.c"), src).unwrap();
        let r = sh("gcc -O1 -pthread hello.c -o hello && ./hello", d.path())?;
        ensure(r.stdout == "compiled ok 42 7\n", || format!("{r}"))
    }

    fn works_git() -> Result<(), Outcome> {
        installed("git", "git")?;
        let d = scratch();
        let r = sh(
            "git init -q . && echo one > f && git add f && \
             git -c user.name=t -c user.email=t@e commit -q -m first && \
             echo two >> f && git -c user.name=t -c user.email=t@e commit -qam second && \
             git log --format=%s && git show HEAD:f",
            d.path(),
        )?;
        ensure(r.stdout == "second\nfirst\none\ntwo\n", || format!("{r}"))
    }

    fn works_make() -> Result<(), Outcome> {
        installed("make", "make")?;
        let d = scratch();
        std::fs::write(
            d.path().join("Makefile"),
            "all: c d\nc: a\n\tcp a c\nd: a\n\ttr a-z A-Z < a > d\n",
        )
        .unwrap();
        std::fs::write(d.path().join("a"), "made\n").unwrap();
        let r = sh("make -s -j2 && cat c d", d.path())?;
        ensure(r.stdout == "made\nMADE\n", || format!("{r}"))
    }

    fn works_tar() -> Result<(), Outcome> {
        installed("tar", "tar")?;
        installed("gzip", "gzip")?;
        let d = scratch();
        let r = sh(
            "mkdir -p src/sub && echo one > src/f && echo two > src/sub/g && \
             ln -s f src/l && tar cf t.tar src && tar czf t.tgz src && \
             mkdir x y && tar xf t.tar -C x && tar xzf t.tgz -C y && \
             cat x/src/f x/src/sub/g y/src/l && readlink y/src/l",
            d.path(),
        )?;
        ensure(r.stdout == "one\ntwo\none\nf\n", || format!("{r}"))
    }

    fn works_cp_p() -> Result<(), Outcome> {
        installed("cp", "coreutils")?;
        let d = scratch();
        let r = sh(
            "echo x > f && chmod 640 f && touch -d '2001-02-03 04:05:06' f && \
             cp -p f g && stat -c '%a %Y' f g",
            d.path(),
        )?;
        let lines: Vec<&str> = r.stdout.lines().collect();
        ensure(
            lines.len() == 2 && lines[0] == lines[1] && lines[0].starts_with("640 "),
            || format!("cp -p did not preserve mode and times: {r}"),
        )
    }

    fn works_perl() -> Result<(), Outcome> {
        let d = scratch();
        let r = tool(
            "perl",
            &["-e", "open my $f, '>', 'p' or die; print $f 6*7; close $f; open $f, '<', 'p'; print 'perl ', <$f>, qq(\\n)"],
            "perl",
            d.path(),
        )?;
        ensure(r.stdout == "perl 42\n", || format!("{r}"))
    }

    fn works_sqlite3() -> Result<(), Outcome> {
        let d = scratch();
        let r = tool(
            "sqlite3",
            &[
                "db",
                "create table t(x); insert into t values(40),(2); select sum(x) from t;",
            ],
            "sqlite3",
            d.path(),
        )?;
        ensure(r.stdout == "42\n", || format!("{r}"))
    }

    fn works_node() -> Result<(), Outcome> {
        let d = scratch();
        let r = tool(
            "node",
            &[
                "-e",
                "require('fs').writeFileSync('n', '1'); \
                 console.log(require('fs').readFileSync('n', 'utf8'))",
            ],
            "nodejs",
            d.path(),
        )?;
        ensure(r.stdout == "1\n", || format!("{r}"))
    }

    fn works_java() -> Result<(), Outcome> {
        let d = scratch();
        let r = tool("java", &["-version"], "default-jre-headless", d.path())?;
        ensure(r.stderr.contains("version"), || format!("{r}"))
    }

    // ------------------------------------------------------------ probes

    /// Runs this binary in probe mode under `filters`; returns its one
    /// line of output, or how it died.
    fn probe(filters: Filters, dir: &Path, exe: &Path, name: &str, arg: &str) -> String {
        let mut cmd = command(filters, dir, exe, &[arg]);
        cmd.env(PROBE_ENV, name);
        let r = run_child(cmd, Duration::from_secs(120));
        match r.status {
            Some(s) if s.success() => r.stdout.trim().to_string(),
            Some(s) if s.signal().is_some() => format!("killed by signal {}", s.signal().unwrap()),
            other => format!("probe failed: {other:?} {}", r.stderr.trim()),
        }
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    fn errno_name(e: i32) -> String {
        match e {
            libc::EPERM => "EPERM".into(),
            libc::ENOSYS => "ENOSYS".into(),
            libc::EACCES => "EACCES".into(),
            libc::EINVAL => "EINVAL".into(),
            libc::EBADF => "EBADF".into(),
            libc::EFAULT => "EFAULT".into(),
            libc::ENOENT => "ENOENT".into(),
            libc::ESRCH => "ESRCH".into(),
            libc::ENOTTY => "ENOTTY".into(),
            libc::EISCONN => "EISCONN".into(),
            libc::EOPNOTSUPP => "EOPNOTSUPP".into(),
            libc::ENODEV => "ENODEV".into(),
            libc::ENOMEM => "ENOMEM".into(),
            e => format!("errno {e}"),
        }
    }

    /// "ok" for a non-negative return, else the errno's name.
    fn res(r: i64) -> String {
        if r >= 0 {
            "ok".into()
        } else {
            errno_name(errno())
        }
    }

    /// `clone(flags)` through the raw syscall; a child created anyway
    /// exits at once (raw `_exit`) and is reaped.
    fn raw_clone(flags: u64) -> String {
        // SAFETY: a raw clone without CLONE_VM: the child has its own copy
        // of memory and only calls _exit.
        let r = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
        if r == 0 {
            // SAFETY: leaving the child at once.
            unsafe { libc::_exit(0) };
        }
        reap(r)
    }

    fn reap(r: i64) -> String {
        if r > 0 {
            let mut st = 0;
            // SAFETY: waiting for the child just created.
            unsafe { libc::waitpid(r as libc::pid_t, &mut st, libc::__WALL) };
            "ok".into()
        } else {
            res(r)
        }
    }

    /// `sendto` of `msg` from one end of a `socketpair(AF_UNIX, ty)` to the
    /// pathname `path`; what happened at each step.
    fn pair_sendto(ty: i32, path: &str, msg: &[u8]) -> String {
        let mut sv = [0; 2];
        // SAFETY: socketpair into a 2-int array.
        if unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()) } != 0 {
            return format!("socketpair={}", errno_name(errno()));
        }
        // SAFETY: a zeroed sockaddr_un, filled within bounds.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(path.as_bytes()) {
            *d = *s as libc::c_char;
        }
        // SAFETY: sendto with a valid buffer and address.
        let n = unsafe {
            libc::sendto(
                sv[0],
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        format!("socketpair=ok sendto={}", res(n as i64))
    }

    /// The probes: each issues real syscalls and prints one line.
    fn run_probe(name: &str, arg: &str) -> String {
        // SAFETY: (for the whole match) raw syscalls with arguments that
        // are harmless even when no filter stops them (invalid fds or
        // addresses, the process's own values, or a no-op re-set of the
        // parent's current value).
        unsafe {
            let ppid = libc::getppid();
            match name {
                "status" => {
                    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
                    let field = |k: &str| {
                        s.lines()
                            .find_map(|l| l.strip_prefix(k))
                            .map(|v| v.trim().to_string())
                            .unwrap_or_else(|| "?".into())
                    };
                    format!(
                        "Seccomp={} filters={} nnp={}",
                        field("Seccomp:"),
                        field("Seccomp_filters:"),
                        field("NoNewPrivs:")
                    )
                }
                "seccomp_mode" => format!("mode={}", libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0)),
                "socket_unix" => res(libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) as i64),
                "socket_inet" => res(libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) as i64),
                "pair_stream" | "pair_seqpacket" | "pair_stream_flags" | "pair_dgram"
                | "pair_dgram_cloexec" | "pair_raw" | "pair_inet" | "pair_dgram_hi"
                | "pair_stream_hi" => {
                    let (dom, ty): (i32, u64) = match name {
                        "pair_stream" => (libc::AF_UNIX, libc::SOCK_STREAM as u64),
                        "pair_seqpacket" => (libc::AF_UNIX, libc::SOCK_SEQPACKET as u64),
                        "pair_stream_flags" => (
                            libc::AF_UNIX,
                            (libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64,
                        ),
                        "pair_dgram" => (libc::AF_UNIX, libc::SOCK_DGRAM as u64),
                        "pair_dgram_cloexec" => (
                            libc::AF_UNIX,
                            (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as u64,
                        ),
                        "pair_raw" => (libc::AF_UNIX, libc::SOCK_RAW as u64),
                        "pair_inet" => (libc::AF_INET, libc::SOCK_STREAM as u64),
                        // The kernel reads `int type`: the high half is
                        // ignored by it and by the filter alike.
                        "pair_dgram_hi" => (libc::AF_UNIX, libc::SOCK_DGRAM as u64 | 1 << 32),
                        _ => (libc::AF_UNIX, libc::SOCK_STREAM as u64 | 1 << 32),
                    };
                    let mut sv = [0i32; 2];
                    res(libc::syscall(
                        libc::SYS_socketpair,
                        dom,
                        ty,
                        0,
                        sv.as_mut_ptr(),
                    ))
                }
                "clone_plain" => raw_clone(libc::SIGCHLD as u64),
                "clone_newuser" => raw_clone(libc::CLONE_NEWUSER as u64 | libc::SIGCHLD as u64),
                "clone_ns_all" => filter::CLONE_NS_FLAGS
                    .iter()
                    .map(|(f, n)| format!("{n}={}", raw_clone(f | libc::SIGCHLD as u64)))
                    .collect::<Vec<_>>()
                    .join(" "),
                "clone3" => {
                    // struct clone_args: flags, pidfd, child_tid,
                    // parent_tid, exit_signal, stack, stack_size, tls.
                    let mut args = [0u64; 8];
                    args[4] = libc::SIGCHLD as u64;
                    let r = libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), 64usize);
                    if r == 0 {
                        libc::_exit(0);
                    }
                    reap(r)
                }
                "io_uring_setup" => {
                    let mut params = [0u8; 120];
                    let r = libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr());
                    res(r)
                }
                "ptrace" => res(libc::ptrace(libc::PTRACE_PEEKUSER, ppid, 0, 0)),
                "bpf" => res(libc::syscall(libc::SYS_bpf, -1i32, 0usize, 0u32)),
                "mount" => res(libc::mount(
                    c"none".as_ptr(),
                    c"/nonexistent-cordon-mountpoint".as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                ) as i64),
                "unshare" => res(libc::unshare(libc::CLONE_NEWUSER) as i64),
                "kcmp" => {
                    let me = libc::getpid();
                    res(libc::syscall(libc::SYS_kcmp, me, me, 0, 0, 0))
                }
                "far_nr" => res(libc::syscall(4000)),
                "lookup_dcookie" => res(libc::syscall(
                    libc::SYS_lookup_dcookie,
                    0u64,
                    0usize,
                    0usize,
                )),
                "kexec_file_load" => res(libc::syscall(
                    libc::SYS_kexec_file_load,
                    -1i32,
                    -1i32,
                    0usize,
                    0usize,
                    0usize,
                )),
                "open_tree_attr" => res(libc::syscall(467, -1i32, 0usize, 0u32, 0usize, 0usize)),
                "chroot" => res(libc::chroot(c"/".as_ptr()) as i64),
                "syslog" => res(libc::syscall(libc::SYS_syslog, 10, 0usize, 0)),
                "clock_settime" => {
                    let ts = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    res(libc::syscall(libc::SYS_clock_settime, -1i32, &ts))
                }
                "fanotify_init" => res(libc::syscall(libc::SYS_fanotify_init, 0x200u32, 0u32)),
                "userfaultfd" => res(libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC)),
                "keyctl" => res(libc::syscall(libc::SYS_keyctl, 0, -3i32, 0)),
                // Null pointers: EFAULT unfiltered, nothing made.
                "add_key" => res(libc::syscall(
                    libc::SYS_add_key,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                    -2i32,
                )),
                "perf_event_open" => res(libc::syscall(
                    libc::SYS_perf_event_open,
                    0usize,
                    0i32,
                    -1i32,
                    -1i32,
                    0u64,
                )),
                // One event of the host's AIO pool, freed when the probe
                // exits.
                "mmap_hugetlb" | "mmap_plain" => {
                    let huge = if name == "mmap_hugetlb" {
                        libc::MAP_HUGETLB
                    } else {
                        0
                    };
                    let len = 2 << 20;
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | huge,
                        -1,
                        0,
                    );
                    if p == libc::MAP_FAILED {
                        return errno_name(errno());
                    }
                    libc::munmap(p, len);
                    "ok".into()
                }
                "memfd_hugetlb" => {
                    let fd = libc::memfd_create(c"cordon".as_ptr(), libc::MFD_HUGETLB);
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    res(fd as i64)
                }
                "shmget_hugetlb" => {
                    let flags = libc::IPC_CREAT | 0o600 | libc::SHM_HUGETLB;
                    let id = libc::shmget(libc::IPC_PRIVATE, 2 << 20, flags);
                    if id >= 0 {
                        // The probe's own new segment, removed at once.
                        libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
                    }
                    res(id as i64)
                }
                "membarrier_global" => {
                    // MEMBARRIER_CMD_GLOBAL_EXPEDITED: no registration needed.
                    res(libc::syscall(libc::SYS_membarrier, 1 << 1, 0u32, 0))
                }
                "membarrier_private" => {
                    // REGISTER_PRIVATE_EXPEDITED, then PRIVATE_EXPEDITED.
                    let r = libc::syscall(libc::SYS_membarrier, 1 << 4, 0u32, 0);
                    if r != 0 {
                        return format!("register={}", errno_name(errno()));
                    }
                    res(libc::syscall(libc::SYS_membarrier, 1 << 3, 0u32, 0))
                }
                "fcntl_notify" => {
                    // dnotify on the probe's own cwd, removed at once.
                    let fd = libc::open(c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                    // DN_CREATE (4).
                    let r = libc::fcntl(fd, libc::F_NOTIFY, 4);
                    let out = res(r as i64);
                    libc::fcntl(fd, libc::F_NOTIFY, 0);
                    libc::close(fd);
                    out
                }
                "fcntl_setlease" | "fcntl_setlk" => {
                    // A file of the probe's own, open only here.
                    let fd = libc::memfd_create(c"cordon".as_ptr(), 0);
                    if fd < 0 {
                        return format!("memfd={}", errno_name(errno()));
                    }
                    let r = if name == "fcntl_setlease" {
                        let r = libc::fcntl(fd, libc::F_SETLEASE, libc::F_WRLCK);
                        let e = errno();
                        libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK);
                        (r, e)
                    } else {
                        let mut lock: libc::flock = std::mem::zeroed();
                        lock.l_type = libc::F_WRLCK as libc::c_short;
                        lock.l_whence = libc::SEEK_SET as libc::c_short;
                        (libc::fcntl(fd, libc::F_SETLK, &lock), errno())
                    };
                    libc::close(fd);
                    if r.0 >= 0 {
                        "ok".into()
                    } else {
                        errno_name(r.1)
                    }
                }
                "io_setup" => {
                    let mut ctx: libc::c_ulong = 0;
                    res(libc::syscall(libc::SYS_io_setup, 1u32, &mut ctx))
                }
                "pidfd_getfd" => {
                    let pidfd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0);
                    if pidfd < 0 {
                        return format!("pidfd_open={}", errno_name(errno()));
                    }
                    res(libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, 0, 0))
                }
                "name_to_handle_at" => {
                    let mut buf = [0u8; 200];
                    let mut mount_id = 0i32;
                    buf[..4].copy_from_slice(&128u32.to_ne_bytes());
                    res(libc::syscall(
                        libc::SYS_name_to_handle_at,
                        libc::AT_FDCWD,
                        c".".as_ptr(),
                        buf.as_mut_ptr(),
                        &mut mount_id,
                        0,
                    ))
                }
                "setsid" => res(libc::setsid() as i64),
                "setpgid" => res(libc::setpgid(0, 0) as i64),
                "x32_getpid" => {
                    let r = libc::syscall(libc::SYS_getpid | 0x4000_0000);
                    format!("survived: {}", res(r))
                }
                "ioctl_tiocsti" | "ioctl_tioclinux" | "ioctl_tiocsetd" | "ioctl_tioccons" => {
                    let cmd = match name {
                        "ioctl_tiocsti" => libc::TIOCSTI,
                        "ioctl_tioclinux" => libc::TIOCLINUX,
                        "ioctl_tiocsetd" => libc::TIOCSETD,
                        _ => libc::TIOCCONS,
                    };
                    let mut b = 0i32;
                    // stdin is /dev/null: not a tty, so ENOTTY unfiltered.
                    res(libc::ioctl(0, cmd, &mut b) as i64)
                }
                "ioctl_fionread" => {
                    let mut p = [0; 2];
                    libc::pipe(p.as_mut_ptr());
                    libc::write(p[1], b"abc".as_ptr().cast(), 3);
                    let mut n = 0i32;
                    let r = libc::ioctl(p[0], libc::FIONREAD, &mut n);
                    format!("{} n={n}", res(r as i64))
                }
                "personality_rie" => res(libc::personality(0x0040_0000) as i64),
                "personality_query" => res(libc::personality(0xffff_ffff) as i64),
                "prctl_set_mm" => {
                    // PR_SET_MM_MAP_SIZE only reports a size and needs no
                    // privilege, so without the filter it succeeds.
                    let mut size = 0u32;
                    res(libc::prctl(35, 15, &mut size as *mut u32 as libc::c_ulong, 0, 0) as i64)
                }
                "prctl_sched_core" => {
                    let mut cookie = 0u64;
                    res(libc::prctl(62, 0, 0, 0, &mut cookie as *mut u64 as libc::c_ulong) as i64)
                }
                "prctl_ok" => {
                    let a = libc::prctl(libc::PR_SET_NAME, c"probe".as_ptr(), 0, 0, 0);
                    let b = libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                    let c = libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
                    format!("{} {} {}", res(a as i64), res(b as i64), c)
                }
                "affinity_parent" | "affinity_self" => {
                    let pid = if name == "affinity_self" { 0 } else { ppid };
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    let size = std::mem::size_of::<libc::cpu_set_t>();
                    if libc::sched_getaffinity(pid, size, &mut set) != 0 {
                        return format!("getaffinity={}", errno_name(errno()));
                    }
                    res(libc::sched_setaffinity(pid, size, &set) as i64)
                }
                "setpriority_parent" | "setpriority_self" => {
                    let who = if name == "setpriority_self" {
                        0
                    } else {
                        ppid as u32
                    };
                    *libc::__errno_location() = 0;
                    let cur = libc::getpriority(libc::PRIO_PROCESS, who);
                    if cur == -1 && errno() != 0 {
                        return format!("getpriority={}", errno_name(errno()));
                    }
                    res(libc::setpriority(libc::PRIO_PROCESS, who, cur) as i64)
                }
                "prlimit_parent" | "prlimit_self" => {
                    let pid = if name == "prlimit_self" { 0 } else { ppid };
                    let mut old: libc::rlimit64 = std::mem::zeroed();
                    if libc::prlimit64(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) != 0 {
                        return format!("read={}", errno_name(errno()));
                    }
                    let r = libc::prlimit64(pid, libc::RLIMIT_NOFILE, &old, std::ptr::null_mut());
                    format!("read=ok set={}", res(r as i64))
                }
                "ioprio_parent" => {
                    let cur = libc::syscall(libc::SYS_ioprio_get, 1, ppid);
                    if cur < 0 {
                        return format!("get={}", errno_name(errno()));
                    }
                    res(libc::syscall(libc::SYS_ioprio_set, 1, ppid, cur))
                }
                "sendto_seqpacket" => pair_sendto(libc::SOCK_SEQPACKET, arg, b"seqpacket"),
                "sendto_stream" => pair_sendto(libc::SOCK_STREAM, arg, b"stream"),
                "sendto_dgram" => pair_sendto(libc::SOCK_DGRAM, arg, b"dgram"),
                "helpers" => helper_calls(),
                "bench" => bench(),
                other => format!("unknown probe {other}"),
            }
        }
    }

    /// The calls the sandbox's monitor and pid-1 init make after the
    /// filters are installed (raw where libc might pick another syscall).
    fn helper_calls() -> String {
        let mut steps = Vec::new();
        // SAFETY: raw syscalls on the probe's own fds, memory and child.
        unsafe {
            let mut p = [0i32; 2];
            steps.push((
                "pipe2",
                res(libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) as i64),
            ));
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = libc::SIG_DFL;
            steps.push((
                "rt_sigaction",
                res(libc::sigaction(libc::SIGTERM, &act, std::ptr::null_mut()) as i64),
            ));
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            steps.push((
                "rt_sigprocmask",
                res(libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) as i64),
            ));
            let pid = libc::syscall(
                libc::SYS_clone,
                libc::SIGCHLD,
                0usize,
                0usize,
                0usize,
                0usize,
            );
            if pid == 0 {
                let ok = libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == 0
                    && libc::chdir(c"/".as_ptr()) == 0
                    && libc::getpid() > 0
                    && libc::write(p[1], b"k".as_ptr().cast(), 1) == 1
                    && libc::syscall(libc::SYS_close_range, 3u32, !0u32, 0u32) == 0;
                libc::syscall(libc::SYS_exit_group, if ok { 0 } else { 1 });
            }
            steps.push(("clone", res(pid)));
            let mut fds = [libc::pollfd {
                fd: p[0],
                events: libc::POLLIN,
                revents: 0,
            }];
            let ts = libc::timespec {
                tv_sec: 10,
                tv_nsec: 0,
            };
            steps.push((
                "ppoll",
                res(libc::ppoll(fds.as_mut_ptr(), 1, &ts, std::ptr::null()) as i64),
            ));
            #[cfg(target_arch = "x86_64")]
            steps.push((
                "poll",
                res(libc::syscall(libc::SYS_poll, fds.as_mut_ptr(), 1, 0)),
            ));
            let mut b = 0u8;
            steps.push((
                "read",
                res(libc::read(p[0], (&mut b as *mut u8).cast(), 1) as i64),
            ));
            steps.push(("kill", res(libc::kill(pid as i32, 0) as i64)));
            let mut st = 0;
            let w = libc::syscall(libc::SYS_wait4, pid, &mut st, 0, 0usize);
            steps.push(("wait4", res(w)));
            steps.push((
                "child",
                if st == 0 {
                    "ok".into()
                } else {
                    format!("{st:#x}")
                },
            ));
            steps.push(("close", res(libc::close(p[0]) as i64)));
            steps.push(("write", res(libc::write(1, b"".as_ptr().cast(), 0) as i64)));
        }
        let bad: Vec<String> = steps
            .iter()
            .filter(|(_, r)| r != "ok")
            .map(|(s, r)| format!("{s}={r}"))
            .collect();
        if bad.is_empty() {
            "helpers=ok".into()
        } else {
            bad.join(" ")
        }
    }

    fn helper_calls_work() -> Result<(), Outcome> {
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        let got = probe(Filters::Programs, d.path(), &exe, "helpers", "");
        ensure(got == "helpers=ok", || {
            format!("helper calls under programs(): {got}")
        })
    }

    // ------------------------------------------------------------ denials

    /// What the unfiltered control must show for a case to prove the
    /// filter is what decides it.
    #[derive(Clone, Copy)]
    enum Control {
        /// The result differs with no filter at all.
        Differs,
        /// It differs with no filter when the test runs as root (as
        /// another uid the kernel refuses the call by itself).
        DiffersAsRoot,
        /// It differs under the deny-list pair (the deny-list): what the
        /// allowlist or the argument checks add.
        DiffersFromDenyList,
        /// A design check with no observable difference (e.g. a number
        /// beyond the table: the kernel says ENOSYS too).
        Design,
    }

    fn denials_hold() -> Result<(), Outcome> {
        use Control::*;
        let cases: &[(&str, &str, Control)] = &[
            ("socket_unix", "EPERM", Differs),
            ("socket_inet", "EPERM", Differs),
            ("pair_stream", "ok", Design),
            ("pair_seqpacket", "ok", Design),
            ("pair_stream_flags", "ok", Design),
            ("pair_stream_hi", "ok", Design),
            ("pair_dgram", "EPERM", Differs),
            ("pair_dgram_cloexec", "EPERM", Differs),
            ("pair_raw", "EPERM", Differs),
            ("pair_dgram_hi", "EPERM", DiffersFromDenyList),
            ("pair_inet", "EPERM", DiffersFromDenyList),
            ("clone_plain", "ok", Design),
            ("clone_newuser", "EPERM", Differs),
            (
                "clone_ns_all",
                "CLONE_NEWUSER=EPERM CLONE_NEWNS=EPERM CLONE_NEWPID=EPERM CLONE_NEWNET=EPERM \
                 CLONE_NEWUTS=EPERM CLONE_NEWIPC=EPERM CLONE_NEWCGROUP=EPERM CLONE_NEWTIME=EPERM",
                Differs,
            ),
            ("clone3", "ENOSYS", Differs),
            ("io_uring_setup", "EPERM", Differs),
            ("ptrace", "EPERM", Differs),
            ("bpf", "EPERM", DiffersAsRoot),
            ("mount", "EPERM", DiffersAsRoot),
            ("unshare", "EPERM", Differs),
            ("kcmp", "ENOSYS", Differs),
            ("far_nr", "ENOSYS", Design),
            ("lookup_dcookie", "EPERM", DiffersFromDenyList),
            ("kexec_file_load", "EPERM", DiffersAsRoot),
            ("open_tree_attr", "EPERM", Differs),
            ("chroot", "EPERM", DiffersAsRoot),
            ("syslog", "EPERM", DiffersAsRoot),
            ("clock_settime", "EPERM", Differs),
            ("fanotify_init", "EPERM", DiffersFromDenyList),
            ("userfaultfd", "EPERM", DiffersAsRoot),
            ("keyctl", "EPERM", Differs),
            ("add_key", "EPERM", Differs),
            ("perf_event_open", "EPERM", Differs),
            ("io_setup", "ENOSYS", DiffersFromDenyList),
            ("pidfd_getfd", "EPERM", Differs),
            ("name_to_handle_at", "EPERM", Differs),
            ("setsid", "ok", DiffersFromDenyList),
            ("setpgid", "ok", DiffersFromDenyList),
            ("ioctl_tiocsti", "EPERM", Differs),
            ("ioctl_tioclinux", "EPERM", Differs),
            ("ioctl_tiocsetd", "EPERM", Differs),
            ("ioctl_tioccons", "EPERM", Differs),
            ("ioctl_fionread", "ok n=3", Design),
            ("personality_rie", "EPERM", Differs),
            ("personality_query", "ok", Design),
            ("prctl_set_mm", "EPERM", Differs),
            ("prctl_sched_core", "EPERM", DiffersFromDenyList),
            ("prctl_ok", "ok ok 1", Design),
            ("affinity_self", "ok", Design),
            ("affinity_parent", "EPERM", Differs),
            ("setpriority_self", "ok", Design),
            ("setpriority_parent", "EPERM", Differs),
            ("prlimit_self", "read=ok set=ok", Design),
            ("prlimit_parent", "read=ok set=EPERM", Differs),
            ("ioprio_parent", "EPERM", Differs),
            // Pools the whole host shares, refused by flag (`POOL_FLAGS`).
            ("mmap_hugetlb", "EPERM", Differs),
            ("mmap_plain", "ok", Design),
            ("memfd_hugetlb", "EPERM", Differs),
            ("shmget_hugetlb", "EPERM", DiffersAsRoot),
            ("fcntl_setlease", "EPERM", Differs),
            ("fcntl_notify", "EPERM", Differs),
            ("membarrier_global", "EPERM", Differs),
            ("membarrier_private", "ok", Design),
            ("fcntl_setlk", "ok", Design),
        ];
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let mut failures = Vec::new();
        for (name, want, control) in cases {
            let got = probe(Filters::Programs, d.path(), &exe, name, "");
            let none = probe(Filters::None, d.path(), &exe, name, "");
            let base = probe(Filters::DenyList, d.path(), &exe, name, "");
            println!("{name:20} programs: {got:24} none: {none:24} deny-list: {base}");
            if got != *want {
                failures.push(format!("{name}: want {want}, got {got}"));
            }
            let control_ok = match control {
                Differs => none != *want,
                DiffersAsRoot => !root || none != *want,
                DiffersFromDenyList => base != *want,
                Design => true,
            };
            if !control_ok {
                failures.push(format!(
                    "{name}: the control does not show the difference (none: {none}, deny-list: \
                     {base}): the probe cannot tell the filter's work apart"
                ));
            }
        }
        ensure(failures.is_empty(), || failures.join("\n"))
    }

    /// Breach 4: a datagram socketpair could `sendto` a host listener's
    /// pathname. The host-side socket here is the test's own.
    fn unix_dgram_cannot_reach_host_path() -> Result<(), Outcome> {
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        let path = d.path().join("host.sock");
        let host = UnixDatagram::bind(&path).expect("bind host socket");
        host.set_nonblocking(true).unwrap();
        let p = path.to_str().unwrap();
        let received = |host: &UnixDatagram| {
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            while let Ok(n) = host.recv(&mut buf) {
                got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            got
        };
        let mut failures = Vec::new();
        for (case, want) in [
            ("sendto_dgram", "socketpair=EPERM"),
            // Sent to the peer: seqpacket ignores the address.
            ("sendto_seqpacket", "socketpair=ok sendto=ok"),
            ("sendto_stream", "socketpair=ok sendto=EISCONN"),
        ] {
            let got = probe(Filters::Programs, d.path(), &exe, case, p);
            let arrived = received(&host);
            println!("{case:18} programs: {got} -> host received {arrived:?}");
            if got != want {
                failures.push(format!("{case}: want {want}, got {got}"));
            }
            if !arrived.is_empty() {
                failures.push(format!("{case}: the host socket received {arrived:?}"));
            }
        }
        // The control: without the filter (and with the deny-list pair) the
        // datagram arrives, so the check above can see a breach.
        for f in [Filters::None, Filters::DenyList] {
            let got = probe(f, d.path(), &exe, "sendto_dgram", p);
            let arrived = received(&host);
            println!("sendto_dgram       {f:?}: {got} -> host received {arrived:?}");
            if arrived != ["dgram"] {
                failures.push(format!(
                    "control {f:?}: the datagram did not arrive ({got}, {arrived:?}): the check \
                     cannot see the breach"
                ));
            }
        }
        ensure(failures.is_empty(), || failures.join("\n"))
    }

    fn x32_call_is_killed() -> Result<(), Outcome> {
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        let sigsys = format!("killed by signal {}", libc::SIGSYS);
        let got = probe(Filters::Programs, d.path(), &exe, "x32_getpid", "");
        let none = probe(Filters::None, d.path(), &exe, "x32_getpid", "");
        println!("x32 getpid: programs: {got}; none: {none}");
        ensure(got == sigsys, || {
            format!("x32 call under programs(): {got}")
        })?;
        ensure(none.starts_with("survived"), || {
            format!("control: without a filter the x32 call should return: {none}")
        })
    }

    // ------------------------------------------- the kernel's verdicts

    /// The `ERRNO` the oracle filter answers for a call every filter under
    /// test allows. Nothing else here returns it (the filters return
    /// `EPERM` and `ENOSYS`; no call runs).
    const ORACLE_ERRNO: u32 = 4000;
    /// The `exit_group` status the oracle lets through, to end a run.
    const ORACLE_EXIT: u64 = 77;
    /// A result slot never written (the run died before that call).
    const NOT_RUN: i64 = i64::MIN;
    /// A call that ran and succeeded (it must not: the oracle refuses all).
    const RAN: i64 = -1;

    /// The offset in `seccomp_data` of argument `i`'s low 32 bits.
    fn arg_low(i: u32) -> u32 {
        16 + 8 * i + if cfg!(target_endian = "little") { 0 } else { 4 }
    }

    /// The oracle, written out by hand (not with `filter.rs`'s
    /// assembler): `exit_group(77)` and `seccomp(SET_MODE_FILTER, 0,
    /// slot)` run, every other call gets `ERRNO(4000)`.
    ///
    /// Installed *before* the filters under test, it makes their verdict
    /// visible without running the call: the kernel keeps the most severe
    /// action (`KILL` > `ERRNO` > `ALLOW`) and, between two `ERRNO`s, the
    /// most recently installed filter's (`seccomp_run_filters`). So a call
    /// they allow returns 4000, one they refuse returns their errno, and
    /// nothing runs either way.
    fn oracle(slot: u64) -> filter::Program {
        let stmt = |code: u16, k: u32| libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        };
        let jeq = |k: u32, jf: u8| libc::sock_filter {
            code: 0x15,
            jt: 0,
            jf,
            k,
        };
        let (ld, ret) = (0x20, 0x06);
        let hi = if cfg!(target_endian = "little") { 4 } else { 0 };
        vec![
            stmt(ld, 0),                                       // 0: nr
            jeq(libc::SYS_exit_group as u32, 3),               // 1: → 5
            stmt(ld, arg_low(0)),                              // 2
            jeq(ORACLE_EXIT as u32, 11),                       // 3: → 15
            stmt(ret, libc::SECCOMP_RET_ALLOW),                // 4
            jeq(libc::SYS_seccomp as u32, 9),                  // 5: → 15
            stmt(ld, arg_low(0)),                              // 6
            jeq(libc::SECCOMP_SET_MODE_FILTER, 7),             // 7: → 15
            stmt(ld, arg_low(1)),                              // 8
            jeq(0, 5),                                         // 9: → 15
            stmt(ld, arg_low(2)),                              // 10
            jeq(slot as u32, 3),                               // 11: → 15
            stmt(ld, 16 + 8 * 2 + hi),                         // 12
            jeq((slot >> 32) as u32, 1),                       // 13: → 15
            stmt(ret, libc::SECCOMP_RET_ALLOW),                // 14
            stmt(ret, libc::SECCOMP_RET_ERRNO | ORACLE_ERRNO), // 15
        ]
    }

    /// The kernel's verdict on each call under `progs`, none of the calls
    /// running: a forked child installs the oracle, then `progs` (through
    /// the one `sock_fprog` the oracle lets `seccomp` take), issues every
    /// call and records its errno in shared memory. `ORACLE_ERRNO` means
    /// "allowed".
    fn kernel_verdicts(
        progs: &[filter::Program],
        calls: &[(u32, [u64; 6])],
    ) -> Result<Vec<i64>, String> {
        let mut slot = Box::new(libc::sock_fprog {
            len: 0,
            filter: std::ptr::null_mut(),
        });
        let slot_ptr: *mut libc::sock_fprog = &mut *slot;
        let oracle = oracle(slot_ptr as u64);
        let size = 8 * (calls.len() + 1);
        // SAFETY: a fresh shared anonymous mapping; checked below.
        let shared = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if shared == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        // Slot 0: which install failed (0: none); then one per call.
        // SAFETY: `size` bytes, i64-aligned (page-aligned), ours.
        let results =
            unsafe { std::slice::from_raw_parts_mut(shared.cast::<i64>(), calls.len() + 1) };
        results.fill(NOT_RUN);
        results[0] = 0;
        // SAFETY: the child runs raw syscalls on memory prepared above and
        // writes only to the shared mapping and `slot`; it ends with
        // exit_group (or is killed).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: see above; no allocation after fork.
            unsafe {
                let install = |p: &filter::Program| {
                    (*slot_ptr).len = p.len() as libc::c_ushort;
                    (*slot_ptr).filter = p.as_ptr() as *mut libc::sock_filter;
                    libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                        0 as libc::c_ulong,
                        slot_ptr,
                    ) == 0
                };
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || !install(&oracle) {
                    libc::_exit(2);
                }
                for (i, p) in progs.iter().enumerate() {
                    if !install(p) {
                        results[0] = 1000 * (i as i64 + 1) + errno() as i64;
                        libc::syscall(libc::SYS_exit_group, ORACLE_EXIT);
                    }
                }
                for (i, (nr, a)) in calls.iter().enumerate() {
                    let r = libc::syscall(*nr as libc::c_long, a[0], a[1], a[2], a[3], a[4], a[5]);
                    results[i + 1] = if r < 0 { errno() as i64 } else { RAN };
                }
                libc::syscall(libc::SYS_exit_group, ORACLE_EXIT);
                libc::_exit(3);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let out = results[1..].to_vec();
        let failed_install = results[0];
        // SAFETY: unmapping the mapping made above; `results` is not used
        // after this.
        unsafe { libc::munmap(shared, size) };
        drop(slot);
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != ORACLE_EXIT as i32 {
            let first_missing = out.iter().position(|r| *r == NOT_RUN);
            return Err(format!(
                "the oracle child ended with status {status:#x} (signal {}); first call without \
                 a result: {:?}",
                libc::WTERMSIG(status),
                first_missing.map(|i| calls[i])
            ));
        }
        if failed_install != 0 {
            return Err(format!(
                "installing filter {} failed: {}",
                failed_install / 1000,
                errno_name((failed_install % 1000) as i32)
            ));
        }
        Ok(out)
    }

    fn verdict_name(r: i64) -> String {
        match r {
            r if r == i64::from(ORACLE_ERRNO) => "allowed".into(),
            RAN => "RAN".into(),
            NOT_RUN => "not run".into(),
            r => errno_name(r as i32),
        }
    }

    /// Numbers the kernel lets through every filter without running it
    /// (`seccomp_uprobe_exception`): x86_64's `uretprobe` (335, Linux
    /// 6.11+) and `uprobe` (336). Called from anywhere but the kernel's
    /// uprobe trampolines they do nothing but fail (here: SIGILL for 335,
    /// `ENXIO` for 336), so no filter decides them and the oracle cannot
    /// see a verdict for them.
    #[cfg(target_arch = "x86_64")]
    const UNFILTERED: [u32; 2] = [335, 336];
    #[cfg(not(target_arch = "x86_64"))]
    const UNFILTERED: [u32; 0] = [];

    /// The calls whose verdicts are compared: every number 0..1024 (and a
    /// few beyond) with edge and random arguments, and thousands of
    /// argument vectors for each argument-checked syscall, built from the
    /// constants of its rules. Seeded, so every run makes the same list.
    fn verdict_calls() -> Vec<(u32, [u64; 6])> {
        let mut state = 0x5eed_c0de_u64;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut pool: Vec<u64> = vec![0, 1, 2, 0xffff_ffff, u64::MAX, libc::SIGCHLD as u64];
        for c in filter::checked() {
            for cond in c.allow.iter().chain(&c.deny).flatten() {
                match cond.op {
                    filter::Op::Eq(v) | filter::Op::Ne(v) => pool.push(v),
                    filter::Op::MaskedEq { mask, value } => {
                        pool.extend([mask, value]);
                        pool.extend((0..64).filter(|b| mask >> b & 1 == 1).map(|b| 1u64 << b));
                    }
                }
            }
        }
        let arg = |next: &mut dyn FnMut() -> u64| -> u64 {
            let pick = pool[(next() % pool.len() as u64) as usize];
            match next() % 6 {
                0 => next(),
                1 => next() & 0xffff_ffff,
                2 | 3 => pick,
                4 => pick | (next() << 32),
                _ => pick ^ (1 << (next() % 64)),
            }
        };
        let mut calls = Vec::new();
        let mut numbers: Vec<u32> = (0..1024).collect();
        numbers.push(0x3fff_ffff);
        if !cfg!(target_arch = "x86_64") {
            // x86_64 kills these (x32 guard): `x32_call_is_killed`.
            numbers.extend([0x4000_0000, 0x8000_0000, u32::MAX]);
        }
        for nr in numbers {
            if UNFILTERED.contains(&nr) {
                continue;
            }
            calls.push((nr, [0; 6]));
            calls.push((nr, [u64::MAX; 6]));
            for _ in 0..2 {
                calls.push((nr, std::array::from_fn(|_| arg(&mut next))));
            }
        }
        for c in filter::checked() {
            for _ in 0..2000 {
                calls.push((c.sys.nr as u32, std::array::from_fn(|_| arg(&mut next))));
            }
        }
        // The two calls the oracle lets run stay out.
        calls.retain(|(nr, a)| {
            let ends = *nr == libc::SYS_exit_group as u32 && a[0] & 0xffff_ffff == ORACLE_EXIT;
            let installs = *nr == libc::SYS_seccomp as u32
                && a[0] & 0xffff_ffff == libc::SECCOMP_SET_MODE_FILTER as u64;
            !ends && !installs
        });
        calls
    }

    /// On the real kernel, `programs()` answers exactly what seccompiler's
    /// allowlist + explicit-deny pair compiled from the same tables
    /// answered, and the deny-list pair exactly what seccompiler's did, for
    /// every number 0..1024 and thousands of arguments of the checked
    /// calls. Controls: with no filter under test every call is "allowed"
    /// (the oracle itself runs nothing), the verdicts include allowed,
    /// EPERM and ENOSYS, and the full and deny-list filters differ (the
    /// comparison can tell filters apart).
    fn kernel_verdicts_match_seccompilers() -> Result<(), Outcome> {
        let calls = verdict_calls();
        let run = |f: Filters| {
            kernel_verdicts(&compiled(f), &calls).or_else(|e| fail(format!("{f:?}: {e}")))
        };
        let none = run(Filters::None)?;
        let programs = run(Filters::Programs)?;
        let reference = run(Filters::Reference)?;
        let base = run(Filters::DenyList)?;
        let deny_list_reference = run(Filters::DenyListReference)?;
        let mut failures = Vec::new();
        if let Some(i) = none.iter().position(|r| *r != i64::from(ORACLE_ERRNO)) {
            failures.push(format!(
                "no filter: call {:?} got {}, not the oracle's errno",
                calls[i],
                verdict_name(none[i])
            ));
        }
        for (what, ours, theirs) in [
            ("programs() vs seccompiler's pair", &programs, &reference),
            (
                "deny-list vs seccompiler's deny-list",
                &base,
                &deny_list_reference,
            ),
        ] {
            let diffs: Vec<String> = (0..calls.len())
                .filter(|i| ours[*i] != theirs[*i])
                .map(|i| {
                    format!(
                        "nr {} {:x?}: {} vs {}",
                        calls[i].0,
                        calls[i].1,
                        verdict_name(ours[i]),
                        verdict_name(theirs[i])
                    )
                })
                .collect();
            if !diffs.is_empty() {
                failures.push(format!(
                    "{what}: {} differences: {:#?}",
                    diffs.len(),
                    &diffs[..diffs.len().min(20)]
                ));
            }
        }
        let count = |v: &[i64], r: i64| v.iter().filter(|x| **x == r).count();
        let (allowed, eperm, enosys) = (
            count(&programs, i64::from(ORACLE_ERRNO)),
            count(&programs, libc::EPERM as i64),
            count(&programs, libc::ENOSYS as i64),
        );
        println!(
            "{} calls: programs() allowed {allowed}, EPERM {eperm}, ENOSYS {enosys}; deny-list \
             allowed {}, EPERM {}, ENOSYS {}",
            calls.len(),
            count(&base, i64::from(ORACLE_ERRNO)),
            count(&base, libc::EPERM as i64),
            count(&base, libc::ENOSYS as i64)
        );
        if allowed + eperm + enosys != calls.len() || allowed < 500 || eperm < 500 || enosys < 500 {
            failures.push(format!(
                "programs(): allowed {allowed}, EPERM {eperm}, ENOSYS {enosys} of {}: other \
                 results, or a verdict barely reached",
                calls.len()
            ));
        }
        if programs == base {
            failures.push("the full and the deny-list filters got the same verdicts".into());
        }
        ensure(failures.is_empty(), || failures.join("\n"))
    }

    /// Through `LinuxBackend::wrap` (every layer of the child, Landlock
    /// included): `Layers::ALL` installs `programs()`, `Layers::BASE` the
    /// deny-list pair. Told apart by calls whose answer differs between them.
    fn backend_installs_filters_by_layer() -> Result<(), Outcome> {
        use cordon_backend_linux::{Layers, LinuxBackend};
        use cordon_core::{Limits, SandboxBackend, SandboxPolicy};
        let d = scratch();
        // A copy of this binary the sandbox uid can read and run.
        let bin_dir = scratch();
        std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = bin_dir.path().join("probe");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut failures = Vec::new();
        for (layers, label, want) in [
            (
                Layers::ALL,
                "ALL",
                ["mode=2", "ENOSYS", "EPERM", "ok", "EPERM"],
            ),
            (
                Layers::BASE,
                "BASE",
                ["mode=2", "ok", "ok", "EPERM", "EPERM"],
            ),
        ] {
            for (probe, want) in [
                "seccomp_mode",
                "kcmp",
                "pair_dgram",
                "setsid",
                "socket_unix",
            ]
            .into_iter()
            .zip(want)
            {
                let mut policy = SandboxPolicy::new(d.path(), Limits::probe());
                policy.scratch_is_fresh = true;
                policy.program_files = vec![exe.clone()];
                let mut cmd = cordon_core::ChildCommand::for_backend_tests(&exe, d.path());
                cmd.env(PROBE_ENV, probe);
                // What wrap holds for the child (its cgroups, the init's
                // memory) must outlive the spawn.
                let _resources = match LinuxBackend::with_layers(layers).wrap(&mut cmd, &policy) {
                    Ok(resources) => resources,
                    Err(e) => return fail(format!("wrap failed on a working host: {e}")),
                };
                let r = match cmd.run_for_backend_tests(Duration::from_secs(30)) {
                    Ok(out) => Ran {
                        status: Some(out.status),
                        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                    },
                    Err(e) => Ran {
                        status: None,
                        stdout: String::new(),
                        stderr: format!("spawn failed: {e}"),
                    },
                };
                let got = r.stdout.trim();
                println!("{label:6} {probe:12} {got}");
                if got != want {
                    failures.push(format!("{label} {probe}: want {want}, got {r}"));
                }
            }
        }
        ensure(failures.is_empty(), || failures.join("\n"))
    }

    // ------------------------------------------------------------ measure

    /// 1e6 calls each of `getppid` (allowed whatever its arguments, so
    /// the kernel's per-filter action cache can skip the BPF), of
    /// `ioctl(FIONREAD)` and `prctl(PR_GET_NO_NEW_PRIVS)` (argument-checked:
    /// the BPF runs every time; ioctl's number is low, prctl's higher) and
    /// of an unlisted number (a linear chain walks all of it; the search
    /// takes as long as for any other number). Nanoseconds per call, the
    /// best of 3 rounds.
    fn bench() -> String {
        const N: u32 = 1_000_000;
        fn best(mut f: impl FnMut()) -> f64 {
            (0..3)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..N {
                        f();
                    }
                    t.elapsed().as_nanos() as f64 / N as f64
                })
                .fold(f64::MAX, f64::min)
        }
        let mut p = [0; 2];
        // SAFETY: raw syscalls on the probe's own pipe and on integers.
        unsafe {
            libc::pipe(p.as_mut_ptr());
            let getppid = best(|| {
                libc::syscall(libc::SYS_getppid);
            });
            let mut n = 0i32;
            let ioctl = best(|| {
                libc::ioctl(p[0], libc::FIONREAD, &mut n);
            });
            let prctl = best(|| {
                libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
            });
            let unknown = best(|| {
                libc::syscall(4000);
            });
            format!(
                "getppid {getppid:6.1} ns  ioctl(FIONREAD) {ioctl:6.1} ns  prctl {prctl:6.1} ns  \
                 unlisted nr {unknown:6.1} ns"
            )
        }
    }

    /// The filters built with seccompiler as a reference compiler: the
    /// allowlist and the explicit-deny filter from the same tables (allow
    /// and deny lists), and the deny-list pair written out from its rules.
    /// Each gets the x32 guard after seccompiler's architecture check.
    mod reference {
        // `libc`'s syscall-number and ioctl types differ between targets
        // (as in filter.rs); the casts keep this portable.
        #![allow(clippy::unnecessary_cast)]

        use std::collections::BTreeMap;

        use seccompiler::{
            BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
            SeccompFilter, SeccompRule, TargetArch,
        };

        use crate::filter::{self, Cond, Op, Program, Width};

        fn condition(c: &Cond) -> SeccompCondition {
            let len = match c.width {
                Width::Low32 => SeccompCmpArgLen::Dword,
                Width::Full64 => SeccompCmpArgLen::Qword,
            };
            let (op, value) = match c.op {
                Op::Eq(v) => (SeccompCmpOp::Eq, v),
                Op::Ne(v) => (SeccompCmpOp::Ne, v),
                Op::MaskedEq { mask, value } => (SeccompCmpOp::MaskedEq(mask), value),
            };
            SeccompCondition::new(c.arg, len, op, value).expect("condition")
        }

        fn rules(rules: &[filter::Rule]) -> Vec<SeccompRule> {
            rules
                .iter()
                .map(|r| SeccompRule::new(r.iter().map(condition).collect()).expect("rule"))
                .collect()
        }

        fn dword(arg: u8, op: SeccompCmpOp, value: u64) -> SeccompRule {
            SeccompRule::new(vec![SeccompCondition::new(
                arg,
                SeccompCmpArgLen::Dword,
                op,
                value,
            )
            .expect("condition")])
            .expect("rule")
        }

        fn compile(
            rules: BTreeMap<i64, Vec<SeccompRule>>,
            mismatch: SeccompAction,
            matched: SeccompAction,
            guard: bool,
        ) -> Program {
            let arch = if cfg!(target_arch = "x86_64") {
                TargetArch::x86_64
            } else if cfg!(target_arch = "aarch64") {
                TargetArch::aarch64
            } else {
                TargetArch::riscv64
            };
            let f = SeccompFilter::new(rules, mismatch, matched, arch).expect("filter");
            let bpf = BpfProgram::try_from(f).expect("compile");
            let mut prog: Program = bpf
                .into_iter()
                .map(|i| libc::sock_filter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect();
            if guard && arch == TargetArch::x86_64 {
                // After `ld arch; jeq ARCH, +1; ret KILL`: `ld nr; jge
                // X32, +0, +1; ret KILL`. No jump crosses index 3.
                assert!(prog[0].code == 0x20 && prog[0].k == 4 && prog[2].code == 0x06);
                let st = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
                prog.splice(
                    3..3,
                    [
                        st(0x20, 0, 0, 0),
                        st(0x35, 0, 1, filter::X32_SYSCALL_BIT),
                        st(0x06, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
                    ],
                );
            }
            prog
        }

        /// The allowlist (default `ENOSYS`) and the explicit-deny filter
        /// (`EPERM`), in install order.
        pub(super) fn programs() -> Vec<Program> {
            let (mut allow, mut deny) = (BTreeMap::new(), BTreeMap::new());
            for s in filter::allowed() {
                allow.insert(s.nr, Vec::new());
            }
            for s in filter::denied() {
                deny.insert(s.nr, Vec::new());
            }
            for c in filter::checked() {
                allow.insert(c.sys.nr, rules(&c.allow));
                deny.insert(c.sys.nr, rules(&c.deny));
            }
            vec![
                compile(
                    allow,
                    SeccompAction::Errno(libc::ENOSYS as u32),
                    SeccompAction::Allow,
                    true,
                ),
                compile(
                    deny,
                    SeccompAction::Allow,
                    SeccompAction::Errno(libc::EPERM as u32),
                    true,
                ),
            ]
        }

        /// The deny-list and `clone3` → `ENOSYS`.
        pub(super) fn deny_list() -> Vec<Program> {
            let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
            for (nr, _) in filter::deny_listed_syscalls() {
                rules.insert(nr as i64, Vec::new());
            }
            rules.insert(
                libc::SYS_clone as i64,
                filter::CLONE_NS_FLAGS
                    .iter()
                    .map(|(f, _)| dword(0, SeccompCmpOp::MaskedEq(*f), *f))
                    .collect(),
            );
            rules.insert(
                libc::SYS_ioctl as i64,
                vec![
                    dword(1, SeccompCmpOp::Eq, libc::TIOCSTI as u64),
                    dword(1, SeccompCmpOp::Eq, libc::TIOCLINUX as u64),
                ],
            );
            // The deny-list's personality list, written out again so the
            // reference does not follow edits to the backend's tables.
            let personality = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff]
                .iter()
                .map(|v| {
                    SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *v)
                        .expect("condition")
                })
                .collect();
            rules.insert(
                libc::SYS_personality as i64,
                vec![SeccompRule::new(personality).expect("rule")],
            );
            let mut clone3 = BTreeMap::new();
            clone3.insert(libc::SYS_clone3 as i64, Vec::new());
            vec![
                compile(
                    rules,
                    SeccompAction::Allow,
                    SeccompAction::Errno(libc::EPERM as u32),
                    true,
                ),
                compile(
                    clone3,
                    SeccompAction::Allow,
                    SeccompAction::Errno(libc::ENOSYS as u32),
                    false,
                ),
            ]
        }
    }

    /// Microseconds `seccomp(SECCOMP_SET_MODE_FILTER)` takes to install
    /// `progs` (each, in order) in a freshly forked child, the best of
    /// `rounds` children. Since Linux 5.11 the kernel fills its action
    /// cache then, emulating the new filter for every syscall number.
    fn install_us(progs: &[filter::Program], rounds: usize) -> f64 {
        let mut best = u64::MAX;
        for _ in 0..rounds {
            let mut p = [0i32; 2];
            // SAFETY: a pipe and a fork; the child runs raw syscalls on
            // memory prepared before the fork, writes 8 bytes and exits.
            unsafe {
                assert_eq!(libc::pipe(p.as_mut_ptr()), 0, "pipe");
                let pid = libc::fork();
                assert!(pid >= 0, "fork");
                if pid == 0 {
                    let mut ns = u64::MAX;
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 {
                        let started = Instant::now();
                        let all = progs.iter().all(|prog| {
                            let fprog = libc::sock_fprog {
                                len: prog.len() as libc::c_ushort,
                                filter: prog.as_ptr() as *mut libc::sock_filter,
                            };
                            libc::syscall(
                                libc::SYS_seccomp,
                                libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                                0 as libc::c_ulong,
                                &fprog as *const libc::sock_fprog,
                            ) == 0
                        });
                        if all {
                            ns = started.elapsed().as_nanos() as u64;
                        }
                    }
                    libc::write(p[1], (&ns as *const u64).cast(), 8);
                    libc::_exit(0);
                }
                libc::close(p[1]);
                let mut ns = u64::MAX;
                let n = libc::read(p[0], (&mut ns as *mut u64).cast(), 8);
                libc::close(p[0]);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
                assert!(n == 8 && ns != u64::MAX, "installing the filters failed");
                best = best.min(ns);
            }
        }
        best as f64 / 1000.0
    }

    fn measure() {
        let lens = |f: Filters| {
            compiled(f)
                .iter()
                .map(|p| p.len().to_string())
                .collect::<Vec<_>>()
                .join(" + ")
        };
        println!(
            "BPF instructions: programs() {}, seccompiler's pair {}; deny-list {}, seccompiler's \
             deny-list {}",
            lens(Filters::Programs),
            lens(Filters::Reference),
            lens(Filters::DenyList),
            lens(Filters::DenyListReference)
        );
        println!(
            "syscalls listed: allowed {}, checked {}, denied {}",
            filter::allowed().len(),
            filter::checked().len(),
            filter::denied().len()
        );
        // The floor: one `ret ALLOW` instruction.
        let trivial = vec![libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        }];
        println!("install, best of 50 forked children:");
        println!("  {:16} {:7.1} µs", "ret ALLOW", install_us(&[trivial], 50));
        for f in [
            Filters::Reference,
            Filters::Programs,
            Filters::DenyListReference,
            Filters::DenyList,
        ] {
            println!(
                "  {:16} {:7.1} µs",
                format!("{f:?}"),
                install_us(&compiled(f), 50)
            );
        }
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        for f in [
            Filters::None,
            Filters::DenyList,
            Filters::Reference,
            Filters::Programs,
        ] {
            println!("{f:9?} {}", probe(f, d.path(), &exe, "bench", ""));
        }
    }
}
