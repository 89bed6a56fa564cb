//! What a [`PgStore`]'s packages are given: grants, secrets (sealed) and
//! providers (the key sealed, the row MACed). The rules are
//! `records.rs`'s, as for the SQLite store; this file moves the rows, each
//! call within the store's deadline.

use async_trait::async_trait;
use cordon_egress::IpRange;
use tokio_postgres::GenericClient;

use super::pg::{pg_err, PgStore};
use super::records::{now, GrantRow, ProviderRow, ProviderScope, GRANT_COLUMNS};
use super::{
    PermissionStore, ProviderConfig, ProviderResolver, ResolvedProvider, SecretStore, StoreError,
};
use crate::grants::Grant;
use cordon_starlark_protocol::{Permission, ProviderRequirement};

fn grant_of(r: &tokio_postgres::Row) -> GrantRow {
    GrantRow {
        package_id: r.get(0),
        permission: r.get(1),
        granted_by: r.get(2),
        granted_at: r.get(3),
        revoked_by: r.get(4),
        revoked_at: r.get(5),
        approval: r.get(6),
        mac: r.get(7),
    }
}

impl PgStore {
    async fn write_grant(
        c: &(impl GenericClient + Sync),
        row: &GrantRow,
    ) -> Result<(), StoreError> {
        c.execute(
            &format!(
                "INSERT INTO grants ({GRANT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (package_id, permission) DO UPDATE SET
                   granted_by = $3, granted_at = $4, revoked_by = $5, revoked_at = $6,
                   approval = $7, mac = $8"
            ),
            &[
                &row.package_id,
                &row.permission,
                &row.granted_by,
                &row.granted_at,
                &row.revoked_by,
                &row.revoked_at,
                &row.approval,
                &row.mac,
            ],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    /// The package's grant rows that are not revoked, unverified.
    pub(super) async fn grant_rows(
        c: &(impl GenericClient + Sync),
        id: &str,
    ) -> Result<Vec<GrantRow>, StoreError> {
        Ok(c.query(
            &format!(
                "SELECT {GRANT_COLUMNS} FROM grants
                     WHERE package_id = $1 AND revoked_at IS NULL ORDER BY permission"
            ),
            &[&id],
        )
        .await
        .map_err(pg_err)?
        .iter()
        .map(grant_of)
        .collect())
    }

    /// Grants `permissions` to an installed package, as
    /// [`super::SqliteStore::grant`] does. All or nothing.
    pub async fn grant(
        &self,
        id: &str,
        permissions: &[Permission],
        by: &str,
        private: &[IpRange],
    ) -> Result<(), StoreError> {
        self.within("granting", async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_err)?;
            // The package row is locked, so an upgrade cannot slip between
            // reading the manifest this grant approves and the grant.
            tx.execute("SELECT 1 FROM packages WHERE id = $1 FOR UPDATE", &[&id])
                .await
                .map_err(pg_err)?;
            let pkg = self.installed(&*tx, id).await?;
            for row in self.keys.grant_rows(&pkg, permissions, by, private)? {
                Self::write_grant(&*tx, &row).await?;
            }
            tx.commit().await.map_err(pg_err)
        })
        .await
    }

