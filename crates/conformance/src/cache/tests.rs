//! The cache's checks on real files and dirs: what is trusted, what is
//! refused, and that a write never follows a planted name.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn dir_fd(p: &Path) -> OwnedFd {
    std::fs::File::open(p).unwrap().into()
}

/// A private dir under a fresh temp dir (the temp dir itself is 0700).
fn private() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("cordon");
    (t, d)
}

#[test]
fn a_private_dir_is_created_and_accepted() {
    use std::os::unix::fs::MetadataExt;
    let (_t, d) = private();
    open_private_dir(&d).unwrap();
    let m = std::fs::metadata(&d).unwrap();
    assert_eq!(m.mode() & 0o777, 0o700);
    assert_eq!(m.uid(), euid());
    // Missing parents are created too, each checked.
    let deep = d.join("a").join("b");
    open_private_dir(&deep).unwrap();
    assert!(deep.is_dir());
}

#[test]
fn a_cache_dir_others_can_write_is_refused_sticky_or_not() {
    let (_t, d) = private();
    std::fs::create_dir(&d).unwrap();
    for mode in [0o777, 0o1777, 0o720, 0o702] {
        chmod(&d, mode);
        let e = open_private_dir(&d).unwrap_err();
        assert!(e.why.contains("writable by other users"), "{mode:o}: {e}");
    }
    chmod(&d, 0o755);
    open_private_dir(&d).unwrap();
}

#[test]
fn an_ancestor_others_can_write_is_refused_unless_sticky() {
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let d = shared.join("me").join("cordon");
    chmod(&shared, 0o777);
    let e = open_private_dir(&d).unwrap_err();
    assert!(e.why.contains("no sticky bit"), "{e}");
    assert!(e.to_string().contains("shared"), "{e}");
    // Nothing was created below the refused ancestor.
    assert!(!shared.join("me").exists());
    chmod(&shared, 0o1777);
    open_private_dir(&d).unwrap();
    chmod(&shared, 0o775);
    assert!(open_private_dir(&d).is_err());
}

#[test]
fn a_symlinked_cache_dir_is_resolved_and_checked_at_its_target() {
    let t = tempfile::tempdir().unwrap();
    let real = t.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, t.path().join("link")).unwrap();
    open_private_dir(&t.path().join("link").join("cordon")).unwrap();
    assert!(real.join("cordon").is_dir());
    chmod(&real, 0o777);
    assert!(open_private_dir(&t.path().join("link").join("cordon")).is_err());
}

#[test]
fn a_relative_dir_is_refused() {
    assert!(open_private_dir(Path::new("cache/cordon")).is_err());
}

#[test]
fn create_new_never_follows_or_reuses_a_planted_name() {
    let (_t, d) = private();
    std::fs::create_dir(&d).unwrap();
    let victim = d.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, d.join(".tmp-planted")).unwrap();
    std::fs::write(d.join(".tmp-existing"), b"old").unwrap();
    let fd = dir_fd(&d);
    let planted = CString::new(".tmp-planted").unwrap();
    let existing = CString::new(".tmp-existing").unwrap();
    let e = create_new(fd.as_fd(), &planted).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    let e = create_new(fd.as_fd(), &existing).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(std::fs::read(d.join(".tmp-existing")).unwrap(), b"old");
    // Fresh names differ each time.
    assert_ne!(temp_name().unwrap(), temp_name().unwrap());
}

