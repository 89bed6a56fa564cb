//! The gate on a host that refuses user namespaces the way a container
//! runtime's default seccomp profile does (`tests/common/container_filter.rs`
//! of the Linux backend): the Linux backend picks tier landlock there by
//! itself and conforms, its given-up checks listed and nothing else; a
//! required tier namespaces is refused with the reason, not replaced; and
//! tier landlock with only the base layers (the seccomp deny-list, no uid
//! of its own, no sandbox-wide limits) fails exactly the checks of the
//! protections those layers give in this tier. On a host like Ubuntu's
//! restriction of user namespaces (one can be made, without capabilities)
//! and on one with no user namespaces at all, tier landlock is chosen and
//! conforms the same way, its tier fact saying why.
//!
//! `harness = false`: the filter is irreversible, so the test re-executes a
//! copy of this binary (readable by uid 65534) under it, as root and, when
//! run as root, as uid 65534 too; the inner run prints every check.

use crate::{common, container_filter};

/// The test's name, as libtest would print it.
pub const NAME: &str = "under_a_container_filter_tier_landlock_is_chosen_and_certified";

/// In the re-executed copy: runs the inner side and exits.
pub fn inner_or_return() {
    if let Some(case) = std::env::var_os(linux::INNER) {
        std::process::exit(linux::inner(&case.to_string_lossy()));
    }
}

