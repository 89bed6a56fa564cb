//! The breaches of the isolation issue, each tried as a hostile program
//! would, first under the base layers (`Layers::BASE`: the
//! attack must succeed there, which shows the detector works) and then
//! under every layer (it must not). The host checks every effect itself;
//! every victim is created by the test and cleaned up by it.

use super::*;
use cordon_backend_linux::Layers;

/// What an attack achieved, seen from the host: `Some(what)` is a breach.
type Breach = Result<Option<String>, String>;

fn base_spawner() -> Spawner {
    Spawner::confined(Arc::new(LinuxBackend::with_layers(Layers::BASE)), config())
}

/// Runs `attack` under the base layers, where it must breach, and under
/// every layer, where it must not.
fn base_breaches_full_holds(attack: impl Fn(&Spawner, bool) -> Breach) -> Outcome {
    match attack(&base_spawner(), true)? {
        Some(_) => {}
        None => {
            return Err(
                "the attack did nothing even under the base layers: the test cannot \
                 detect the breach it is about"
                    .into(),
            )
        }
    }
    match attack(&spawner(), false)? {
        None => Ok(()),
        Some(what) => Err(format!("breach under every layer: {what}")),
    }
}

/// The uid the sandbox runs as on the host.
fn sandbox_uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    match unsafe { libc::geteuid() } {
        0 => 65534,
        uid => uid,
    }
}

/// A test-created scratch dir the sandbox uid can write, for attacks whose
/// traces must survive the run (the caller's `--scratch DIR`).
fn writable_scratch() -> tempfile::TempDir {
    let dir = existing_scratch();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

// ------------------------------------------------------------ 1. setuid

/// Setuid/setgid planting: the program copies a shell into a scratch dir
/// that outlives it and sets the setuid and setgid bits (by `chmod` and by
/// a creation mode). On a host mount such a file runs as the sandbox's uid
/// for any local user.
pub(super) fn breach_setuid_planting() -> Outcome {
    // A copy's own chmod (shutil.copy keeps the mode) is refused in tier
    // landlock as another user: each step is tried on its own.
    const PLANT: &str = "import os, shutil\n\
        for name, mode in [('sid', 0o4755), ('sgid', 0o2755)]:\n\
        \x20   try:\n\
        \x20       shutil.copyfile('/bin/sh', name); os.chmod(name, mode)\n\
        \x20   except OSError as e: print(name, e.errno)\n\
        try:\n\
        \x20   os.close(os.open('created', os.O_CREAT | os.O_WRONLY, 0o6755))\n\
        except OSError as e: print('created', e.errno)\n\
        print('done')\n";
    if host_dirs_refused() {
        let scratch = writable_scratch();
        expect_host_dir_refused(
            &spawner(),
            py(PLANT).scratch(Scratch::Existing(scratch.path().to_path_buf())),
            scratch.path(),
        )?;
        // Tier landlock's fresh scratch is a host dir on a mount without
        // nosuid: what the sandbox plants there is seen by the host while
        // the sandbox runs. Unconfined (the control) the plant works.
        let held = format!("{PLANT}print('done', flush=True)\nimport sys; sys.stdin.read()\n");
        let (_, planted) = inspect_fresh_scratch(&spawner(), py(&held), setuid_files)?;
        let planted = planted?;
        ensure(planted.is_empty(), || {
            format!("setuid/setgid files in a fresh scratch: {planted:?}")
        })?;
        let (_, control) =
            inspect_fresh_scratch(&Spawner::hygiene_only(config()), py(&held), setuid_files)?;
        return ensure(!control?.is_empty(), || {
            "control: nothing was planted even unconfined".into()
        });
    }
    base_breaches_full_holds(|sp, base| {
        let scratch = writable_scratch();
        let r = run_with(
            sp,
            py(PLANT).scratch(Scratch::Existing(scratch.path().to_path_buf())),
        )?;
        ensure(r.stdout.contains("done"), || {
            format!("the attack did not run: {r}")
        })?;
        let planted = setuid_files(scratch.path())?;
        // As root, a caller's scratch dir is mounted idmapped: what the
        // sandbox creates is stored as root's, so a planted setuid file
        // would be a root one. Make sure that case is the one tested.
        // SAFETY: geteuid cannot fail.
        if !base && unsafe { libc::geteuid() } == 0 {
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::metadata(scratch.path().join("sid"))
                .map_err(|e| format!("the program's copy is missing: {e}"))?
                .uid();
            ensure(owner == 0, || {
                format!("the scratch dir was not idmapped (the copy is owned by {owner})")
            })?;
        }
        Ok((!planted.is_empty()).then(|| format!("setuid/setgid files left: {planted:?}")))
    })
}

// -------------------------------------------- 2. host process control

/// What the host sees of a process: rlimits, nice, scheduler policy, CPU
/// affinity and I/O priority.
fn process_attributes(pid: u32) -> Result<String, String> {
    let limits =
        std::fs::read_to_string(format!("/proc/{pid}/limits")).map_err(|e| e.to_string())?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the comm: state is field 3, nice 19, policy 41 (1-based).
    let nice = fields.get(16).copied().unwrap_or("?");
    let policy = fields.get(38).copied().unwrap_or("?");
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    let affinity = status
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list"))
        .unwrap_or("?")
        .to_string();
    // SAFETY: ioprio_get(IOPRIO_WHO_PROCESS, pid) reads nothing of ours.
    let ioprio = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, pid as libc::c_int) };
    Ok(format!(
        "limits:\n{limits}nice {nice} policy {policy} {affinity} ioprio {ioprio}"
    ))
}