#[test]
fn only_a_private_regular_file_is_opened() {
    let (_t, d) = private();
    std::fs::create_dir(&d).unwrap();
    let fd = dir_fd(&d);
    let name = CString::new("conformance-x.json").unwrap();
    let file = d.join("conformance-x.json");
    // Control: a 0600 file of ours is opened.
    std::fs::write(&file, b"{}").unwrap();
    chmod(&file, 0o600);
    assert!(open_private(fd.as_fd(), &name).is_some());
    // Group- or other-readable: refused.
    chmod(&file, 0o640);
    assert!(open_private(fd.as_fd(), &name).is_none());
    // Larger than the limit: refused.
    std::fs::write(&file, vec![b' '; MAX_CACHE_BYTES as usize + 1]).unwrap();
    chmod(&file, 0o600);
    assert!(open_private(fd.as_fd(), &name).is_none());
    // A second name (a hard link made from elsewhere): refused.
    std::fs::write(&file, b"{}").unwrap();
    std::fs::hard_link(&file, d.join("second-name")).unwrap();
    assert!(open_private(fd.as_fd(), &name).is_none());
    std::fs::remove_file(d.join("second-name")).unwrap();
    assert!(open_private(fd.as_fd(), &name).is_some());
    // A symlink to a private file: not followed.
    std::fs::remove_file(&file).unwrap();
    let elsewhere = d.join("elsewhere");
    std::fs::write(&elsewhere, b"{}").unwrap();
    chmod(&elsewhere, 0o600);
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    assert!(open_private(fd.as_fd(), &name).is_none());
    // A FIFO: neither waited on nor opened for reading.
    std::fs::remove_file(&file).unwrap();
    let c = CString::new(file.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(open_private(fd.as_fd(), &name).is_none());
}

#[test]
fn file_names_are_plain() {
    assert_eq!(
        file_name("linux").unwrap().to_str().unwrap(),
        "conformance-linux.json"
    );
    assert!(file_name("../x").is_none());
    assert!(file_name("").is_none());
}

/// A backend that confines nothing, under one name, whose facts say which
/// tier (and uid range) it runs in: what `cordon` sees when an operator
/// alternates `--tier`. It is never spawned through.
#[derive(Debug)]
struct Tiered(&'static str, &'static str);

impl SandboxBackend for Tiered {
    fn name(&self) -> &str {
        "tiered"
    }
    fn availability(&self) -> cordon_core::Availability {
        cordon_core::Availability::Available
    }
    fn host_facts(&self) -> std::collections::BTreeMap<String, String> {
        [("tier", self.0), ("sandbox_uids", self.1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn wrap(
        &self,
        _cmd: &mut cordon_core::ChildCommand,
        _policy: &cordon_core::SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, cordon_core::WrapError> {
        Err(cordon_core::WrapError::new("tiered", "never spawned"))
    }
}

/// A suite whose every report conforms, counting its runs: a cache miss
/// is a run.
struct Counting(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl ConformanceSuite for Counting {
    async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let probes = cordon_core::ProbeId::REQUIRED
            .iter()
            .map(|id| {
                let check = crate::verdict::pass("stand-in", "a conforming stand-in report");
                crate::verdict::fold(*id, "stand-in", vec![check], 1, std::time::Instant::now())
            })
            .collect();
        let host = cordon_core::HostFacts::collect(backend.as_ref());
        let report =
            ConformanceReport::new(backend.name(), backend.availability(), host, probes, 0.0);
        assert!(report.conforms(), "the stand-in report must conform");
        report
    }
}

#[tokio::test]
async fn alternating_tiers_and_uid_ranges_reuse_each_report() {
    let (_t, d) = private();
    let suite = CachedSuite::new(
        Counting(std::sync::atomic::AtomicUsize::new(0)),
        Some(d.clone()),
        false,
    );
    let variants = [
        ("namespaces", "100000-165535"),
        ("landlock", "100000-165535"),
        ("namespaces", "200000-265535"),
    ];
    for round in 0..3 {
        for (tier, uids) in variants {
            let report = suite.run(Arc::new(Tiered(tier, uids))).await;
            assert!(report.conforms());
            let outcome = suite.outcome.lock().unwrap().clone();
            let want = if round == 0 {
                CacheOutcome::Miss
            } else {
                CacheOutcome::Hit
            };
            assert_eq!(outcome, want, "round {round}, tier {tier}, uids {uids}");
        }
    }
    // One probe run per variant, however they alternate.
    let runs = suite.inner.0.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(runs, variants.len());
    // A changed key is still a miss: the cache does not answer for a
    // variant it never ran.
    suite
        .run(Arc::new(Tiered("landlock", "300000-365535")))
        .await;
    assert_eq!(*suite.outcome.lock().unwrap(), CacheOutcome::Miss);
}
