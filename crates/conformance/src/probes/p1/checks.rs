//! P1's declared checks: those of every host ([`CHECKS`]) and those of a
//! root host only ([`OTHER_USER`]); [`P1::checks`](super::P1) adds the
//! one of a host with several CPUs.

use cordon_core::Evidence;

/// Every check P1 makes on any host.
pub(super) const CHECKS: &[(&str, Evidence)] = &[
    ("host-process-alive", Evidence::Host),
    ("host-abstract-listener", Evidence::Host),
    ("host-pathname-listener", Evidence::Host),
    ("host-pty-unchanged", Evidence::Host),
    ("host-sysv-msg-empty", Evidence::Host),
    ("host-sysv-shm-unchanged", Evidence::Host),
    ("host-sysv-sem-unchanged", Evidence::Host),
    ("host-posix-mq-empty", Evidence::Host),
    ("host-ipc-left-behind", Evidence::Host),
    ("control-sacrificial-has-program-uid", Evidence::Host),
    ("own-uts-namespace", Evidence::Host),
    ("hostname-hidden", Evidence::Child),
    ("ptrace-attach", Evidence::Child),
    ("process-vm-readv", Evidence::Child),
    ("proc-environ", Evidence::Child),
    ("proc-mem", Evidence::Child),
    ("pidfd-open", Evidence::Child),
    ("getpgid", Evidence::Child),
    ("enumerate-host-pids", Evidence::Child),
    ("prlimit-cpu", Evidence::Child),
    ("prlimit-nofile", Evidence::Child),
    ("setpriority", Evidence::Child),
    ("sched-setscheduler", Evidence::Child),
    ("sched-setaffinity", Evidence::Child),
    ("ioprio-set", Evidence::Child),
    ("abstract-unix-connect", Evidence::Child),
    ("pathname-unix-connect", Evidence::Child),
    ("sysv-msgsnd", Evidence::Child),
    ("sysv-shmat", Evidence::Child),
    ("sysv-semop", Evidence::Child),
    ("posix-mq-send", Evidence::Child),
    ("open-host-pty", Evidence::Child),
    ("controlling-tty", Evidence::Host),
    ("not-root", Evidence::Host),
    ("host-not-traced", Evidence::Host),
    ("host-sacrificial-priority", Evidence::Host),
    ("host-sacrificial-scheduler", Evidence::Host),
    ("host-sacrificial-ioprio", Evidence::Host),
    ("host-sacrificial-rlimits", Evidence::Host),
    ("signal-0", Evidence::Child),
    ("signal-cont", Evidence::Child),
    ("signal-kill", Evidence::Child),
];

/// P1's attacks from a host process of another uid (a root host only).
pub(super) const OTHER_USER: &[(&str, Evidence)] = &[
    ("other-user-ptrace", Evidence::Host),
    ("other-user-proc-mem", Evidence::Host),
    ("other-user-proc-environ", Evidence::Host),
    ("other-user-proc-root", Evidence::Host),
    ("other-user-setns", Evidence::Host),
    ("other-user-pidfd-getfd", Evidence::Host),
    ("other-user-signal", Evidence::Host),
];
