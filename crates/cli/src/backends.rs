//! Backend names the command line accepts.

use std::sync::Arc;

use cordon_core::SandboxBackend;

/// Names accepted by `--backend`.
pub const NAMES: &[&str] = &["native", "linux", "macos", "noop"];

/// Names accepted by `--tier` (the Linux backend's tiers).
pub const TIERS: &[&str] = &["namespaces", "landlock"];

/// The backend for `name` (with `--tier`'s value); `native` is the host
/// OS's own.
pub fn by_name(name: &str, tier: Option<&str>) -> Result<Arc<dyn SandboxBackend>, String> {
    let linux = name == "linux" || (name == "native" && !cfg!(target_os = "macos"));
    if let Some(t) = tier {
        if !linux {
            return Err(format!(
                "--tier {t}: only the linux backend has tiers (backend `{name}` here)"
            ));
        }
        let tier = cordon_backend_linux::Tier::parse(t)
            .ok_or_else(|| format!("unknown tier `{t}`; choose one of: {}", TIERS.join(", ")))?;
        return Ok(Arc::new(
            cordon_backend_linux::LinuxBackend::new().with_tier(tier),
        ));
    }
    match name {
        "native" => Ok(native()),
        "linux" => Ok(Arc::new(cordon_backend_linux::LinuxBackend::new())),
        "macos" => Ok(Arc::new(cordon_backend_macos::MacosBackend::default())),
        "noop" => Ok(Arc::new(cordon_backend_noop::NoopBackend)),
        other => Err(format!(
            "unknown backend `{other}`; choose one of: {}",
            NAMES.join(", ")
        )),
    }
}

/// The host's native backend.
pub fn native() -> Arc<dyn SandboxBackend> {
    if cfg!(target_os = "macos") {
        Arc::new(cordon_backend_macos::MacosBackend::default())
    } else {
        Arc::new(cordon_backend_linux::LinuxBackend::new())
    }
}
