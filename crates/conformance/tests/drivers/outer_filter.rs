//! The gate on a host that already runs under a seccomp filter with
//! no_new_privs (a container, a service manager's `SystemCallFilter=`):
//! the checks that state only inherits stop counting as evidence, the ones
//! measured against the host's own state still do, and a cached report
//! made outside that state is not reused inside it.
//!
//! `harness = false`: the outer run makes a conforming report in a cache
//! dir of its own (and sees it reused), then re-executes this binary,
//! which installs an allow-all seccomp filter and no_new_privs on itself
//! (irreversible: hence the separate process) before it runs the same
//! cached gate and P7, and prints what it found.

use crate::common;

/// The test's name, as libtest would print it.
pub const NAME: &str = "an_outer_filter_changes_what_discriminates_and_the_cache_key";

/// In the re-executed copy: runs the inner side and exits.
pub fn inner_or_return() {
    if std::env::var_os(linux::INNER).is_some() {
        std::process::exit(linux::inner());
    }
}

/// The test.
pub fn run() {
    linux::outer();
}

#[cfg(target_os = "linux")]
mod linux {
    use std::path::Path;
    use std::sync::Arc;

    use cordon_backend_linux::LinuxBackend;
    use cordon_conformance::cache::{CacheOutcome, CachedSuite};
    use cordon_core::{ConformanceSuite, ProbeId};

    use super::common;

    pub const INNER: &str = "CORDON_OUTER_FILTER_INNER";
    const CACHE: &str = "CORDON_OUTER_FILTER_CACHE";

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    }

    /// The gate through the cache in `dir`: how the cache answered, and
    /// whether the report conforms.
    fn cached_gate(dir: &Path) -> (CacheOutcome, bool) {
        let suite = CachedSuite::new(common::suite(), Some(dir.to_path_buf()), false);
        let report = runtime().block_on(suite.run(Arc::new(LinuxBackend::new())));
        let outcome = suite.outcome.lock().unwrap().clone();
        (outcome, report.conforms())
    }

    /// Installs no_new_privs and a filter that allows every syscall.
    fn install_outer_filter() {
        let allow = libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        };
        let prog = libc::sock_fprog {
            len: 1,
            filter: &allow as *const libc::sock_filter as *mut libc::sock_filter,
        };
        // SAFETY: prctl on integers, then seccomp with a one-instruction
        // program on this frame; this process is the test's own.
        unsafe {
            assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
            assert_eq!(
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    &prog as *const libc::sock_fprog
                ),
                0,
                "seccomp: {}",
                std::io::Error::last_os_error()
            );
        }
    }

    pub fn inner() -> i32 {
        install_outer_filter();
        let dir = std::env::var_os(CACHE).expect("the cache dir");
        let (outcome, conforms) = cached_gate(Path::new(&dir));
        println!("cache\t{outcome:?}\t{conforms}");
        let report = runtime().block_on(
            common::suite()
                .only(vec![ProbeId::P7])
                .run(Arc::new(LinuxBackend::new())),
        );
        let p7 = report.probes.first().expect("P7 ran");
        println!("probe\t{:?}\t{}", p7.status, p7.detail);
        for c in &p7.checks {
            println!(
                "check\t{}\t{:?}\t{}\t{}\t{}",
                c.name, c.status, c.discriminates, c.passes_without_sandbox, c.detail
            );
        }
        0
    }

    pub fn outer() {
        let cache = tempfile::tempdir().unwrap();
        // Unfiltered: the gate runs, its report is stored, and reused.
        let (first, conforms) = cached_gate(cache.path());
        assert!(conforms, "the backend must conform here");
        assert_eq!(first, CacheOutcome::Miss);
        let (second, _) = cached_gate(cache.path());
        assert_eq!(
            second,
            CacheOutcome::Hit,
            "control: the cache is reused unfiltered"
        );
        // Under the outer filter.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .env(INNER, "1")
            .env(CACHE, cache.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = |prefix: &str| -> Vec<Vec<String>> {
            text.lines()
                .filter(|l| l.starts_with(prefix))
                .map(|l| l.split('\t').map(str::to_string).collect())
                .collect()
        };
        let cache_line = &line("cache\t")[0];
        assert_eq!(
            cache_line[1], "Miss",
            "a report made outside the filter was reused inside it: {text}"
        );
        let check = |name: &str| -> Vec<String> {
            line("check\t")
                .into_iter()
                .find(|c| c[1] == name)
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        // no_new_privs is the host's own now: no evidence of the backend.
        let nnp = check("no-new-privs");
        assert_eq!(
            (nnp[2].as_str(), nnp[3].as_str(), nnp[4].as_str()),
            ("Pass", "false", "true"),
            "{text}"
        );
        // The backend's own filter still shows: one more than the host's.
        let filter = check("seccomp-filter");
        assert_eq!(
            (filter[2].as_str(), filter[3].as_str()),
            ("Pass", "true"),
            "{text}"
        );
    }
}
