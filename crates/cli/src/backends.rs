//! Backend names the command line accepts.

use std::sync::Arc;

use cordon_core::SandboxBackend;

/// Names accepted by `--backend`.
pub const NAMES: &[&str] = &["native", "linux", "macos", "noop"];

/// The backend for `name`; `native` is the host OS's own.
pub fn by_name(name: &str) -> Result<Arc<dyn SandboxBackend>, String> {
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
