//! What a [`SqliteStore`]'s packages are given: grants (each bound to the
//! manifest it approved, and authenticated), secrets (sealed to their row)
//! and providers (the key sealed, the row authenticated). The rules are
//! `records.rs`'s; this file moves the rows.

use async_trait::async_trait;
use cordon_egress::IpRange;
use rusqlite::{params, Connection, OptionalExtension};

use super::records::{GrantRow, ProviderRow, ProviderScope, GRANT_COLUMNS};
use super::sqlite::{db_err, SqliteStore};
use super::{
    PermissionStore, ProviderConfig, ProviderResolver, ResolvedProvider, SecretStore, StoreError,
};
use crate::grants::Grant;
use cordon_starlark_protocol::{Permission, ProviderRequirement};

fn grant_from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<GrantRow> {
    Ok(GrantRow {
        package_id: r.get(0)?,
        permission: r.get(1)?,
        granted_by: r.get(2)?,
        granted_at: r.get(3)?,
        revoked_by: r.get(4)?,
        revoked_at: r.get(5)?,
        approval: r.get(6)?,
        mac: r.get(7)?,
    })
}

impl SqliteStore {
    fn write_grant(conn: &Connection, row: &GrantRow) -> Result<(), StoreError> {
        conn.execute(
            &format!(
                "INSERT INTO grants ({GRANT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (package_id, permission) DO UPDATE SET granted_by = ?3,
                   granted_at = ?4, revoked_by = ?5, revoked_at = ?6, approval = ?7, mac = ?8"
            ),
            params![
                row.package_id,
                row.permission,
                row.granted_by,
                row.granted_at,
                row.revoked_by,
                row.revoked_at,
                row.approval,
                row.mac
            ],
        )
        .map_err(db_err)?;
        Ok(())
    }

    /// The package's grant rows that are not revoked, unverified.
    pub(super) fn grant_rows(conn: &Connection, id: &str) -> Result<Vec<GrantRow>, StoreError> {
        let mut q = conn
            .prepare(&format!(
                "SELECT {GRANT_COLUMNS} FROM grants
                 WHERE package_id = ?1 AND revoked_at IS NULL ORDER BY permission"
            ))
            .map_err(db_err)?;
        let rows = q
            .query_map(params![id], grant_from_sql)
            .map_err(db_err)?
            .collect::<Result<_, _>>()
            .map_err(db_err)?;
        Ok(rows)
    }

