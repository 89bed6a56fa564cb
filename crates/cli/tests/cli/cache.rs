//! The conformance cache against another user: a forged noop report
//! swapped in with `RENAME_EXCHANGE`, and temp file names planted as
//! symlinks, played by a second uid; and the rules that stop them seen
//! from the command line.
//!
//! The two-user tests need root: the victim is uid 65534 (the `cordon`
//! binary copied where it can run it, started with `Command::uid`), the
//! attacker uid 65533 (a forked child of this test that drops to it with
//! `setresuid` and then makes raw syscalls only). Every file they touch is
//! under a temp dir this test created.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CORDON: &str = env!("CARGO_BIN_EXE_cordon");
const VICTIM: u32 = 65534;
const ATTACKER: u32 = 65533;
const SECRET: &str = "the victim's secret 7f3a";
/// The cache refusal's line on stderr.
const REFUSED: &str = "not using the conformance cache";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

fn cstring(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn need_root() {
    assert_eq!(
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() },
        0,
        "this test plays two users (victim uid {VICTIM}, attacker uid {ATTACKER}) and needs root"
    );
}

/// A test-owned tree both uids can traverse: `bin/cordon` (a copy of the
/// binary under test) and the victim's private home.
struct Stage {
    base: tempfile::TempDir,
    exe: PathBuf,
    home: PathBuf,
}

impl Stage {
    fn new() -> Stage {
        let base = tempfile::tempdir().unwrap();
        chmod(base.path(), 0o755);
        let bin = base.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        chmod(&bin, 0o755);
        let exe = bin.join("cordon");
        std::fs::copy(CORDON, &exe).unwrap();
        chmod(&exe, 0o755);
        let home = base.path().join("victim");
        std::fs::create_dir(&home).unwrap();
        chown(&home, VICTIM);
        chmod(&home, 0o700);
        Stage { base, exe, home }
    }

    /// A file of the victim's, 0600, in its home.
    fn victim_file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.home.join(name);
        std::fs::write(&p, content).unwrap();
        chown(&p, VICTIM);
        chmod(&p, 0o600);
        p
    }

    /// A world-writable dir like `/tmp`, used as a shared XDG_CACHE_HOME.
    fn shared_dir(&self) -> PathBuf {
        let p = self.base.path().join("shared");
        std::fs::create_dir(&p).unwrap();
        chmod(&p, 0o1777);
        p
    }

    /// `cordon` as the victim, with `cache_home` as its XDG_CACHE_HOME.
    fn victim(&self, cache_home: &Path) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("XDG_CACHE_HOME", cache_home)
            .current_dir(&self.home)
            .uid(VICTIM)
            .gid(VICTIM);
        cmd
    }
}

/// Forks a child that becomes the attacker and runs `act`; returns its
/// pid. `act` runs after fork in a multi-threaded process: raw syscalls on
/// data prepared before the fork only, no allocation.
fn fork_attacker(act: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only makes async-signal-safe calls (setgroups,
    // setresgid, setresuid, what `act` does, _exit).
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let (u, g) = (ATTACKER, ATTACKER);
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(g, g, g) != 0
                || libc::setresuid(u, u, u) != 0
            {
                libc::_exit(100);
            }
            libc::_exit(act());
        }
        pid
    }
}

/// Waits for a child this test forked; its exit status.
fn reap(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

/// A forked attacker that is killed (and reaped) when this goes out of
/// scope, also when the test panics.
struct KillOnDrop(libc::pid_t);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: our own child.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
        reap(self.0);
    }
}

/// Runs `act` as the attacker to completion; panics unless it returned 0.
fn as_attacker(act: impl FnOnce() -> i32) {
    assert_eq!(reap(fork_attacker(act)), 0, "an attacker step failed");
}

/// As the attacker: `mkdir -m 0777 dir`.
fn attacker_mkdir_world_writable(dir: &Path) {
    let c = cstring(dir);
    as_attacker(|| {
        // SAFETY: a NUL-terminated path.
        unsafe {
            if libc::mkdir(c.as_ptr(), 0o777) != 0 || libc::chmod(c.as_ptr(), 0o777) != 0 {
                return 1;
            }
        }
        0
    });
}

/// Sets every `status` in `v` to `pass`.
fn pass_everything(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                if k == "status" {
                    *x = "pass".into();
                } else {
                    pass_everything(x);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(pass_everything),
        _ => {}
    }
}

/// A cache file, keyed as cordon keys it for `exe` run by `uid`, whose
/// report says `backend` passed P1–P7: noop's real report (`cordon
/// conformance --backend noop --json`) with every status set to pass.
/// Only the control in each test shows whether cordon takes it.
fn forged_cache(exe: &Path, uid: u32, backend: &str) -> Vec<u8> {
    use sha2::Digest;
    let out = Command::new(exe)
        .args(["conformance", "--backend", "noop", "--json"])
        .output()
        .unwrap();
    let mut report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    pass_everything(&mut report["probes"]);
    report["conforms"] = true.into();
    report["backend"] = backend.into();
    report["host"]["uid"] = uid.into();
    let m = std::fs::metadata(exe).unwrap();
    let file = serde_json::json!({
        "key": {
            "backend": backend,
            "kernel_release": report["host"]["kernel_release"],
            "backend_facts": {},
            "uid": uid,
            "boot_id": std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim(),
            "exe_sha256": hex::encode(sha2::Sha256::digest(std::fs::read(exe).unwrap())),
            "host_confinement": victim_confinement(uid),
        },
        "exe": {
            "dev": m.dev(),
            "ino": m.ino(),
            "size": m.size(),
            "mtime_ns": i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        },
        "report": report,
    });
    serde_json::to_vec_pretty(&file).unwrap()
}