    /// Revokes `permission` (the row kept, with who and when); false when
    /// it was not granted.
    pub async fn revoke(
        &self,
        id: &str,
        permission: Permission,
        by: &str,
    ) -> Result<bool, StoreError> {
        self.within("revoking", async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_err)?;
            let row = tx
                .query_opt(
                    &format!(
                        "SELECT {GRANT_COLUMNS} FROM grants
                         WHERE package_id = $1 AND permission = $2 AND revoked_at IS NULL
                         FOR UPDATE"
                    ),
                    &[&id, &permission.as_str()],
                )
                .await
                .map_err(pg_err)?;
            let Some(row) = row else {
                return Ok(false);
            };
            Self::write_grant(&*tx, &self.keys.sign_grant(grant_of(&row).revoked(by))).await?;
            tx.commit().await.map_err(pg_err)?;
            Ok(true)
        })
        .await
    }

    /// Sets a secret of an installed package (sealed before it leaves
    /// this process).
    pub async fn set_secret(&self, id: &str, name: &str, value: &str) -> Result<(), StoreError> {
        let sealed = self.keys.seal_secret(id, name, value)?;
        self.within("setting a secret", async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_err)?;
            self.installed(&*tx, id).await?;
            tx.execute(
                "INSERT INTO secrets (package_id, name, sealed, updated_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (package_id, name) DO UPDATE SET sealed = $3, updated_at = $4",
                &[&id, &name, &sealed, &now()],
            )
            .await
            .map_err(pg_err)?;
            tx.commit().await.map_err(pg_err)
        })
        .await
    }

    /// Removes a secret; false when there was none.
    pub async fn remove_secret(&self, id: &str, name: &str) -> Result<bool, StoreError> {
        self.within("removing a secret", async {
            let client = self.client().await?;
            let n = client
                .execute(
                    "DELETE FROM secrets WHERE package_id = $1 AND name = $2",
                    &[&id, &name],
                )
                .await
                .map_err(pg_err)?;
            Ok(n > 0)
        })
        .await
    }

    /// Sets the provider for `scope` (its key sealed, its row MACed).
    pub async fn set_provider(
        &self,
        scope: &ProviderScope,
        cfg: &ProviderConfig,
    ) -> Result<(), StoreError> {
        let r = self.keys.provider_row(scope, cfg)?;
        self.within("setting a provider", async {
            let client = self.client().await?;
            client
                .execute(
                    "INSERT INTO providers (scope, scope_id, base_url, model, sealed_key,
                                            updated_at, mac)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (scope, scope_id) DO UPDATE SET
                       base_url = $3, model = $4, sealed_key = $5, updated_at = $6, mac = $7",
                    &[
                        &r.scope,
                        &r.scope_id,
                        &r.base_url,
                        &r.model,
                        &r.sealed_key,
                        &r.updated_at,
                        &r.mac,
                    ],
                )
                .await
                .map_err(pg_err)?;
            Ok(())
        })
        .await
    }

    async fn provider(
        c: &(impl GenericClient + Sync),
        scope: &ProviderScope,
    ) -> Result<Option<ProviderRow>, StoreError> {
        let (kind, id) = scope.parts();
        let row = c
            .query_opt(
                "SELECT base_url, model, sealed_key, updated_at, mac FROM providers
                 WHERE scope = $1 AND scope_id = $2",
                &[&kind, &id],
            )
            .await
            .map_err(pg_err)?;
        Ok(row.map(|r| ProviderRow {
            scope: kind.to_owned(),
            scope_id: id.to_owned(),
            base_url: r.get(0),
            model: r.get(1),
            sealed_key: r.get(2),
            updated_at: r.get(3),
            mac: r.get(4),
        }))
    }
}

#[async_trait]
impl PermissionStore for PgStore {
    async fn grants_for_package(&self, package_id: &str) -> Result<Vec<Grant>, StoreError> {
        let rows = self
            .within("reading grants", async {
                let client = self.client().await?;
                Self::grant_rows(&**client, package_id).await
            })
            .await?;
        self.keys.grants(package_id, rows)
    }
}

#[async_trait]
impl SecretStore for PgStore {
    async fn get(&self, package_id: &str, name: &str) -> Result<Option<String>, StoreError> {
        let sealed: Option<Vec<u8>> = self
            .within("reading a secret", async {
                let client = self.client().await?;
                Ok(client
                    .query_opt(
                        "SELECT sealed FROM secrets WHERE package_id = $1 AND name = $2",
                        &[&package_id, &name],
                    )
                    .await
                    .map_err(pg_err)?
                    .map(|r| r.get(0)))
            })
            .await?;
        sealed
            .map(|s| self.keys.open_secret(package_id, name, &s))
            .transpose()
    }
}

#[async_trait]
impl ProviderResolver for PgStore {
    async fn resolve(
        &self,
        user_id: &str,
        channel_id: Option<&str>,
        package_id: &str,
        requirement: &ProviderRequirement,
    ) -> Result<Option<ResolvedProvider>, StoreError> {
        let found = self
            .within("resolving a provider", async {
                let client = self.client().await?;
                for (scope, source) in ProviderScope::chain(user_id, channel_id, package_id) {
                    if let Some(row) = Self::provider(&**client, &scope).await? {
                        return Ok(Some((row, source)));
                    }
                }
                Ok(None)
            })
            .await?;
        match found {
            None => Ok(None),
            Some((row, source)) => {
                let config = self.keys.verified_provider(row)?;
                Ok(Some(ResolvedProvider::new(config, source, requirement)))
            }
        }
    }
}
