//! P1's IPC part: SysV message queue, shared memory and semaphore set, and
//! a POSIX message queue, all owned by the sandbox uid with mode 0600 (so
//! only isolation stands in the way). The child tries to use each; the
//! host confirms the queue is empty, the segment's bytes and the
//! semaphore's value unchanged. The child also creates objects of its own
//! (named by its token); after it is gone the host confirms none of them
//! outlived it, and removes any that did.
//!
//! Denials: `EPERM`/`EACCES`, and the "not found" each call gives for an
//! object that is not in the caller's IPC namespace — the host confirms
//! (by checking them after the run) that the objects did exist:
//! - SysV ids are looked up in `current->nsproxy->ipc_ns` only
//!   (`ipc_obtain_object_check()`, ipc/util.c), and a missing id is
//!   `EINVAL` for `msgsnd`, `shmat` and `semop`; the other `EINVAL` causes
//!   of these calls are argument errors this probe does not make (a
//!   1-byte message of type 1, a NULL attach address, one `sem_op` on
//!   semaphore 0).
//! - POSIX queue names are resolved in the mqueue mount of the caller's IPC
//!   namespace (`do_mq_open()`, ipc/mqueue.c): a missing name is `ENOENT`.

use std::collections::BTreeMap;

use cordon_core::{CheckResult, ProbeStatus};

use crate::child::{self, errno, errno_name, Reporter};
use crate::harness::{fail, pass, unreachable, verdict, Ids};

/// What the sacrificial process writes into its shared memory segment.
const SHM_PATTERN: &[u8] = b"cordon sacrificial shm pattern\0";

/// The name of the sacrificial's POSIX queue for one suite token.
fn host_mq_name(token: &str) -> String {
    format!("/cordon-p1-host-{token}")
}

/// The name of the queue the child makes of its own.
fn own_mq_name(token: &str) -> String {
    format!("/cordon-p1-own-{token}")
}

/// The SysV key the child uses for its own objects: derived from its token,
/// so the host can find exactly those objects and no one else's.
pub(crate) fn own_key(token: &str) -> libc::key_t {
    let n = u32::from_str_radix(token.get(..8).unwrap_or("1"), 16).unwrap_or(1);
    ((n & 0x7fff_fffe) | 1) as libc::key_t
}