/// The confinement a cordon started by this test as `uid` runs under (the
/// cache key holds it): this process's, without its capabilities when
/// `uid` is another user's.
fn victim_confinement(uid: u32) -> serde_json::Value {
    let mut c = cordon_conformance::host_state::HostConfinement::current();
    if uid != euid() {
        c.cap_eff = "0000000000000000".into();
    }
    serde_json::to_value(c).unwrap()
}

/// Writes `bytes` to `path`, owned by `uid`, with `mode`.
fn plant(path: &Path, bytes: &[u8], uid: u32, mode: u32) {
    std::fs::write(path, bytes).unwrap();
    chown(path, uid);
    chmod(path, mode);
}

/// `cordon run --backend noop -- /bin/cat SECRET` as the victim: admitted
/// only if the gate accepted a report saying noop conforms.
fn victim_runs_noop(stage: &Stage, cache_home: &Path, secret: &Path) -> Output {
    stage
        .victim(cache_home)
        .args(["run", "--backend", "noop", "--", "/bin/cat"])
        .arg(secret)
        .output()
        .unwrap()
}

fn admitted(out: &Output) -> bool {
    out.status.success() && text(&out.stdout).contains(SECRET)
}

/// Attack (a): another user owns the shared cache dir and swaps a forged
/// noop report with the victim's own (owner-checked) file, in a loop,
/// between cordon's check and its read.
#[test]
fn a_forged_report_swapped_in_by_another_user_is_never_admitted() {
    need_root();
    let stage = Stage::new();
    let secret = stage.victim_file("secret", SECRET);
    let forged = forged_cache(&stage.exe, VICTIM, "noop");

    // Control: the forgery is good enough. Where only the victim can have
    // put it (its own private cache), it admits noop: so "never admitted"
    // below is the cache refusing it, not a broken forgery.
    let private = stage.home.join(".cache");
    std::fs::create_dir_all(private.join("cordon")).unwrap();
    for d in [&private, &private.join("cordon")] {
        chown(d, VICTIM);
        chmod(d, 0o700);
    }
    let private_noop = private.join("cordon").join("conformance-noop.json");
    plant(&private_noop, &forged, VICTIM, 0o600);
    let out = victim_runs_noop(&stage, &private, &secret);
    assert!(
        admitted(&out),
        "control: the forged report was not admitted: {}",
        text(&out.stderr)
    );
    std::fs::remove_file(&private_noop).unwrap();

    // The shared cache root, and the attacker's world-writable `cordon` in it.
    let shared = stage.shared_dir();
    let dir = shared.join("cordon");
    attacker_mkdir_world_writable(&dir);
    // The victim's own report for another backend, left there by an
    // earlier cordon, which the attacker (owner of the dir) renamed to the
    // noop name: it passes an ownership check on the path, and is no noop
    // report (a miss on its own).
    let bait = dir.join("conformance-noop.json");
    plant(
        &bait,
        &forged_cache(&stage.exe, VICTIM, "linux"),
        VICTIM,
        0o600,
    );
    // The attacker's forged file, swapped with it in a loop.
    let fake = dir.join("forged.json");
    let (c_bait, c_fake) = (cstring(&bait), cstring(&fake));
    as_attacker(|| {
        // SAFETY: NUL-terminated path; a buffer prepared before the fork.
        unsafe {
            let fd = libc::open(
                c_fake.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                0o644,
            );
            if fd < 0
                || libc::write(fd, forged.as_ptr().cast(), forged.len()) != forged.len() as isize
            {
                return 1;
            }
            libc::close(fd);
        }
        0
    });
    let swapper = KillOnDrop(fork_attacker(|| loop {
        // SAFETY: NUL-terminated paths; the call only renames.
        unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                c_bait.as_ptr(),
                libc::AT_FDCWD,
                c_fake.as_ptr(),
                libc::RENAME_EXCHANGE,
            );
        }
    }));

    let mut runs = Vec::new();
    for _ in 0..TRIES {
        let out = victim_runs_noop(&stage, &shared, &secret);
        let got_in = admitted(&out);
        runs.push(out);
        if got_in {
            break;
        }
    }
    drop(swapper);
    if let Some(i) = runs.iter().position(admitted) {
        panic!(
            "noop was admitted on attempt {} with a report forged by uid {ATTACKER}: {}",
            i + 1,
            text(&runs[i].stdout)
        );
    }
    for out in &runs {
        assert_gate_refused(out, Some(&format!("owned by uid {ATTACKER}")));
    }
}

