//! Stores and services the host provides, as traits with in-memory
//! implementations (for tests and embedders), the persistent stores —
//! [`SqliteStore`] (feature `sqlite`: `sqlite.rs` the store and its
//! packages, `sqlite_grants.rs` grants, secrets and providers, `schema.rs`
//! its migrations) and `PgStore` (feature `postgres`: `pg.rs`, `pg_grants.rs`,
//! `pg_schema.rs`, `pg_config.rs` its URL, TLS and password), both over
//! `records.rs` (the rows and the rules they are read and written by),
//! `seal.rs` (the sealing of secrets), `rows.rs` (the row MACs) and
//! `fs_checks.rs` (the checks of the files they read) — and the
//! notification senders (`senders.rs`).

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod admin;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod fs_checks;
#[cfg(feature = "postgres")]
mod pg;
#[cfg(feature = "postgres")]
mod pg_config;
#[cfg(feature = "postgres")]
mod pg_grants;
#[cfg(feature = "postgres")]
mod pg_schema;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod records;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod rows;
#[cfg(feature = "sqlite")]
mod schema;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod seal;
mod senders;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "sqlite")]
mod sqlite_grants;
#[cfg(feature = "test-cluster")]
pub mod test_cluster;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use admin::{services_of, StoreAdmin};
#[cfg(feature = "postgres")]
pub use pg::{PgOptions, PgStore};
#[cfg(feature = "postgres")]
pub use pg_config::{is_postgres_url, PasswordSource, PgConfig, STORE_URL_ENV};
#[cfg(feature = "postgres")]
pub use pg_schema::Migration;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use records::{GrantRecord, InstallOutcome, PackageRecord, ProviderScope};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use seal::{KeyOrigin, StoreKey, STORE_KEY_ENV};
pub use senders::{
    DeliveryStats, JsonLinesNotifier, LineQueue, QueueFull, QueueLimits, WebhookNotifier,
};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
#[cfg(feature = "test-cluster")]
pub use test_cluster::TestCluster;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use cordon_starlark_protocol::{Notification, Package, Permission, ProviderRequirement};

use crate::grants::{Approval, Grant};
use cordon_egress::IpRange;

/// Error type of the store traits.
pub type StoreError = String;

/// Per-invocation context: who is acting and where. Optional; modules that
/// need a field are absent without it (`provider` needs `user_id`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunContext {
    /// Acting user, for the provider key chain.
    pub user_id: Option<String>,
    /// Channel, for channel-pinned provider keys.
    pub channel_id: Option<String>,
}

impl RunContext {
    /// Context for a user.
    pub fn for_user(user: impl Into<String>) -> Self {
        RunContext {
            user_id: Some(user.into()),
            channel_id: None,
        }
    }

    /// Add a channel.
    pub fn with_channel(mut self, channel: impl Into<String>) -> Self {
        self.channel_id = Some(channel.into());
        self
    }
}

/// Package registrations.
#[async_trait]
pub trait PackageStore: Send + Sync {
    /// Look up a package by id.
    async fn get(&self, id: &str) -> Result<Option<Package>, StoreError>;
}

/// Granted permissions, separate from what manifests request, each with
/// what it approved ([`Grant`]): the host suspends a grant whose package
/// now asks for more.
#[async_trait]
pub trait PermissionStore: Send + Sync {
    /// The grants of a package (revoked ones left out).
    async fn grants_for_package(&self, package_id: &str) -> Result<Vec<Grant>, StoreError>;
}

/// Secrets, namespaced per package.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// The secret `name` of package `package_id`, if set.
    async fn get(&self, package_id: &str, name: &str) -> Result<Option<String>, StoreError>;
}

/// Delivers notifications.
#[async_trait]
pub trait NotificationSender: Send + Sync {
    /// Send one notification (already attributed to its package).
    async fn send(&self, notification: &Notification) -> Result<(), StoreError>;
}

/// An API key that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wrap a key.
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }
    /// The key, for the HTTP `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Where a resolved key came from (bring-your-own-key chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// The acting user's own key.
    User,
    /// The channel's pinned key.
    Channel,
    /// A key configured for the package.
    Package,
    /// The host's default key.
    Host,
}

