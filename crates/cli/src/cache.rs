//! The per-boot conformance cache behind `cordon run`.
//!
//! Running P1–P7 before every `cordon run` costs a fraction of a second; a
//! conforming report is cached for this boot, keyed by backend, kernel
//! release, Landlock ABI (or whatever the backend reports), uid, boot id and
//! the SHA-256 of cordon's own binary. A cache file that is missing,
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

impl CacheKey {
    pub fn for_backend(backend: &dyn SandboxBackend) -> std::io::Result<CacheKey> {
        let exe = std::fs::read(std::env::current_exe()?)?;
        Ok(CacheKey {
            backend: backend.name().to_string(),
            kernel_release: cordon_core::kernel_release(),
            backend_facts: backend.host_facts(),
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            exe_sha256: hex::encode(sha2::Sha256::digest(&exe)),
        })
    }
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    key: CacheKey,
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

fn read_trusted(path: &Path, key: &CacheKey) -> Option<ConformanceReport> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "ignoring conformance cache not private to this user");
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let file: CacheFile = match serde_json::from_str(&text) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring unreadable conformance cache");
            return None;
        }
    };
    (file.key == *key && file.report.conforms()).then_some(file.report)
}

fn write_private(path: &Path, key: CacheKey, report: &ConformanceReport) -> std::io::Result<()> {
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
        let key = CacheKey::for_backend(backend.as_ref()).ok();
        let set = |o| *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = o;
        if let (Some(path), Some(key)) = (&path, &key) {
            if !self.recheck {
                if let Some(report) = read_trusted(path, key) {
                    set(CacheOutcome::Hit);
                    tracing::debug!(path = %path.display(), "conformance cache hit");
                    return report;
                }
            }
            set(CacheOutcome::Miss);
        }
        let report = self.inner.run(backend).await;
        if let (Some(path), Some(key)) = (path, key) {
            if report.conforms() {
                if let Err(e) = write_private(&path, key, &report) {
                    tracing::warn!(path = %path.display(), error = %e, "could not write conformance cache");
                }
            }
        }
        report
    }
}
