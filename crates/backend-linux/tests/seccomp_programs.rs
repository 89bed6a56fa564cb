//! The seccomp filters alone, on the real kernel: real programs work under
//! them and the denials hold.
//!
//! The filters are compiled from the backend's own `src/linux/filter.rs`
//! (included below with `#[path]`, so this is the code `wrap` uses, not a
//! copy). A child installs them in a `pre_exec` hook (`no_new_privs`, then
//! `seccomp(SECCOMP_SET_MODE_FILTER)` per program, in order) and execs:
//! real tools (`sh`, `python3`, `gcc`, `git`, `make`, `tar`, `cp -p`,
//! `perl`, and `sqlite3`, `node`, `java` when installed), or this binary
//! in *probe* mode, which issues one raw syscall and prints the result.
//! Every denial is also probed with no filter and with the legacy pair, so
//! each check shows what it catches when the protection is missing.
//!
//! `harness = false`: every scenario runs in its own process; as root each
//! runs twice, as root and as uid 65534. Prints `N passed, M failed, K
//! skipped` (skipped: an optional tool that is not installed, named).
//! `-- --measure` prints instruction counts and syscall costs instead (a
//! one-shot figure, not a test). A bare word filters scenarios.

#[cfg(target_os = "linux")]
#[allow(dead_code, unused_imports)]
#[path = "../src/linux/filter.rs"]
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

    enum Outcome {
        Fail(String),
        /// An optional tool is not installed: neither a pass nor a failure.
        Missing(String),
    }

    const EXIT_MISSING: i32 = 3;

    fn fail<T>(msg: impl Into<String>) -> Result<T, Outcome> {
        Err(Outcome::Fail(msg.into()))
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
                Err(Outcome::Fail(e)) => {
                    eprintln!("{e}");
                    std::process::exit(1);
                }
                Err(Outcome::Missing(e)) => {
                    eprintln!("{e}");
                    std::process::exit(EXIT_MISSING);
                }
            }
        }
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--measure") {
            measure();
            return;
        }
        drive(args.iter().find(|a| !a.starts_with('-')).cloned());
    }

    fn drive(filter: Option<String>) {
        let exe = std::env::current_exe().expect("current_exe");
        // SAFETY: geteuid cannot fail.
        let is_root = unsafe { libc::geteuid() } == 0;
        let nobody = is_root.then(|| copy_for_nobody(&exe));
        let (mut passed, mut failed, mut skipped) = (0, Vec::new(), Vec::new());
        for (name, _) in scenarios() {
            if filter.as_deref().is_some_and(|f| !name.contains(f)) {
                continue;
            }
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
                    Some(EXIT_MISSING) => {
                        println!("test {name} [{label}] ... skipped: {}", r.stderr.trim());
                        skipped.push(format!("{name} [{label}]: {}", r.stderr.trim()));
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
        println!(
            "\n{passed} passed, {} failed, {} skipped",
            failed.len(),
            skipped.len()
        );
        for f in &failed {
            println!("  failed: {f}");
        }
        for s in &skipped {
            println!("  skipped (not installed, so not tested): {s}");
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
        /// `filter::legacy_programs()` (the first version's pair).
        Legacy,
        /// `filter::programs()` (one filter).
        Programs,
    }

    fn compiled(f: Filters) -> Vec<filter::Program> {
        match f {
            Filters::None => Vec::new(),
            Filters::Legacy => filter::legacy_programs().expect("legacy_programs"),
            Filters::Programs => filter::programs().expect("programs"),
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
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
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

    /// Runs a tool under `programs()`; a missing required tool fails the
    /// scenario, a missing optional one reports it as missing.
    fn tool(name: &str, args: &[&str], required: bool, dir: &Path) -> Result<Ran, Outcome> {
        let Some(path) = which(name) else {
            let msg = format!("{name} is not installed (looked in {PATH})");
            return Err(if required {
                Outcome::Fail(msg)
            } else {
                Outcome::Missing(msg)
            });
        };
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
        tool("sh", &["-c", script], true, dir)
    }

    // ------------------------------------------------------- works cases

    fn filters_in_force() -> Result<(), Outcome> {
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        for (f, want) in [
            (Filters::Programs, "Seccomp=2 filters=1 nnp=1"),
            (Filters::Legacy, "Seccomp=2 filters=2 nnp=1"),
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
        let r = tool("python3", &["-c", code], true, d.path())?;
        ensure(r.stdout == "1 1 sub x 6 8 e3b0c442\n", || format!("{r}"))
    }

    fn works_gcc() -> Result<(), Outcome> {
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
            true,
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
            false,
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
            false,
            d.path(),
        )?;
        ensure(r.stdout == "1\n", || format!("{r}"))
    }

    fn works_java() -> Result<(), Outcome> {
        let d = scratch();
        let r = tool("java", &["-version"], false, d.path())?;
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
        // SAFETY (for the whole match): raw syscalls with arguments that
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
        /// It differs under the legacy pair (the deny-list): what the
        /// allowlist or the argument checks add.
        DiffersFromLegacy,
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
            ("pair_dgram_hi", "EPERM", DiffersFromLegacy),
            ("pair_inet", "EPERM", DiffersFromLegacy),
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
            ("lookup_dcookie", "EPERM", DiffersFromLegacy),
            ("kexec_file_load", "EPERM", DiffersAsRoot),
            ("open_tree_attr", "EPERM", Differs),
            ("chroot", "EPERM", DiffersAsRoot),
            ("syslog", "EPERM", DiffersAsRoot),
            ("clock_settime", "EPERM", Differs),
            ("fanotify_init", "EPERM", DiffersFromLegacy),
            ("userfaultfd", "EPERM", DiffersAsRoot),
            ("keyctl", "EPERM", Differs),
            ("pidfd_getfd", "EPERM", Differs),
            ("name_to_handle_at", "EPERM", Differs),
            ("setsid", "ok", DiffersFromLegacy),
            ("setpgid", "ok", DiffersFromLegacy),
            ("ioctl_tiocsti", "EPERM", Differs),
            ("ioctl_tioclinux", "EPERM", Differs),
            ("ioctl_tiocsetd", "EPERM", Differs),
            ("ioctl_tioccons", "EPERM", Differs),
            ("ioctl_fionread", "ok n=3", Design),
            ("personality_rie", "EPERM", Differs),
            ("personality_query", "ok", Design),
            ("prctl_set_mm", "EPERM", Differs),
            ("prctl_sched_core", "EPERM", DiffersFromLegacy),
            ("prctl_ok", "ok ok 1", Design),
            ("affinity_self", "ok", Design),
            ("affinity_parent", "EPERM", Differs),
            ("setpriority_self", "ok", Design),
            ("setpriority_parent", "EPERM", Differs),
            ("prlimit_self", "read=ok set=ok", Design),
            ("prlimit_parent", "read=ok set=EPERM", Differs),
            ("ioprio_parent", "EPERM", Differs),
        ];
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let mut failures = Vec::new();
        for (name, want, control) in cases {
            let got = probe(Filters::Programs, d.path(), &exe, name, "");
            let none = probe(Filters::None, d.path(), &exe, name, "");
            let legacy = probe(Filters::Legacy, d.path(), &exe, name, "");
            println!("{name:20} programs: {got:24} none: {none:24} legacy: {legacy}");
            if got != *want {
                failures.push(format!("{name}: want {want}, got {got}"));
            }
            let control_ok = match control {
                Differs => none != *want,
                DiffersAsRoot => !root || none != *want,
                DiffersFromLegacy => legacy != *want,
                Design => true,
            };
            if !control_ok {
                failures.push(format!(
                    "{name}: the control does not show the difference (none: {none}, legacy: \
                     {legacy}): the probe cannot tell the filter's work apart"
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
        // The control: without the filter (and with the legacy pair) the
        // datagram arrives, so the check above can see a breach.
        for f in [Filters::None, Filters::Legacy] {
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

    /// Through `LinuxBackend::wrap` (every layer of the child, Landlock
    /// included): `Layers::ALL` installs `programs()`, `Layers::LEGACY` the
    /// legacy pair. Told apart by calls whose answer differs between them.
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
                Layers::LEGACY,
                "LEGACY",
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
                let mut cmd = Command::new(&exe);
                cmd.current_dir(d.path())
                    .env_clear()
                    .env(PROBE_ENV, probe)
                    .stdin(Stdio::null());
                if let Err(e) = LinuxBackend::with_layers(layers).wrap(&mut cmd, &policy) {
                    return fail(format!("wrap failed on a working host: {e}"));
                }
                let r = run_child(cmd, Duration::from_secs(30));
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
    /// of an unlisted number (the whole allowlist is walked). Nanoseconds
    /// per call, the best of 3 rounds.
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

    fn measure() {
        let progs = filter::programs().expect("programs");
        let legacy = filter::legacy_programs().expect("legacy_programs");
        println!(
            "BPF instructions: programs() {}; legacy deny-list {}, legacy clone3 {}",
            progs[0].len(),
            legacy[0].len(),
            legacy[1].len()
        );
        println!(
            "syscalls listed: allowed {}, checked {}, denied {}",
            filter::allowed().len(),
            filter::checked().len(),
            filter::denied().len()
        );
        let d = scratch();
        let exe = std::env::current_exe().unwrap();
        for f in [Filters::None, Filters::Legacy, Filters::Programs] {
            println!("{f:8?} {}", probe(f, d.path(), &exe, "bench", ""));
        }
    }
}