impl KeySource {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            KeySource::User => "user",
            KeySource::Channel => "channel",
            KeySource::Package => "package",
            KeySource::Host => "host",
        }
    }
}

/// Connection details of an OpenAI-compatible provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Base URL, e.g. `https://api.openai.com/v1` (`/chat/completions` is appended).
    pub base_url: String,
    /// Secret key; never shown to scripts.
    pub api_key: ApiKey,
    /// Default model.
    pub model: String,
}

/// A provider chosen for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedProvider {
    /// Connection details.
    pub config: ProviderConfig,
    /// Which link of the chain supplied it.
    pub source: KeySource,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl ResolvedProvider {
    /// The provider `config` found at `source`, with the model the
    /// package's requirement names, if any.
    pub(crate) fn new(
        mut config: ProviderConfig,
        source: KeySource,
        requirement: &cordon_starlark_protocol::ProviderRequirement,
    ) -> Self {
        if let Some(m) = &requirement.model {
            config.model = m.clone();
        }
        ResolvedProvider { config, source }
    }
}

/// Chooses the provider for a call from (user, channel, package requirement).
#[async_trait]
pub trait ProviderResolver: Send + Sync {
    /// Resolve, or `Ok(None)` when no key is available anywhere.
    async fn resolve(
        &self,
        user_id: &str,
        channel_id: Option<&str>,
        package_id: &str,
        requirement: &ProviderRequirement,
    ) -> Result<Option<ResolvedProvider>, StoreError>;
}

/// In-memory [`PackageStore`].
#[derive(Default)]
pub struct InMemoryPackageStore {
    packages: Mutex<HashMap<String, Package>>,
}

impl InMemoryPackageStore {
    /// Empty store.
    pub fn new() -> Self {
        Self::default()
    }
    /// Insert or replace a package.
    pub fn insert(&self, package: Package) {
        self.packages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(package.id.clone(), package);
    }
}

#[async_trait]
impl PackageStore for InMemoryPackageStore {
    async fn get(&self, id: &str) -> Result<Option<Package>, StoreError> {
        Ok(self
            .packages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned())
    }
}

/// In-memory [`PermissionStore`].
#[derive(Default)]
pub struct InMemoryPermissionStore {
    grants: Mutex<HashMap<String, BTreeMap<Permission, Grant>>>,
    private: Mutex<HashMap<String, Vec<IpRange>>>,
}

impl InMemoryPermissionStore {
    /// Empty store: nothing granted.
    pub fn new() -> Self {
        Self::default()
    }
    /// Grants a permission that approves whatever the package asks
    /// ([`Grant::unbound`]): for a quick trial, or an embedder that checks
    /// manifests itself. [`InMemoryPermissionStore::grant_approving`] binds
    /// it to a manifest instead.
    pub fn grant(&self, package_id: &str, permission: Permission) {
        lock(&self.grants)
            .entry(package_id.to_owned())
            .or_default()
            .insert(permission, Grant::unbound(permission));
    }
    /// Grants a permission that approves `package`'s manifest as it is
    /// now: a later version that reaches more is suspended.
    pub fn grant_approving(
        &self,
        package: &Package,
        permission: Permission,
    ) -> Result<(), StoreError> {
        let approval = Approval::of(&package.manifest)?;
        lock(&self.grants)
            .entry(package.id.clone())
            .or_default()
            .insert(
                permission,
                Grant {
                    permission,
                    approval: Some(approval),
                    private: Vec::new(),
                },
            );
        Ok(())
    }
    /// Lets the package's `http` targets be in or resolve into `range`, a
    /// loopback, private or link-local range (what `--allow-private` is
    /// for an installed package's grant).
    pub fn allow_private(&self, package_id: &str, range: IpRange) {
        lock(&self.private)
            .entry(package_id.to_owned())
            .or_default()
            .push(range);
    }
    /// Revoke a permission.
    pub fn revoke(&self, package_id: &str, permission: Permission) {
        if let Some(set) = lock(&self.grants).get_mut(package_id) {
            set.remove(&permission);
        }
    }
}