/// Controlling a host process of the sandbox's own uid: prlimit (CPU 1 s,
/// NOFILE 4), setpriority, SCHED_IDLE, affinity, I/O class, and naming it
/// with getpgid. The victim is a `sleep` the test starts as that uid.
pub(super) fn breach_host_process_control() -> Outcome {
    base_breaches_full_holds(|sp, _base| {
        let mut victim = Command::new("/bin/sleep");
        victim.arg("60");
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            victim.uid(65534).gid(65534);
        }
        let mut victim = victim.spawn().map_err(|e| format!("victim: {e}"))?;
        let pid = victim.id();
        let before = process_attributes(pid)?;
        let code = format!(
            "import ctypes\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             pid = {pid}\n\
             res = []\n\
             lim = (ctypes.c_uint64 * 2)(4, 4)\n\
             res.append(libc.prlimit64(pid, 7, lim, None))\n\
             cpu = (ctypes.c_uint64 * 2)(3600, 3600)\n\
             res.append(libc.prlimit64(pid, 0, cpu, None))\n\
             res.append(libc.setpriority(0, pid, 19))\n\
             param = ctypes.c_int(0)\n\
             res.append(libc.sched_setscheduler(pid, 5, ctypes.byref(param)))\n\
             mask = ctypes.c_uint64(1)\n\
             res.append(libc.sched_setaffinity(pid, 8, ctypes.byref(mask)))\n\
             res.append(libc.syscall(251, 1, pid, (3 << 13)))\n\
             res.append(libc.getpgid(pid))\n\
             print('results', res)\n"
        );
        let r = run_with(sp, py(&code));
        let after = process_attributes(pid);
        let alive = victim.try_wait().ok().flatten().is_none();
        let _ = victim.kill();
        let _ = victim.wait();
        let r = r?;
        let after = after?;
        ensure(r.stdout.starts_with("results"), || {
            format!("the attack did not run: {r}")
        })?;
        if !alive {
            return Ok(Some("the host process died".into()));
        }
        Ok((before != after).then(|| {
            format!("host process changed:\nbefore {before}\nafter {after}\n(program: {r})")
        }))
    })
}

// ------------------------------------------------------- 3. SysV IPC

/// SysV IPC objects: `(id, key, owner uid)` from `/proc/sysvipc/{shm,msg}`.
fn sysv_objects(kind: &str) -> Vec<(i32, i64, u32)> {
    let text = std::fs::read_to_string(format!("/proc/sysvipc/{kind}")).unwrap_or_default();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(key), Some(id), Some(uid)) = (
        col("key"),
        col(if kind == "shm" { "shmid" } else { "msqid" }),
        col("uid"),
    ) else {
        return Vec::new();
    };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.get(id)?.parse().ok()?,
                f.get(key)?.parse().ok()?,
                f.get(uid)?.parse().ok()?,
            ))
        })
        .collect()
}

/// Removes test-made SysV objects with `key`, and the ones with `ids`.
fn remove_sysv(key: i64, ids: &[(&str, i32)]) {
    for (kind, id) in ids {
        // SAFETY: IPC_RMID on an object this test created.
        unsafe {
            if *kind == "shm" {
                libc::shmctl(*id, libc::IPC_RMID, std::ptr::null_mut());
            } else {
                libc::msgctl(*id, libc::IPC_RMID, std::ptr::null_mut());
            }
        }
    }
    for kind in ["shm", "msg"] {
        for (id, k, _) in sysv_objects(kind) {
            if k == key {
                remove_sysv(-1, &[(kind, id)]);
            }
        }
    }
}

