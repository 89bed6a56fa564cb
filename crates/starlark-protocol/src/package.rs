//! The package model: registrations, manifests, permissions, and the
//! `load()` path rule. A [`Package`] crosses the pipe whole in
//! `load_package`; reading one from disk is the host's
//! (`crates/starlark-host/src/package_load.rs`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A capability a package may request and a host may grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Permission {
    /// `secrets.read`: the `secrets` module.
    #[serde(rename = "secrets.read")]
    SecretsRead,
    /// `notifications.send`: the `notifications` module.
    #[serde(rename = "notifications.send")]
    NotificationsSend,
    /// `api.http`: the `http` module.
    #[serde(rename = "api.http")]
    ApiHttp,
    /// `provider.complete`: the `provider` module.
    #[serde(rename = "provider.complete")]
    ProviderComplete,
    /// `db.read`: reserved, no module yet.
    #[serde(rename = "db.read")]
    DbRead,
    /// `db.write`: reserved, no module yet.
    #[serde(rename = "db.write")]
    DbWrite,
}

impl Permission {
    /// Every permission, in a stable order.
    pub const ALL: [Permission; 6] = [
        Permission::SecretsRead,
        Permission::NotificationsSend,
        Permission::ApiHttp,
        Permission::ProviderComplete,
        Permission::DbRead,
        Permission::DbWrite,
    ];

    /// The permission's wire name, e.g. `api.http`.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::SecretsRead => "secrets.read",
            Permission::NotificationsSend => "notifications.send",
            Permission::ApiHttp => "api.http",
            Permission::ProviderComplete => "provider.complete",
            Permission::DbRead => "db.read",
            Permission::DbWrite => "db.write",
        }
    }

    /// Parse a wire name.
    pub fn parse(s: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lifecycle state of a registration. Only [`PackageStatus::Active`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PackageStatus {
    /// Installed and enabled.
    #[default]
    Active,
    /// Installed but switched off by an operator.
    Disabled,
    /// Waiting for review.
    Pending,
}

/// Execution tier of a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PackageTier {
    /// Runs in the Starlark interpreter (`cordon-starlark`).
    #[default]
    Starlark,
    /// Runs as a sandboxed native process (not handled here).
    Native,
}

/// What a package needs from an LLM provider (`requires_provider`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ProviderRequirement {
    /// Provider kind, e.g. `openai` (any OpenAI-compatible API).
    #[serde(default)]
    pub kind: Option<String>,
    /// Preferred model.
    #[serde(default)]
    pub model: Option<String>,
}

/// A package's manifest (`package.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Package id, e.g. `hello`.
    pub id: String,
    /// Package version.
    #[serde(default = "default_version")]
    pub version: String,
    /// Entry script, relative to the package directory.
    #[serde(default = "default_script")]
    pub script: String,
    /// Human description.
    #[serde(default)]
    pub description: Option<String>,
    /// Requested permissions (granted separately by the host's
    /// `PermissionStore`).
    #[serde(default)]
    pub permissions: Vec<Permission>,
    /// Allowed network destinations for `http`: `host`, `host:port`,
    /// `*.example.com`, or `http://host[:port]` to also allow plain HTTP.
    #[serde(default)]
    pub network_access: Vec<String>,
    /// Provider requirement; the `provider` module is absent without it.
    #[serde(default)]
    pub requires_provider: Option<ProviderRequirement>,
    /// Credentials the host sets on the package's `http` requests to the
    /// hosts each names, from the package's secret of that name: the
    /// script uses the key without reading it (no `secrets.read`). The
    /// operator approves them with the `api.http` grant.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub credentials: std::collections::BTreeMap<String, CredentialBinding>,
}

/// One `[credentials.NAME]` of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialBinding {
    /// The hosts (exact names, HTTPS) the header is set toward.
    pub hosts: Vec<String>,
    /// The header, `{}` standing for the value
    /// (`Authorization: Bearer {}`).
    pub header: String,
}

fn default_version() -> String {
    "0.0.0".to_owned()
}
fn default_script() -> String {
    "main.star".to_owned()
}

impl Manifest {
    /// A manifest with no permissions for a single script.
    pub fn minimal(id: impl Into<String>, script: impl Into<String>) -> Self {
        Manifest {
            id: id.into(),
            version: default_version(),
            script: script.into(),
            description: None,
            permissions: Vec::new(),
            network_access: Vec::new(),
            requires_provider: None,
            credentials: std::collections::BTreeMap::new(),
        }
    }

    /// Whether the manifest requests `p`.
    pub fn requests(&self, p: Permission) -> bool {
        self.permissions.contains(&p)
    }
}

/// A package registration: identity, status, tier, manifest and sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// Package id (the secrets namespace and the notification attribution).
    pub id: String,
    /// Version.
    pub version: String,
    /// Only `Active` packages run.
    pub status: PackageStatus,
    /// Only `Starlark` packages run here.
    pub tier: PackageTier,
    /// The manifest.
    pub manifest: Manifest,
    /// Source files by path relative to the package root (`/` separated).
    /// `load()` can only reach files in this map.
    pub sources: BTreeMap<String, String>,
}

impl Package {
    /// Build an active Starlark package from a manifest and its sources.
    pub fn new(manifest: Manifest, sources: BTreeMap<String, String>) -> Self {
        Package {
            id: manifest.id.clone(),
            version: manifest.version.clone(),
            status: PackageStatus::Active,
            tier: PackageTier::Starlark,
            manifest,
            sources,
        }
    }

    /// A package made of one script with no permissions.
    pub fn from_script(id: impl Into<String>, source: impl Into<String>) -> Self {
        let manifest = Manifest::minimal(id, "main.star");
        let mut sources = BTreeMap::new();
        sources.insert("main.star".to_owned(), source.into());
        Package::new(manifest, sources)
    }

    /// SHA-256 over every source path and content (the cache key's base).
    pub fn script_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.manifest.script.as_bytes());
        h.update([0]);
        for (path, src) in &self.sources {
            h.update((path.len() as u64).to_le_bytes());
            h.update(path.as_bytes());
            h.update((src.len() as u64).to_le_bytes());
            h.update(src.as_bytes());
        }
        hex::encode(h.finalize())
    }
}

/// Normalise a `load()` path relative to the package root. Returns `None`
/// for absolute paths, labels (`//x`, `@repo`, `:x`), backslashes, or any
/// path whose `..` would leave the package.
pub fn normalize_load_path(path: &str) -> Option<String> {
    if path.is_empty()
        || path.starts_with('/')
        || path.starts_with('@')
        || path.contains(':')
        || path.contains('\\')
        || path.contains('\0')
    {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_paths_cannot_escape() {
        assert_eq!(
            normalize_load_path("lib/a.star").as_deref(),
            Some("lib/a.star")
        );
        assert_eq!(
            normalize_load_path("./lib/../a.star").as_deref(),
            Some("a.star")
        );
        assert_eq!(normalize_load_path("../a.star"), None);
        assert_eq!(normalize_load_path("lib/../../a.star"), None);
        assert_eq!(normalize_load_path("/etc/passwd"), None);
        assert_eq!(normalize_load_path("//pkg:a.star"), None);
        assert_eq!(normalize_load_path("@repo//a.star"), None);
    }

    #[test]
    fn script_hash_changes_with_sources() {
        let a = Package::from_script("a", "x = 1");
        let b = Package::from_script("a", "x = 2");
        assert_ne!(a.script_hash(), b.script_hash());
        assert_eq!(
            a.script_hash(),
            Package::from_script("a", "x = 1").script_hash()
        );
    }
}