/// The test.
pub fn run() {
    linux::outer();
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::BTreeSet;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Arc;

    use cordon_backend_linux::{Layers, LinuxBackend, Tier};
    use cordon_core::{ConformanceReport, ProbeStatus, SandboxBackend};

    use super::{common, container_filter};
    use container_filter::Host;

    pub const INNER: &str = "CORDON_TIER_LANDLOCK_INNER";
    const PROBE: &str = "CORDON_TIER_LANDLOCK_PROBE";
    const NOBODY: u32 = 65534;

    fn run(backend: LinuxBackend) -> ConformanceReport {
        let probe = std::env::var_os(PROBE).expect("the probe binary");
        let suite = cordon_conformance::StandardSuite::new().with_probe_executable(
            cordon_conformance::ProbeExecutable::Path(PathBuf::from(probe)),
        );
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
            .block_on(common::run(suite, Arc::new(backend)))
    }

    /// Prints what `backend` is here and every check of its report:
    /// `tier`, `reason`, `conforms`, then `check P name status`.
    fn print(backend: LinuxBackend) {
        let tier = backend.tier();
        println!("tier\t{}", tier.map(|t| t.name()).unwrap_or("none"));
        println!(
            "reason\t{}",
            backend.availability().reason().unwrap_or("available")
        );
        let report = run(backend);
        println!("conforms\t{}", report.conforms());
        if let Some(t) = report.host.backend_facts.get("tier") {
            println!("tier_fact\t{t}");
        }
        for p in &report.probes {
            for c in &p.checks {
                println!("check\t{}\t{}\t{:?}", p.id, c.name, c.status);
            }
        }
        eprintln!("{}\n\n{}", report.summary(), common::dump(&report));
    }

    /// In the filtered process.
    pub fn inner(case: &str) -> i32 {
        match case {
            "strongest" => print(LinuxBackend::new()),
            "namespaces" => print(LinuxBackend::new().with_tier(Tier::Namespaces)),
            "base" => print(LinuxBackend::with_layers(Layers::BASE).with_tier(Tier::Landlock)),
            other => panic!("unknown case {other}"),
        }
        0
    }

    /// A 0755 dir with copies of this test binary and the probe binary.
    fn stage() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("cordon-tier-landlock-")
            .tempdir()
            .expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = |from: &Path, name: &str| {
            let to = dir.path().join(name);
            std::fs::copy(from, &to).expect("copy a binary");
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
            to
        };
        let me = copy(&std::env::current_exe().unwrap(), "tier_landlock");
        let probe = copy(
            Path::new(env!("CARGO_BIN_EXE_cordon-probe")),
            "cordon-probe",
        );
        (dir, me, probe)
    }

    /// One inner case's output lines, split at tabs.
    struct Inner {
        lines: Vec<Vec<String>>,
        text: String,
    }

    impl Inner {
        fn value(&self, key: &str) -> &str {
            self.lines
                .iter()
                .find(|l| l[0] == key)
                .map(|l| l[1].as_str())
                .unwrap_or_else(|| panic!("no {key} in {}", self.text))
        }

        /// The checks with `status`, as `P name`.
        fn checks(&self, status: ProbeStatus) -> BTreeSet<String> {
            let want = format!("{status:?}");
            self.lines
                .iter()
                .filter(|l| l[0] == "check" && l[3] == want)
                .map(|l| format!("{} {}", l[1], l[2]))
                .collect()
        }

        fn statuses(&self) -> BTreeSet<String> {
            self.lines
                .iter()
                .filter(|l| l[0] == "check")
                .map(|l| l[3].clone())
                .collect()
        }
    }

    fn inner_run(
        me: &Path,
        probe: &Path,
        case: &str,
        home: &Path,
        as_nobody: bool,
        host: Host,
    ) -> Inner {
        let mut cmd = Command::new(me);
        cmd.env(INNER, case)
            .env(PROBE, probe)
            .env("HOME", home)
            .env_remove("TMPDIR")
            .current_dir("/");
        if as_nobody {
            cmd.uid(NOBODY).gid(NOBODY);
        }
        container_filter::install_for(&mut cmd, host);
        let out = cmd.output().expect("start the inner run");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "inner run {case} on {host:?} (uid 65534: {as_nobody}) failed ({}):\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Inner {
            lines: text
                .lines()
                .map(|l| l.split('\t').map(str::to_string).collect())
                .collect(),
            text: format!("{text}\n{}", String::from_utf8_lossy(&out.stderr)),
        }
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// What tier landlock gives up: the host's hostname and which host
    /// pids exist (no UTS or PID namespace), and as an unprivileged
    /// process the capability bounding set.
    fn given_up(as_root: bool) -> BTreeSet<String> {
        let mut v = set(&[
            "P1 own-uts-namespace",
            "P1 hostname-hidden",
            "P1 enumerate-host-pids",
        ]);
        if !as_root {
            v.insert("P7 bounding-set".into());
        }
        v
    }

    /// The checks tier landlock's base layers fail: what its seccomp
    /// filter refuses beyond the deny-list (calls on other pids, SysV and
    /// POSIX IPC, pathname datagrams, setuid bits, metadata writes), and
    /// as root what a uid of its own gives. (The deny-list refuses
    /// `setsid` and `setpgid` too, so P6's tree checks pass; and the
    /// container's no_new_privs makes the host's run of a planted setuid
    /// file pass, `host-setid-scratch-exec`.)
    fn base_fails(as_root: bool) -> BTreeSet<String> {
        let mut v = set(&[
            "P1 pidfd-open",
            "P1 getpgid",
            "P1 prlimit-cpu",
            "P1 prlimit-nofile",
            "P1 setpriority",
            "P1 sched-setscheduler",
            "P1 sched-setaffinity",
            "P1 ioprio-set",
            "P1 host-sacrificial-priority",
            "P1 host-sacrificial-scheduler",
            "P1 host-sacrificial-ioprio",
            "P1 host-sacrificial-rlimits",
            "P1 sysv-msgsnd",
            "P1 sysv-shmat",
            "P1 sysv-semop",
            "P1 host-sysv-msg-empty",
            "P1 host-sysv-shm-unchanged",
            "P1 host-sysv-sem-unchanged",
            "P1 host-ipc-left-behind",
            "P4 host-unix-dgram-listener",
            "P4 unix-dgram-sendto",
            "P4 unix-dgram-connect",
            // Setuid bits planted in scratch (no nosuid mount here), and
            // metadata writes to a file of the sandbox's uid outside the
            // grants (Landlock has no right for them).
            "P5 host-setid-scratch-mount",
            "P5 host-meta-unchanged",
            "P5 chmod-outside",
            "P5 chmod-setid-outside",
            "P5 fchmodat-outside",
            "P5 utimensat-outside",
            "P5 setxattr-outside",
            "P5 chown-outside",
        ]);
        if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
            v.insert("P1 host-sacrificial-affinity".into());
        }
        if !as_root {
            // The sandbox owns the read-granted file, and the base layers
            // have no filter for the fd-based metadata writes.
            v.insert("P5 fchmod-read-grant".into());
            v.insert("P5 fsetxattr-read-grant".into());
        }
        if as_root {
            // Every sandbox is uid 65534, as is the attacker (but for
            // setns, which the container's filter refuses itself).
            for (p, name) in common::other_user_checks() {
                if name != "other-user-setns" {
                    v.insert(format!("{p} {name}"));
                }
            }
        }
        v
    }

    fn as_identity(me: &Path, probe: &Path, as_nobody: bool) {
        let as_root = !as_nobody && common::is_root();
        let home = tempfile::tempdir().unwrap();
        if as_nobody {
            std::os::unix::fs::chown(home.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        }
        // Chosen by itself: tier landlock, certified.
        let strongest = inner_run(
            me,
            probe,
            "strongest",
            home.path(),
            as_nobody,
            Host::ContainerProfile,
        );
        let text = &strongest.text;
        assert_eq!(strongest.value("tier"), "landlock", "{text}");
        assert_eq!(strongest.value("reason"), "available", "{text}");
        assert_eq!(strongest.value("conforms"), "true", "{text}");
        let fact = strongest.value("tier_fact");
        assert!(
            fact.starts_with("landlock") && fact.contains("tier namespaces is unavailable here"),
            "the tier fact names the tier and why the stronger one was passed over: {fact}"
        );
        assert_eq!(
            strongest.checks(ProbeStatus::GivenUp),
            given_up(as_root),
            "{text}"
        );
        assert_eq!(strongest.checks(ProbeStatus::Fail), set(&[]), "{text}");
        // Required, tier namespaces is refused with the reason.
        let required = inner_run(
            me,
            probe,
            "namespaces",
            home.path(),
            as_nobody,
            Host::ContainerProfile,
        );
        let text = &required.text;
        assert_eq!(required.value("tier"), "namespaces", "{text}");
        let reason = required.value("reason");
        assert!(
            reason.starts_with("tier namespaces is required and cannot run here")
                && reason.contains("unshare"),
            "{text}"
        );
        assert_eq!(required.value("conforms"), "false", "{text}");
        assert_eq!(
            required.statuses(),
            set(&[]),
            "an unavailable backend is run through no probe: {text}"
        );
        // The base layers in tier landlock: each protection they lack is a
        // failing check, and only those.
        let base = inner_run(
            me,
            probe,
            "base",
            home.path(),
            as_nobody,
            Host::ContainerProfile,
        );
        let text = &base.text;
        assert_eq!(base.value("tier"), "landlock", "{text}");
        assert_eq!(base.value("conforms"), "false", "{text}");
        assert_eq!(
            base.checks(ProbeStatus::Fail),
            base_fails(as_root),
            "{text}"
        );
        assert_eq!(
            base.checks(ProbeStatus::GivenUp),
            given_up(as_root),
            "{text}"
        );
    }

    /// On the other hosts without usable user namespaces (Ubuntu's
    /// restriction, a zero maximum) the backend picks tier landlock by
    /// itself and conforms in the same way, and its tier fact says why.
    fn other_hosts(me: &Path, probe: &Path, as_nobody: bool) {
        let as_root = !as_nobody && common::is_root();
        let home = tempfile::tempdir().unwrap();
        if as_nobody {
            std::os::unix::fs::chown(home.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        }
        for (host, why) in [
            (Host::UbuntuRestricted, "mount"),
            (Host::NoUserNamespaces, "unshare"),
        ] {
            let r = inner_run(me, probe, "strongest", home.path(), as_nobody, host);
            let text = &r.text;
            assert_eq!(r.value("tier"), "landlock", "{host:?}: {text}");
            assert_eq!(r.value("conforms"), "true", "{host:?}: {text}");
            let fact = r.value("tier_fact");
            assert!(
                fact.contains("tier namespaces is unavailable here") && fact.contains(why),
                "{host:?}: the tier fact does not say why ({why}): {fact}"
            );
            assert_eq!(
                r.checks(ProbeStatus::GivenUp),
                given_up(as_root),
                "{host:?}: {text}"
            );
            assert_eq!(r.checks(ProbeStatus::Fail), set(&[]), "{host:?}: {text}");
        }
    }

    pub fn outer() {
        let (_dir, me, probe) = stage();
        as_identity(&me, &probe, false);
        other_hosts(&me, &probe, false);
        if common::is_root() {
            as_identity(&me, &probe, true);
            other_hosts(&me, &probe, true);
        }
    }
}