/// SysV IPC of the host: a message queue and a 0600 shm segment of the
/// sandbox's uid must be unreachable, and the sandbox's own objects must
/// not outlive it.
pub(super) fn breach_sysv_ipc() -> Outcome {
    base_breaches_full_holds(|sp, _base| {
        let uid = sandbox_uid();
        // SAFETY: SysV calls on objects this test creates; the segment is
        // mapped, written and unmapped here.
        let (qid, shmid) = unsafe {
            let qid = libc::msgget(libc::IPC_PRIVATE, libc::IPC_CREAT | 0o600);
            let shmid = libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600);
            if qid < 0 || shmid < 0 {
                return Err(format!(
                    "host IPC objects: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let mut q: libc::msqid_ds = std::mem::zeroed();
            libc::msgctl(qid, libc::IPC_STAT, &mut q);
            q.msg_perm.uid = uid;
            libc::msgctl(qid, libc::IPC_SET, &mut q);
            let mut s: libc::shmid_ds = std::mem::zeroed();
            libc::shmctl(shmid, libc::IPC_STAT, &mut s);
            s.shm_perm.uid = uid;
            libc::shmctl(shmid, libc::IPC_SET, &mut s);
            let p = libc::shmat(shmid, std::ptr::null(), 0);
            std::ptr::copy_nonoverlapping(b"HOST-SHM".as_ptr(), p.cast::<u8>(), 8);
            libc::shmdt(p);
            (qid, shmid)
        };
        // The sandbox's own objects carry this key, so only they are
        // cleaned up by key.
        let key = 0x0c0d_0000 + i64::from(std::process::id() % 0xffff);
        let code = format!(
            "import ctypes\n\
             libc = ctypes.CDLL(None, use_errno=True)\n\
             libc.shmat.restype = ctypes.c_void_p\n\
             msg = ctypes.create_string_buffer(b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00PWNED', 13)\n\
             print('msgsnd', libc.msgsnd({qid}, msg, 5, 0o4000), ctypes.get_errno())\n\
             p = libc.shmat({shmid}, None, 0)\n\
             if p not in (None, ctypes.c_void_p(-1).value):\n\
             \x20   ctypes.memmove(p, b'PWNED!!!', 8); print('shm written')\n\
             print('own shm', libc.shmget({key}, 1 << 20, 0o1600), ctypes.get_errno())\n\
             print('own msg', libc.msgget({key}, 0o1600), ctypes.get_errno())\n"
        );
        let r = run_with(sp, py(&code));
        // SAFETY: reading our own objects back.
        let (qnum, shm) = unsafe {
            let mut q: libc::msqid_ds = std::mem::zeroed();
            libc::msgctl(qid, libc::IPC_STAT, &mut q);
            let p = libc::shmat(shmid, std::ptr::null(), 0);
            let mut b = [0u8; 8];
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), b.as_mut_ptr(), 8);
            libc::shmdt(p);
            (q.msg_qnum, b)
        };
        let leftovers: Vec<String> = ["shm", "msg"]
            .iter()
            .flat_map(|kind| {
                sysv_objects(kind)
                    .into_iter()
                    .filter(|(_, k, _)| *k == key)
                    .map(move |(id, _, u)| format!("{kind} {id} of uid {u}"))
            })
            .collect();
        remove_sysv(key, &[("msg", qid), ("shm", shmid)]);
        let r = r?;
        ensure(r.stdout.contains("own msg"), || {
            format!("the attack did not run: {r}")
        })?;
        let mut breaches = Vec::new();
        if qnum != 0 {
            breaches.push(format!("{qnum} message(s) arrived in the host queue"));
        }
        if &shm != b"HOST-SHM" {
            breaches.push(format!(
                "host shm now holds {:?}",
                String::from_utf8_lossy(&shm)
            ));
        }
        if !leftovers.is_empty() {
            breaches.push(format!("sandbox objects outlived it: {leftovers:?}"));
        }
        Ok((!breaches.is_empty()).then(|| breaches.join("; ")))
    })
}

// ------------------------------------------ 4. pathname datagram socket

