//! [`StoreAdmin`]: the operator's commands on a persistent store, one
//! trait for [`super::SqliteStore`] and `PgStore`, so `cordon star` and
//! the shared store tests drive either the same way.

use std::sync::Arc;

use async_trait::async_trait;
use cordon_egress::IpRange;

use super::records::{InstallOutcome, PackageRecord, ProviderScope};
use super::{
    PackageStore, PermissionStore, ProviderConfig, ProviderResolver, SecretStore, StoreError,
};
use crate::broker::Services;
use cordon_starlark_protocol::{Package, Permission};

/// A persistent store as the operator manages it: packages installed and
/// upgraded, permissions granted and revoked (with who and when), secrets
/// and provider keys set (sealed). Every method is one transaction;
/// every row it reads is verified (a row changed outside cordon is an
/// error, never skipped). The host reads the same store through the
/// traits it extends.
#[async_trait]
pub trait StoreAdmin: PackageStore + PermissionStore + SecretStore + ProviderResolver {
    /// Records `pkg` (its manifest, sources and their hash). A changed
    /// manifest or changed sources over an installed package need
    /// `upgrade`, as does replacing a row changed outside cordon; grants
    /// and secrets are kept across an upgrade (a grant whose package now
    /// reaches more is suspended: [`crate::grant_status`]).
    async fn install(&self, pkg: &Package, upgrade: bool) -> Result<InstallOutcome, StoreError>;

    /// Every installed package, by id.
    async fn packages(&self) -> Result<Vec<PackageRecord>, StoreError>;

    /// One installed package, or `None`.
    async fn package_record(&self, id: &str) -> Result<Option<PackageRecord>, StoreError>;

    /// Grants `permissions` to an installed package, approving its
    /// manifest as it is now (and, for `api.http`, the private ranges in
    /// `private`). All or nothing.
    async fn grant(
        &self,
        id: &str,
        permissions: &[Permission],
        by: &str,
        private: &[IpRange],
    ) -> Result<(), StoreError>;

    /// Revokes `permission` (kept, with who revoked it and when). False
    /// when it was not granted.
    async fn revoke(&self, id: &str, permission: Permission, by: &str) -> Result<bool, StoreError>;

    /// Sets a secret of an installed package (sealed).
    async fn set_secret(&self, id: &str, name: &str, value: &str) -> Result<(), StoreError>;

    /// Removes a secret; false when there was none.
    async fn remove_secret(&self, id: &str, name: &str) -> Result<bool, StoreError>;

    /// Sets the provider for `scope` (its key sealed, its row MACed).
    async fn set_provider(
        &self,
        scope: &ProviderScope,
        cfg: &ProviderConfig,
    ) -> Result<(), StoreError>;

    /// The schema version of the database: the number of migrations
    /// applied (the same numbers on both backends).
    async fn schema_version(&self) -> Result<usize, StoreError>;

    /// The host's services over this store: packages, grants, secrets and
    /// providers all from it (no notifier).
    fn services(self: Arc<Self>) -> Services;
}

/// [`Services`] whose packages, grants, secrets and providers all come
/// from `store`.
pub fn services_of<S>(store: Arc<S>) -> Services
where
    S: PackageStore + PermissionStore + SecretStore + ProviderResolver + 'static,
{
    let mut services = Services::new(store.clone(), store.clone());
    services.secrets = Some(store.clone());
    services.providers = Some(store);
    services
}

/// `StoreAdmin` for a store whose inherent methods of the same names do
/// the work (`await`ed when the second argument says so).
macro_rules! store_admin {
    ($store:ty $(, $aw:ident)?) => {
        #[async_trait]
        impl StoreAdmin for $store {
            async fn install(
                &self,
                pkg: &Package,
                upgrade: bool,
            ) -> Result<InstallOutcome, StoreError> {
                <$store>::install(self, pkg, upgrade)$(.$aw)?
            }
            async fn packages(&self) -> Result<Vec<PackageRecord>, StoreError> {
                <$store>::packages(self)$(.$aw)?
            }
            async fn package_record(&self, id: &str) -> Result<Option<PackageRecord>, StoreError> {
                <$store>::package_record(self, id)$(.$aw)?
            }
            async fn grant(
                &self,
                id: &str,
                permissions: &[Permission],
                by: &str,
                private: &[IpRange],
            ) -> Result<(), StoreError> {
                <$store>::grant(self, id, permissions, by, private)$(.$aw)?
            }
            async fn revoke(
                &self,
                id: &str,
                permission: Permission,
                by: &str,
            ) -> Result<bool, StoreError> {
                <$store>::revoke(self, id, permission, by)$(.$aw)?
            }
            async fn set_secret(&self, id: &str, name: &str, value: &str) -> Result<(), StoreError> {
                <$store>::set_secret(self, id, name, value)$(.$aw)?
            }
            async fn remove_secret(&self, id: &str, name: &str) -> Result<bool, StoreError> {
                <$store>::remove_secret(self, id, name)$(.$aw)?
            }
            async fn set_provider(
                &self,
                scope: &ProviderScope,
                cfg: &ProviderConfig,
            ) -> Result<(), StoreError> {
                <$store>::set_provider(self, scope, cfg)$(.$aw)?
            }
            async fn schema_version(&self) -> Result<usize, StoreError> {
                <$store>::schema_version(self)$(.$aw)?
            }
            fn services(self: Arc<Self>) -> Services {
                services_of(self)
            }
        }
    };
}

#[cfg(feature = "sqlite")]
store_admin!(super::SqliteStore);
#[cfg(feature = "postgres")]
store_admin!(super::PgStore, await);