#[async_trait]
impl PermissionStore for InMemoryPermissionStore {
    async fn grants_for_package(&self, package_id: &str) -> Result<Vec<Grant>, StoreError> {
        let private = lock(&self.private)
            .get(package_id)
            .cloned()
            .unwrap_or_default();
        Ok(lock(&self.grants)
            .get(package_id)
            .map(|s| {
                s.values()
                    .cloned()
                    .map(|mut g| {
                        if g.permission == Permission::ApiHttp {
                            g.private.extend(private.iter().copied());
                        }
                        g
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// In-memory [`SecretStore`].
#[derive(Default)]
pub struct InMemorySecretStore {
    secrets: Mutex<HashMap<(String, String), String>>,
}

impl InMemorySecretStore {
    /// Empty store.
    pub fn new() -> Self {
        Self::default()
    }
    /// Set a secret in a package's namespace.
    pub fn set(&self, package_id: &str, name: &str, value: &str) {
        self.secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((package_id.to_owned(), name.to_owned()), value.to_owned());
    }
}

#[async_trait]
impl SecretStore for InMemorySecretStore {
    async fn get(&self, package_id: &str, name: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(package_id.to_owned(), name.to_owned()))
            .cloned())
    }
}

/// [`NotificationSender`] that records what it was given.
#[derive(Default, Clone)]
pub struct RecordingNotifier {
    sent: Arc<Mutex<Vec<Notification>>>,
}

impl RecordingNotifier {
    /// Empty recorder.
    pub fn new() -> Self {
        Self::default()
    }
    /// Everything sent so far.
    pub fn sent(&self) -> Vec<Notification> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait]
impl NotificationSender for RecordingNotifier {
    async fn send(&self, notification: &Notification) -> Result<(), StoreError> {
        self.sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(notification.clone());
        Ok(())
    }
}

/// In-memory [`ProviderResolver`] implementing the bring-your-own-key chain
/// user → channel → package → host default.
#[derive(Default)]
pub struct InMemoryProviderResolver {
    user: Mutex<HashMap<String, ProviderConfig>>,
    channel: Mutex<HashMap<String, ProviderConfig>>,
    package: Mutex<HashMap<String, ProviderConfig>>,
    host: Mutex<Option<ProviderConfig>>,
}

impl InMemoryProviderResolver {
    /// No keys anywhere.
    pub fn new() -> Self {
        Self::default()
    }
    /// Set a user's key.
    pub fn set_user(&self, user_id: &str, cfg: ProviderConfig) {
        lock(&self.user).insert(user_id.to_owned(), cfg);
    }
    /// Set a channel's key.
    pub fn set_channel(&self, channel_id: &str, cfg: ProviderConfig) {
        lock(&self.channel).insert(channel_id.to_owned(), cfg);
    }
    /// Set a package's key.
    pub fn set_package(&self, package_id: &str, cfg: ProviderConfig) {
        lock(&self.package).insert(package_id.to_owned(), cfg);
    }
    /// Set the host default.
    pub fn set_host_default(&self, cfg: ProviderConfig) {
        *lock(&self.host) = Some(cfg);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl ProviderResolver for InMemoryProviderResolver {
    async fn resolve(
        &self,
        user_id: &str,
        channel_id: Option<&str>,
        package_id: &str,
        requirement: &ProviderRequirement,
    ) -> Result<Option<ResolvedProvider>, StoreError> {
        let found = if let Some(c) = lock(&self.user).get(user_id) {
            Some((c.clone(), KeySource::User))
        } else if let Some(c) = channel_id.and_then(|ch| lock(&self.channel).get(ch).cloned()) {
            Some((c, KeySource::Channel))
        } else if let Some(c) = lock(&self.package).get(package_id) {
            Some((c.clone(), KeySource::Package))
        } else {
            lock(&self.host).clone().map(|c| (c, KeySource::Host))
        };
        Ok(found.map(|(mut config, source)| {
            if let Some(m) = &requirement.model {
                config.model = m.clone();
            }
            ResolvedProvider { config, source }
        }))
    }
}