/// A pathname UNIX datagram socket of the host reached without `socket()`:
/// `socketpair(AF_UNIX, SOCK_DGRAM)` then `sendto(path)`.
pub(super) fn breach_unix_dgram_sendto() -> Outcome {
    base_breaches_full_holds(|sp, _base| {
        let dir = canary("x");
        let path = dir.path().join("host.sock");
        let listener =
            std::os::unix::net::UnixDatagram::bind(&path).map_err(|e| format!("bind: {e}"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let code = format!(
            "import socket\n\
             for t in (socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_STREAM):\n\
             \x20   try:\n\
             \x20       a, b = socket.socketpair(socket.AF_UNIX, t)\n\
             \x20       a.sendto(b'from-sandbox', {path:?}); print(t, 'sent')\n\
             \x20   except OSError as e: print(t, e.errno)\n\
             print('done')\n",
            path = path.display().to_string()
        );
        let r = run_with(sp, py(&code))?;
        ensure(r.stdout.contains("done"), || {
            format!("the attack did not run: {r}")
        })?;
        let mut buf = [0u8; 64];
        Ok(match listener.recv(&mut buf) {
            Ok(n) => Some(format!(
                "the host socket received {:?}",
                String::from_utf8_lossy(&buf[..n])
            )),
            Err(_) => None,
        })
    })
}

// ------------------------------------------------- 5. metadata writes

/// What the host sees of a file's metadata: mode, owner, mtime, xattrs.
fn metadata_of(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).expect("metadata");
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut names = [0u8; 256];
    // SAFETY: listxattr writes at most 256 bytes into `names`.
    let n = unsafe { libc::listxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    format!(
        "mode {:o} uid {} mtime {} xattrs {:?}",
        m.mode(),
        m.uid(),
        m.mtime(),
        String::from_utf8_lossy(&names[..n.max(0) as usize])
    )
}

/// chmod (incl. 06777), utimensat, setxattr and chown on a file of the
/// sandbox's uid outside every grant: Landlock does not govern them.
pub(super) fn breach_metadata_outside_grants() -> Outcome {
    base_breaches_full_holds(|sp, _base| {
        let dir = canary("x");
        let target = dir.path().join("secret");
        chown_to_sandbox(&target);
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let before = metadata_of(&target);
        let code = format!(
            "import os\n\
             f = {f:?}\n\
             for name, op in [('chmod', lambda: os.chmod(f, 0o6777)),\n\
             \x20                ('utime', lambda: os.utime(f, (1, 1))),\n\
             \x20                ('setxattr', lambda: os.setxattr(f, 'user.pwned', b'1')),\n\
             \x20                ('chown', lambda: os.chown(f, os.getuid(), os.getgid()))]:\n\
             \x20   try:\n\
             \x20       op(); print(name, 'ok')\n\
             \x20   except OSError as e: print(name, e.errno)\n\
             print('done')\n",
            f = target.display().to_string()
        );
        let r = run_with(sp, py(&code))?;
        ensure(r.stdout.contains("done"), || {
            format!("the attack did not run: {r}")
        })?;
        let after = metadata_of(&target);
        Ok((before != after).then(|| format!("{before} -> {after} ({r})")))
    })
}

// --------------------------------------------- 6. outliving the host

const ORPHAN_BASE_ENV: &str = "CORDON_ORPHAN_BASE";

/// Helper process for [`breach_outliving_the_host`]: spawns a sandboxed
/// program that leaves a background child and a file in its fresh scratch
/// dir, prints the child's pid and the scratch path, then waits to be
/// SIGKILLed.
pub(super) fn killed_host_helper() -> ! {
    let rt = rt();
    let sp = if std::env::var_os(ORPHAN_BASE_ENV).is_some() {
        base_spawner()
    } else {
        spawner()
    };
    let token = std::env::var("CORDON_ORPHAN_TOKEN").expect("token");
    let child = rt
        .block_on(async {
            sp.spawn(&sh(&format!(
                "echo data > left-behind; sleep {token} & echo ready; exec sleep 600"
            )))
        })
        .expect("spawn");
    let mut child = child;
    let mut stdout = child.stdout.take().expect("stdout");
    let mut line = [0u8; 6];
    rt.block_on(stdout.read_exact(&mut line))
        .expect("ready line");
    println!("{} {}", child.pid(), child.scratch_dir().display());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs(120));
    std::process::exit(0);
}

/// The host process that started the sandbox is SIGKILLed (as `kill -KILL`
/// of `cordon run`): nothing of the sandbox may stay — no process, no file
/// it wrote.
pub(super) fn breach_outliving_the_host() -> Outcome {
    // Adopt the helper's orphans (a child subreaper): the helper's child
    // then stays unreaped, so its exit is an event (its pidfd), and so do
    // the processes of a sandbox that outlives the host.
    // SAFETY: prctl on integers; this scenario process is ours.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "PR_SET_CHILD_SUBREAPER: {}",
            std::io::Error::last_os_error()
        ));
    }
    base_breaches_full_holds(|_sp, base| {
        let token = sleep_token();
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.env(SCENARIO_ENV, KILLED_HOST_HELPER)
            .env("CORDON_ORPHAN_TOKEN", &token)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if base {
            cmd.env(ORPHAN_BASE_ENV, "1");
        }
        let mut helper = KillOnDrop(cmd.spawn().map_err(|e| e.to_string())?);
        let mut out = helper.0.stdout.take().unwrap();
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while out.read(&mut byte).map_err(|e| e.to_string())? == 1 && byte[0] != b'\n' {
            buf.push(byte[0]);
        }
        let line = String::from_utf8_lossy(&buf).into_owned();
        let (pid, scratch) = line
            .split_once(' ')
            .and_then(|(p, s)| Some((p.parse::<u32>().ok()?, PathBuf::from(s))))
            .ok_or_else(|| format!("helper printed {line:?}"))?;
        // Held before the helper dies, while the pid is surely the child's.
        let child = crate::driver::pidfd_open(pid).map_err(|e| format!("pidfd of {pid}: {e}"))?;
        // Positive control: the background child runs (it may still be
        // between fork and exec when the program prints its line).
        let mut started = false;
        for _ in 0..200 {
            started = !host_pids_with_arg(&token).is_empty();
            if started {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        ensure(started, || "the background child never started".into())?;
        drop(helper);
        // The child's parent-death signal ends it (with a PID namespace,
        // its init, whose exit waits until every process of the namespace
        // is gone); the program sleeps far longer than this bound. Once it
        // has exited, whatever still bears the token outlived the host.
        let child_ended = crate::driver::exits_within(&child, Duration::from_secs(60));
        // Tier landlock: the init's death is followed by its warden's kill
        // of the process group, a moment later (README "Tier landlock");
        // what still bears the token after this bound outlived the host.
        if on_container() && !base {
            for _ in 0..500 {
                if host_pids_with_arg(&token).is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let left = host_pids_with_arg(&token);
        for pid in &left {
            // SAFETY: killing this test's own leftover.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
        let file = scratch.join("left-behind");
        if on_container() && !base && file.exists() {
            // Tier landlock's fresh scratch is a host dir, which a killed
            // host cannot remove: this process's first fresh scratch
            // sweeps it (on a thread of its own).
            sweep_by_a_fresh_scratch(&scratch)?;
        }
        let file_left = file.exists();
        // The helper was killed before it could clean up.
        let _ = std::fs::remove_dir_all(&scratch);
        let mut breaches = Vec::new();
        if !child_ended {
            // SAFETY: the child this process adopted and has not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            breaches.push(format!("the sandbox's child {pid} outlived the host"));
        }
        if !left.is_empty() {
            breaches.push(format!("processes {left:?} outlived the host"));
        }
        if file_left {
            breaches.push(format!("{} stayed on disk", file.display()));
        }
        Ok((!breaches.is_empty()).then(|| breaches.join("; ")))
    })
}

/// Makes a fresh scratch (a sandbox of `/bin/true`), which sweeps the
/// scratch dirs of dead hosts, and waits, bounded, until `dir` is gone.
fn sweep_by_a_fresh_scratch(dir: &Path) -> Outcome {
    let r = run(spec("/bin/true", &[]).scratch(Scratch::Fresh))?;
    ensure(r.outcome == ExitOutcome::Exited(0), || {
        format!("/bin/true: {r}")
    })?;
    for _ in 0..500 {
        if !dir.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// The files in `dir` with a setuid or setgid bit, with their modes.
fn setuid_files(dir: &Path) -> Result<Vec<String>, String> {
    let mut planted = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        let mode = e
            .metadata()
            .map_err(|e| e.to_string())?
            .permissions()
            .mode();
        if mode & 0o6000 != 0 {
            planted.push(format!("{:?} {mode:o}", e.file_name()));
        }
    }
    Ok(planted)
}

/// SIGKILLs (and reaps) the helper on every path out of the test.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(super) const KILLED_HOST_HELPER: &str = "killed_host_helper";