/// In the sacrificial process, before it becomes the program's uid: gives
/// the targets it made (found by its token's key and queue name) to `ids`,
/// so that only the sandbox stands between them and the child.
pub(crate) fn give_targets(token: &str, ids: Ids) -> Result<(), String> {
    let key = own_key(token);
    let err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: IPC_STAT/IPC_SET on objects this process made (by its
    // key), into zeroed structs; fchown on the queue it made.
    unsafe {
        let msg = libc::msgget(key, 0);
        let mut q: libc::msqid_ds = std::mem::zeroed();
        if msg < 0 || libc::msgctl(msg, libc::IPC_STAT, &mut q) != 0 {
            return Err(err("message queue"));
        }
        q.msg_perm.uid = ids.uid;
        q.msg_perm.gid = ids.gid;
        if libc::msgctl(msg, libc::IPC_SET, &mut q) != 0 {
            return Err(err("message queue owner"));
        }
        let shm = libc::shmget(key, 0, 0);
        let mut m: libc::shmid_ds = std::mem::zeroed();
        if shm < 0 || libc::shmctl(shm, libc::IPC_STAT, &mut m) != 0 {
            return Err(err("shared memory"));
        }
        m.shm_perm.uid = ids.uid;
        m.shm_perm.gid = ids.gid;
        if libc::shmctl(shm, libc::IPC_SET, &mut m) != 0 {
            return Err(err("shared memory owner"));
        }
        let sem = libc::semget(key, 0, 0);
        let mut sd: libc::semid_ds = std::mem::zeroed();
        if sem < 0 || libc::semctl(sem, 0, libc::IPC_STAT, &mut sd as *mut libc::semid_ds) != 0 {
            return Err(err("semaphore"));
        }
        sd.sem_perm.uid = ids.uid;
        sd.sem_perm.gid = ids.gid;
        if libc::semctl(sem, 0, libc::IPC_SET, &mut sd as *mut libc::semid_ds) != 0 {
            return Err(err("semaphore owner"));
        }
        let name = child::cstr(&host_mq_name(token));
        let mq = libc::mq_open(name.as_ptr(), libc::O_RDWR);
        if mq < 0 {
            return Err(err("POSIX queue"));
        }
        let r = libc::fchown(mq, ids.uid, ids.gid);
        libc::mq_close(mq);
        if r != 0 {
            return Err(err("POSIX queue owner"));
        }
    }
    Ok(())
}

/// In the sacrificial process (running as the host's uid): creates the
/// four targets and returns the line that tells the host their ids. The
/// SysV objects are made under the sacrificial token's key, so the suite's
/// watchdog can find them should the host die before removing them
/// ([`remove_for_token`]); the child is only ever told their ids.
pub(crate) fn create_targets(token: &str) -> String {
    let key = own_key(token);
    let flags = libc::IPC_CREAT | libc::IPC_EXCL | 0o600;
    // SAFETY: SysV and mqueue calls on integers, a local buffer and valid
    // C strings; the segment is detached before returning.
    unsafe {
        let msg = libc::msgget(key, flags);
        let shm = libc::shmget(key, 4096, flags);
        if shm >= 0 {
            let p = libc::shmat(shm, std::ptr::null(), 0);
            if p as isize != -1 {
                std::ptr::copy_nonoverlapping(
                    SHM_PATTERN.as_ptr(),
                    p.cast::<u8>(),
                    SHM_PATTERN.len(),
                );
                libc::shmdt(p);
            }
        }
        let sem = libc::semget(key, 1, flags);
        let name = child::cstr(&host_mq_name(token));
        let mq = libc::mq_open(
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o600 as libc::mode_t,
            std::ptr::null::<libc::mq_attr>(),
        );
        if mq >= 0 {
            libc::mq_close(mq);
        }
        format!(
            "IPC\tmsg={msg}\tshm={shm}\tsem={sem}\tmq={}",
            if mq >= 0 { "ok" } else { "failed" }
        )
    }
}

/// The host's handle on the sacrificial's IPC objects; removes them on drop.
pub(crate) struct HostIpc {
    msg: i32,
    shm: i32,
    sem: i32,
    mq: Option<String>,
}

impl HostIpc {
    /// Parses the sacrificial's `IPC` line.
    pub(crate) fn parse(line: &str, token: &str) -> HostIpc {
        let kv: BTreeMap<&str, &str> = line
            .split('\t')
            .skip(1)
            .filter_map(|f| f.split_once('='))
            .collect();
        let id = |k: &str| kv.get(k).and_then(|v| v.parse().ok()).unwrap_or(-1);
        HostIpc {
            msg: id("msg"),
            shm: id("shm"),
            sem: id("sem"),
            mq: (kv.get("mq") == Some(&"ok")).then(|| host_mq_name(token)),
        }
    }

    /// The child's arguments: the ids and the queue name.
    pub(crate) fn args(&self) -> Vec<(String, String)> {
        let mut a = vec![
            ("msg".to_string(), self.msg.to_string()),
            ("shm".to_string(), self.shm.to_string()),
            ("sem".to_string(), self.sem.to_string()),
        ];
        if let Some(mq) = &self.mq {
            a.push(("mq".to_string(), mq.clone()));
        }
        a
    }

    /// After the child: the queue empty, the segment and semaphore as the
    /// sacrificial left them.
    pub(crate) fn verify(&self) -> Vec<CheckResult> {
        let mut checks = Vec::new();
        checks.push(if self.msg < 0 {
            unreachable("host-sysv-msg-empty", "the sacrificial could not create it")
        } else {
            match sysvipc_row("msg", self.msg).and_then(|r| r.get(4).cloned()) {
                Some(n) => verdict(
                    "host-sysv-msg-empty",
                    n == "0",
                    format!("the host's queue holds {n} messages"),
                ),
                None => fail("host-sysv-msg-empty", "the host's queue is gone"),
            }
        });
        checks.push(if self.shm < 0 {
            unreachable(
                "host-sysv-shm-unchanged",
                "the sacrificial could not create it",
            )
        } else {
            match read_shm(self.shm) {
                Ok(bytes) => verdict(
                    "host-sysv-shm-unchanged",
                    bytes == SHM_PATTERN,
                    if bytes == SHM_PATTERN {
                        "the segment holds what the sacrificial wrote".to_string()
                    } else {
                        format!(
                            "the segment was written: {:?}",
                            String::from_utf8_lossy(&bytes)
                        )
                    },
                ),
                Err(e) => unreachable("host-sysv-shm-unchanged", format!("shmat: {e}")),
            }
        });
        checks.push(if self.sem < 0 {
            unreachable(
                "host-sysv-sem-unchanged",
                "the sacrificial could not create it",
            )
        } else {
            // SAFETY: GETVAL on an id we own; no fourth argument needed.
            let v = unsafe { libc::semctl(self.sem, 0, libc::GETVAL) };
            verdict(
                "host-sysv-sem-unchanged",
                v == 0,
                format!("the host's semaphore is {v} (it was 0)"),
            )
        });
        checks.push(match &self.mq {
            None => unreachable("host-posix-mq-empty", "the sacrificial could not create it"),
            Some(name) => match mq_messages(name) {
                Ok(n) => verdict(
                    "host-posix-mq-empty",
                    n == 0,
                    format!("the host's queue holds {n} messages"),
                ),
                Err(e) => fail("host-posix-mq-empty", format!("the host's queue: {e}")),
            },
        });
        checks
    }
}

impl Drop for HostIpc {
    fn drop(&mut self) {
        // SAFETY: removing the objects this suite run created.
        unsafe {
            if self.msg >= 0 {
                libc::msgctl(self.msg, libc::IPC_RMID, std::ptr::null_mut());
            }
            if self.shm >= 0 {
                libc::shmctl(self.shm, libc::IPC_RMID, std::ptr::null_mut());
            }
            if self.sem >= 0 {
                libc::semctl(self.sem, 0, libc::IPC_RMID);
            }
            if let Some(name) = &self.mq {
                libc::mq_unlink(child::cstr(name).as_ptr());
            }
        }
    }
}

/// The columns of the row for `id` in `/proc/sysvipc/<kind>` (the host's
/// own IPC namespace).
fn sysvipc_row(kind: &str, id: i32) -> Option<Vec<String>> {
    sysvipc_rows(kind)
        .into_iter()
        .find(|r| r.get(1).and_then(|v| v.parse::<i32>().ok()) == Some(id))
}

fn sysvipc_rows(kind: &str) -> Vec<Vec<String>> {
    std::fs::read_to_string(format!("/proc/sysvipc/{kind}"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn read_shm(id: i32) -> std::io::Result<Vec<u8>> {
    // SAFETY: attach read-only, copy SHM_PATTERN.len() bytes of the
    // 4096-byte segment, detach.
    unsafe {
        let p = libc::shmat(id, std::ptr::null(), libc::SHM_RDONLY);
        if p as isize == -1 {
            return Err(std::io::Error::last_os_error());
        }
        let bytes = std::slice::from_raw_parts(p.cast::<u8>(), SHM_PATTERN.len()).to_vec();
        libc::shmdt(p);
        Ok(bytes)
    }
}

fn mq_messages(name: &str) -> std::io::Result<i64> {
    let c = child::cstr(name);
    // SAFETY: mq_open/mq_getattr/mq_close on a valid name and local attr.
    unsafe {
        let mq = libc::mq_open(c.as_ptr(), libc::O_RDONLY);
        if mq < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut attr: libc::mq_attr = std::mem::zeroed();
        let rc = libc::mq_getattr(mq, &mut attr);
        let e = std::io::Error::last_os_error();
        libc::mq_close(mq);
        if rc != 0 {
            return Err(e);
        }
        Ok(attr.mq_curmsgs)
    }
}

/// For the suite's watchdog, once the host is gone: removes every IPC
/// object under `token` — those a child made of its own and the targets a
/// sacrificial made (SysV objects under its key, of the sandbox's or the
/// host's uid; both queue names).
pub(crate) fn remove_for_token(token: &str, sandbox: Ids, host_uid: u32) {
    let _ = left_behind(token, sandbox, host_uid);
    // SAFETY: unlinking a queue name derived from the token.
    unsafe { libc::mq_unlink(child::cstr(&host_mq_name(token)).as_ptr()) };
}

/// After the child is gone: no object the child made of its own (found by
/// its token's key and queue name) outlived it. Removes any that did.
pub(crate) fn left_behind(token: &str, sandbox: Ids, host_uid: u32) -> CheckResult {
    const NAME: &str = "host-ipc-left-behind";
    let key = own_key(token) as i64;
    let mut found = Vec::new();
    for kind in ["shm", "msg", "sem"] {
        for row in sysvipc_rows(kind) {
            let (Some(k), Some(id)) = (
                row.first().and_then(|v| v.parse::<i64>().ok()),
                row.get(1).and_then(|v| v.parse::<i32>().ok()),
            ) else {
                continue;
            };
            if k != key {
                continue;
            }
            // The uid column: 7 for shm, 7 for msg, 4 for sem.
            let uid_col = if kind == "sem" { 4 } else { 7 };
            let uid = row.get(uid_col).and_then(|v| v.parse::<u32>().ok());
            found.push(format!("SysV {kind} {id} (uid {uid:?})"));
            // Only ever remove an object with our key, of the uid the
            // program ran as (the sandbox's, or the host's for the
            // unconfined baseline).
            if uid == Some(sandbox.uid) || uid == Some(host_uid) {
                // SAFETY: IPC_RMID of an object the child made.
                unsafe {
                    match kind {
                        "shm" => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                        "msg" => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                        _ => libc::semctl(id, 0, libc::IPC_RMID),
                    };
                }
            }
        }
    }
    let own = own_mq_name(token);
    // SAFETY: unlinking the queue name the child was given.
    if unsafe { libc::mq_unlink(child::cstr(&own).as_ptr()) } == 0 {
        found.push(format!("POSIX queue {own}"));
    }
    if found.is_empty() {
        pass(
            NAME,
            "nothing the child created in SysV or POSIX IPC outlived it",
        )
    } else {
        fail(
            NAME,
            format!(
                "outlived the sandbox (removed by the host): {}",
                found.join(", ")
            ),
        )
    }
}

/// Denials for an IPC call aimed at the host's object: see the module doc.
const SYSV_DENIED: [i32; 3] = [libc::EPERM, libc::EACCES, libc::EINVAL];
const MQ_DENIED: [i32; 3] = [libc::EPERM, libc::EACCES, libc::ENOENT];

/// The child's attack on the host's objects.
pub(crate) fn attack(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let id = |k: &str| {
        args.get(k)
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(-1)
    };
    #[repr(C)]
    struct Msg {
        mtype: libc::c_long,
        text: [u8; 1],
    }
    let m = Msg {
        mtype: 1,
        text: *b"x",
    };
    // SAFETY: m is a valid msgbuf with 1 byte of text.
    let rc = unsafe { libc::msgsnd(id("msg"), (&m as *const Msg).cast(), 1, libc::IPC_NOWAIT) };
    r.forbidden(
        "sysv-msgsnd",
        if rc == 0 {
            Ok("sent a message to the host's queue".into())
        } else {
            Err(errno())
        },
        &SYSV_DENIED,
    );
    // SAFETY: attach at a kernel-chosen address; write within the segment's
    // first page; detach.
    let res = unsafe {
        let p = libc::shmat(id("shm"), std::ptr::null(), 0);
        if p as isize == -1 {
            Err(errno())
        } else {
            std::ptr::copy_nonoverlapping(b"pwned".as_ptr(), p.cast::<u8>(), 5);
            libc::shmdt(p);
            Ok("attached and wrote the host's segment".to_string())
        }
    };
    r.forbidden("sysv-shmat", res, &SYSV_DENIED);
    let mut op = libc::sembuf {
        sem_num: 0,
        sem_op: 1,
        sem_flg: libc::IPC_NOWAIT as libc::c_short,
    };
    // SAFETY: one sembuf.
    let rc = unsafe { libc::semop(id("sem"), &mut op, 1) };
    r.forbidden(
        "sysv-semop",
        if rc == 0 {
            Ok("raised the host's semaphore".into())
        } else {
            Err(errno())
        },
        &SYSV_DENIED,
    );
    match args.get("mq") {
        Some(name) => {
            let c = child::cstr(name);
            // SAFETY: mq_open/mq_send/mq_close with a valid name and buffer.
            let res = unsafe {
                let mq = libc::mq_open(c.as_ptr(), libc::O_WRONLY | libc::O_NONBLOCK);
                if mq < 0 {
                    Err(errno())
                } else {
                    let rc = libc::mq_send(mq, b"x".as_ptr().cast(), 1, 0);
                    let e = errno();
                    libc::mq_close(mq);
                    if rc == 0 {
                        Ok("sent a message to the host's queue".to_string())
                    } else {
                        Err(e)
                    }
                }
            };
            r.forbidden("posix-mq-send", res, &MQ_DENIED);
        }
        None => r.check(
            "posix-mq-send",
            ProbeStatus::Unreachable,
            "the host had no POSIX queue",
        ),
    }
}

/// The child makes objects of its own and leaves them, as a careless or
/// hostile program would; the host checks none outlives the sandbox.
pub(crate) fn leave_own(r: &mut Reporter, token: &str) {
    let key = own_key(token);
    let flags = libc::IPC_CREAT | libc::IPC_EXCL | 0o600;
    let show = |rc: i32| {
        if rc >= 0 {
            format!("id {rc}")
        } else {
            errno_name(errno())
        }
    };
    // SAFETY: creation calls on integers and a valid C string.
    unsafe {
        r.info("own-shm", show(libc::shmget(key, 4096, flags)));
        r.info("own-msg", show(libc::msgget(key, flags)));
        r.info("own-sem", show(libc::semget(key, 1, flags)));
        let name = child::cstr(&own_mq_name(token));
        let mq = libc::mq_open(
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o600 as libc::mode_t,
            std::ptr::null::<libc::mq_attr>(),
        );
        r.info("own-mq", show(mq));
        if mq >= 0 {
            libc::mq_close(mq);
        }
    }
}