/// How many times the victim runs into the swapping attacker. Against the
/// cordon before the fix the forgery got in within a few attempts (see the
/// commit that added this test).
const TRIES: usize = 40;

/// Attack (b): another user plants the temp file name cordon is about to
/// use as a symlink to a file of the victim's.
#[test]
fn planted_temp_file_symlinks_never_overwrite_a_victim_file() {
    need_root();
    let stage = Stage::new();
    const PRECIOUS: &str = "the victim's precious file";
    let precious = stage.victim_file("precious", PRECIOUS);
    let shared = stage.shared_dir();
    let dir = shared.join("cordon");
    attacker_mkdir_world_writable(&dir);

    // The victim writes its report after the probes ran (a second or so),
    // so the attacker, knowing its pid, has time to plant the name.
    let victim = stage
        .victim(&shared)
        .args(["run", "--", "/bin/true"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let planted = cstring(&dir.join(format!(".tmp-{}", victim.id())));
    let target = cstring(&precious);
    as_attacker(|| {
        // SAFETY: NUL-terminated paths.
        unsafe { libc::symlink(target.as_ptr(), planted.as_ptr()) }
    });
    let out = victim.wait_with_output().unwrap();
    let now = std::fs::read_to_string(&precious).unwrap();
    assert!(
        now == PRECIOUS,
        "the victim's file was overwritten: now {} bytes, starting {:?}",
        now.len(),
        now.chars().take(60).collect::<String>()
    );
    let m = std::fs::metadata(&precious).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (VICTIM, 0o600));
    // The program ran (the gate itself conformed), with the one warning.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(REFUSED), "{}", text(&out.stderr));
    // Nothing of the victim's was written into the attacker's dir either.
    let written: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.metadata().unwrap().uid() == VICTIM)
        .map(|e| e.file_name())
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

// ------------------------------------------------ one user, any uid

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// `cordon run --backend noop -- /bin/echo admitted`, with `cache_home`.
fn noop_echo(cache_home: &Path) -> Output {
    Command::new(CORDON)
        .env("XDG_CACHE_HOME", cache_home)
        .env_remove("RUST_LOG")
        .args(["run", "--backend", "noop", "--", "/bin/echo", "admitted"])
        .output()
        .unwrap()
}

#[track_caller]
fn assert_admitted(out: &Output, what: &str) {
    assert!(
        out.status.success() && text(&out.stdout) == "admitted\n",
        "{what}: not admitted: {}",
        text(&out.stderr)
    );
}

/// Refused by the gate (noop fails its probes), with `warning` lines that
/// name the cache refusal (0 when the cache dir itself was fine).
#[track_caller]
fn assert_gate_refused(out: &Output, warning: Option<&str>) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(text(&out.stdout), "", "{err}");
    let refusals: Vec<_> = err.lines().filter(|l| l.contains(REFUSED)).collect();
    match warning {
        Some(why) => {
            assert_eq!(refusals.len(), 1, "one warning line: {err}");
            assert!(refusals[0].contains(why), "{err}");
        }
        None => assert!(refusals.is_empty(), "{err}"),
    }
}

/// Every rule, each against a report forged to admit noop: trusted in a
/// private dir (the control), ignored wherever another user could have
/// written it or when it is not a private regular file.
#[test]
fn a_forged_report_counts_only_where_no_other_user_could_write_it() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("cache");
    let dir = root.join("cordon");
    std::fs::create_dir_all(&dir).unwrap();
    chmod(&root, 0o700);
    chmod(&dir, 0o700);
    let file = dir.join("conformance-noop.json");
    let forged = forged_cache(Path::new(CORDON), euid(), "noop");
    plant(&file, &forged, euid(), 0o600);
    assert_admitted(&noop_echo(&root), "control: a private dir");

    // The cache dir writable by others, sticky or not, or by the group.
    for mode in [0o777, 0o1777, 0o770] {
        chmod(&dir, mode);
        assert_gate_refused(&noop_echo(&root), Some("writable by other users"));
    }
    chmod(&dir, 0o700);
    // An ancestor writable by others: refused unless sticky, like /tmp.
    chmod(&root, 0o777);
    assert_gate_refused(&noop_echo(&root), Some("no sticky bit"));
    chmod(&root, 0o775);
    assert_gate_refused(&noop_echo(&root), Some("no sticky bit"));
    chmod(&root, 0o1777);
    assert_admitted(&noop_echo(&root), "a sticky ancestor");
    chmod(&root, 0o700);
    // The file readable by others: not trusted (the dir is fine).
    chmod(&file, 0o644);
    assert_gate_refused(&noop_echo(&root), None);
    chmod(&file, 0o600);
    // A symlink to a private file: not followed.
    let elsewhere = t.path().join("elsewhere.json");
    std::fs::rename(&file, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    assert_gate_refused(&noop_echo(&root), None);
    std::fs::remove_file(&file).unwrap();
    std::fs::rename(&elsewhere, &file).unwrap();
    assert_admitted(&noop_echo(&root), "control: the same file again");
    assert_eq!(std::fs::read(&file).unwrap(), forged, "never rewritten");
}
