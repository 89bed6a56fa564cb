//! The per-boot conformance cache behind `cordon run`.
//!
//! Running P1–P7 before every `cordon run` costs a fraction of a second; a
//! conforming report is cached for this boot, keyed by backend, kernel
//! release, Landlock ABI (or whatever the backend reports), uid, boot id and
//! the SHA-256 of cordon's own binary. Hashing a 20 MB binary on every run
//! would cost more than the rest of `cordon run`, so the file also records
//! the binary's identity (device, inode, size and mtime: an upgrade either
//! replaces the file or rewrites it): while it is unchanged, the stored hash
//! is reused; otherwise the binary is hashed again. ctime is deliberately
//! not part of it: `cordon star run` hard-links the binary into the worker's
//! private dir, which changes ctime on every run. A cache file that is missing,
//! unreadable, malformed, for another key, not conforming, or not owned by
//! this user with mode 0600 is ignored and the suite runs again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_core::{ConformanceReport, ConformanceSuite, SandboxBackend};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// What a cached report is valid for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    pub backend: String,
    pub kernel_release: String,
    pub backend_facts: std::collections::BTreeMap<String, String>,
    pub uid: u32,
    pub boot_id: String,
    pub exe_sha256: String,
}

/// What identifies cordon's binary on disk without reading it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExeIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

impl ExeIdentity {
    fn of(path: &Path) -> std::io::Result<ExeIdentity> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path)?;
        Ok(ExeIdentity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

impl CacheKey {
    /// The key for `backend` on this host. `known` is a previously hashed
    /// binary: its hash is reused when the identity still matches.
    pub fn for_backend(
        backend: &dyn SandboxBackend,
        known: Option<(&ExeIdentity, &str)>,
    ) -> std::io::Result<(CacheKey, ExeIdentity)> {
        let path = std::env::current_exe()?;
        let identity = ExeIdentity::of(&path)?;
        let exe_sha256 = match known {
            Some((id, hash)) if *id == identity => hash.to_string(),
            _ => hex::encode(sha2::Sha256::digest(std::fs::read(&path)?)),
        };
        let key = CacheKey {
            backend: backend.name().to_string(),
            kernel_release: cordon_core::kernel_release(),
            backend_facts: backend.host_facts(),
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            exe_sha256,
        };
        Ok((key, identity))
    }
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    key: CacheKey,
    exe: ExeIdentity,
    report: ConformanceReport,
}

/// Where cache files live: `$XDG_CACHE_HOME/cordon` or `~/.cache/cordon`.
pub fn default_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("cordon"))
}

/// How the last lookup went (for `-v` output and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    Hit,
    Miss,
    Disabled,
}

/// A suite that answers from the cache when it can.
pub struct CachedSuite<S> {
    pub inner: S,
    pub dir: Option<PathBuf>,
    pub recheck: bool,
    pub outcome: std::sync::Mutex<CacheOutcome>,
}

impl<S> CachedSuite<S> {
    pub fn new(inner: S, dir: Option<PathBuf>, recheck: bool) -> Self {
        CachedSuite {
            inner,
            dir,
            recheck,
            outcome: std::sync::Mutex::new(CacheOutcome::Disabled),
        }
    }

    fn file_for(&self, backend: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("conformance-{backend}.json")))
    }
}

/// Reads a cache file that is private to this user and well formed.
fn read_private(path: &Path) -> Option<CacheFile> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "ignoring conformance cache not private to this user");
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str(&text) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring unreadable conformance cache");
            None
        }
    }
}

fn write_private(
    path: &Path,
    key: CacheKey,
    exe: ExeIdentity,
    report: &ConformanceReport,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = path.parent().expect("cache file has a parent");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = dir.join(format!(".tmp-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    let file = CacheFile {
        key,
        exe,
        report: report.clone(),
    };
    f.write_all(serde_json::to_string_pretty(&file)?.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[async_trait::async_trait]
impl<S: ConformanceSuite> ConformanceSuite for CachedSuite<S> {
    async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport {
        let path = self.file_for(backend.name());
        let set = |o| *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = o;
        let cached = path.as_deref().and_then(read_private);
        let known = cached.as_ref().map(|f| (&f.exe, f.key.exe_sha256.as_str()));
        let key = CacheKey::for_backend(backend.as_ref(), known).ok();
        if let (Some(path), Some((key, _))) = (&path, &key) {
            if !self.recheck {
                if let Some(file) = cached.filter(|f| f.key == *key && f.report.conforms()) {
                    set(CacheOutcome::Hit);
                    tracing::debug!(path = %path.display(), "conformance cache hit");
                    return file.report;
                }
            }
            set(CacheOutcome::Miss);
        }
        let report = self.inner.run(backend).await;
        if let (Some(path), Some((key, exe))) = (path, key) {
            if report.conforms() {
                if let Err(e) = write_private(&path, key, exe, &report) {
                    tracing::warn!(path = %path.display(), error = %e, "could not write conformance cache");
                }
            }
        }
        report
    }
}