    /// Grants `permissions` to an installed package, recording `by` and
    /// what each approves: the package's manifest as it is now, and, for
    /// `api.http`, the loopback, private or link-local ranges in
    /// `private` — which must hold every such address its targets name
    /// (an IP literal, `localhost`), since the manifest alone never
    /// approves one. A permission the manifest does not request is refused:
    /// granting it would approve a later version's request unseen. All or
    /// nothing: one refused permission grants none.
    pub fn grant(
        &self,
        id: &str,
        permissions: &[Permission],
        by: &str,
        private: &[IpRange],
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db_err)?;
        let pkg = self.installed(&tx, id)?;
        for row in self.keys.grant_rows(&pkg, permissions, by, private)? {
            Self::write_grant(&tx, &row)?;
        }
        tx.commit().map_err(db_err)
    }

    /// Revokes `permission` (kept in the table with who revoked it and
    /// when). False when it was not granted. A grant row changed outside
    /// cordon can be revoked: what is left of it grants nothing.
    pub fn revoke(&self, id: &str, permission: Permission, by: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        self.installed(&conn, id)?;
        let row = conn
            .query_row(
                &format!(
                    "SELECT {GRANT_COLUMNS} FROM grants
                     WHERE package_id = ?1 AND permission = ?2 AND revoked_at IS NULL"
                ),
                params![id, permission.as_str()],
                grant_from_sql,
            )
            .optional()
            .map_err(db_err)?;
        let Some(row) = row else {
            return Ok(false);
        };
        Self::write_grant(&conn, &self.keys.sign_grant(row.revoked(by)))?;
        Ok(true)
    }

    /// Sets a secret of an installed package (sealed).
    pub fn set_secret(&self, id: &str, name: &str, value: &str) -> Result<(), StoreError> {
        let sealed = self.keys.seal_secret(id, name, value)?;
        let conn = self.conn();
        self.installed(&conn, id)?;
        conn.execute(
            "INSERT INTO secrets (package_id, name, sealed, updated_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (package_id, name) DO UPDATE SET sealed = ?3, updated_at = ?4",
            params![id, name, sealed, super::records::now()],
        )
        .map_err(db_err)?;
        Ok(())
    }

    /// Removes a secret; false when there was none.
    pub fn remove_secret(&self, id: &str, name: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        self.installed(&conn, id)?;
        let n = conn
            .execute(
                "DELETE FROM secrets WHERE package_id = ?1 AND name = ?2",
                params![id, name],
            )
            .map_err(db_err)?;
        Ok(n > 0)
    }

    /// Sets the provider for `scope` (its key sealed, the row MACed: its
    /// URL decides where the key is sent).
    pub fn set_provider(
        &self,
        scope: &ProviderScope,
        cfg: &ProviderConfig,
    ) -> Result<(), StoreError> {
        let r = self.keys.provider_row(scope, cfg)?;
        self.conn()
            .execute(
                "INSERT INTO providers (scope, scope_id, base_url, model, sealed_key, updated_at, mac)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (scope, scope_id) DO UPDATE SET
                   base_url = ?3, model = ?4, sealed_key = ?5, updated_at = ?6, mac = ?7",
                params![r.scope, r.scope_id, r.base_url, r.model, r.sealed_key, r.updated_at, r.mac],
            )
            .map_err(db_err)?;
        Ok(())
    }

    fn provider(&self, scope: &ProviderScope) -> Result<Option<ProviderConfig>, StoreError> {
        let (kind, id) = scope.parts();
        let row = self
            .conn()
            .query_row(
                "SELECT base_url, model, sealed_key, updated_at, mac FROM providers
                 WHERE scope = ?1 AND scope_id = ?2",
                params![kind, id],
                |r| {
                    Ok(ProviderRow {
                        scope: kind.to_owned(),
                        scope_id: id.to_owned(),
                        base_url: r.get(0)?,
                        model: r.get(1)?,
                        sealed_key: r.get(2)?,
                        updated_at: r.get(3)?,
                        mac: r.get(4)?,
                    })
                },
            )
            .optional()
            .map_err(db_err)?;
        row.map(|r| self.keys.verified_provider(r)).transpose()
    }
}

#[async_trait]
impl PermissionStore for SqliteStore {
    async fn grants_for_package(&self, package_id: &str) -> Result<Vec<Grant>, StoreError> {
        let rows = Self::grant_rows(&self.conn(), package_id)?;
        self.keys.grants(package_id, rows)
    }
}

#[async_trait]
impl SecretStore for SqliteStore {
    async fn get(&self, package_id: &str, name: &str) -> Result<Option<String>, StoreError> {
        let sealed: Option<Vec<u8>> = self
            .conn()
            .query_row(
                "SELECT sealed FROM secrets WHERE package_id = ?1 AND name = ?2",
                params![package_id, name],
                |r| r.get(0),
            )
            .optional()
            .map_err(db_err)?;
        sealed
            .map(|s| self.keys.open_secret(package_id, name, &s))
            .transpose()
    }
}

#[async_trait]
impl ProviderResolver for SqliteStore {
    async fn resolve(
        &self,
        user_id: &str,
        channel_id: Option<&str>,
        package_id: &str,
        requirement: &ProviderRequirement,
    ) -> Result<Option<ResolvedProvider>, StoreError> {
        for (scope, source) in ProviderScope::chain(user_id, channel_id, package_id) {
            if let Some(config) = self.provider(&scope)? {
                return Ok(Some(ResolvedProvider::new(config, source, requirement)));
            }
        }
        Ok(None)
    }
}
