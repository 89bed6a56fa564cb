//! What a [`SqliteStore`]'s packages are given: grants (each bound to the
//! manifest it approved, and authenticated), secrets (sealed to their row)
//! and providers (the key sealed, the row authenticated).

use async_trait::async_trait;
use cordon_egress::IpRange;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::rows::Field;
use super::sqlite::{db_err, now, SqliteStore};
use super::{
    ApiKey, KeySource, PermissionStore, ProviderConfig, ProviderResolver, ResolvedProvider,
    SecretStore, StoreError,
};
use cordon_starlark_protocol::{Package, Permission, ProviderRequirement};

use crate::grants::{check_private_targets, grant_status, Approval, Grant, GrantStatus};

/// Whose provider key a [`SqliteStore::set_provider`] sets (the chain a
/// call resolves: user, then channel, then package, then host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderScope {
    /// One user's own key.
    User(String),
    /// A channel's pinned key.
    Channel(String),
    /// A package's key.
    Package(String),
    /// The host's default.
    Host,
}

impl ProviderScope {
    fn parts(&self) -> (&'static str, &str) {
        match self {
            ProviderScope::User(u) => ("user", u),
            ProviderScope::Channel(c) => ("channel", c),
            ProviderScope::Package(p) => ("package", p),
            ProviderScope::Host => ("host", ""),
        }
    }
}

/// One grant, with who made it, when, what it approved and whether it
/// still covers the package's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrantRecord {
    /// The permission.
    pub permission: Permission,
    /// Who granted it.
    pub granted_by: String,
    /// When (Unix seconds).
    pub granted_at: i64,
    /// The `network_access` targets it approved.
    pub approved_targets: Vec<String>,
    /// The private ranges approved with it (`--allow-private`).
    pub private: Vec<String>,
    /// `active`, or `suspended` (then [`GrantRecord::suspended`] says why).
    pub status: &'static str,
    /// Why it is suspended, naming what is new and how to approve it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended: Option<String>,
}

/// A grant's `approval` column: the manifest it approved and the ranges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StoredApproval {
    #[serde(flatten)]
    approval: Approval,
    #[serde(default)]
    private: Vec<String>,
}

/// One grant row, every column.
struct GrantRow {
    package_id: String,
    permission: String,
    granted_by: String,
    granted_at: i64,
    revoked_by: Option<String>,
    revoked_at: Option<i64>,
    approval: Option<String>,
    mac: Option<Vec<u8>>,
}

impl GrantRow {
    fn fields(&self) -> [Field<'_>; 7] {
        [
            Field::Text(&self.package_id),
            Field::Text(&self.permission),
            Field::Text(&self.granted_by),
            Field::Int(self.granted_at),
            Field::OptText(self.revoked_by.as_deref()),
            Field::OptInt(self.revoked_at),
            Field::OptText(self.approval.as_deref()),
        ]
    }

    fn from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<GrantRow> {
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
}

const GRANT_COLUMNS: &str =
    "package_id, permission, granted_by, granted_at, revoked_by, revoked_at, approval, mac";

fn secret_aad(package: &str, name: &str) -> String {
    format!("secret {package:?}/{name:?}")
}

fn provider_aad(scope: &str, id: &str) -> String {
    format!("provider key {scope}/{id:?}")
}

impl SqliteStore {
    fn write_grant(&self, conn: &Connection, row: &GrantRow) -> Result<(), StoreError> {
        let mac = self.mac.mac("grants", &row.fields());
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
                mac
            ],
        )
        .map_err(db_err)?;
        Ok(())
    }

    /// The package's grants that are not revoked, each row verified: one
    /// changed outside cordon is an error, never skipped or trusted.
    fn grant_rows(
        &self,
        conn: &Connection,
        id: &str,
    ) -> Result<Vec<(Grant, GrantRow)>, StoreError> {
        let mut q = conn
            .prepare(&format!(
                "SELECT {GRANT_COLUMNS} FROM grants
                 WHERE package_id = ?1 AND revoked_at IS NULL ORDER BY permission"
            ))
            .map_err(db_err)?;
        let rows: Vec<GrantRow> = q
            .query_map(params![id], GrantRow::from_sql)
            .map_err(db_err)?
            .collect::<Result<_, _>>()
            .map_err(db_err)?;
        let mut out = Vec::new();
        for row in rows {
            let what = format!("the grant of {} to package {id:?}", row.permission);
            self.mac.check(
                "grants",
                &row.fields(),
                row.mac.as_deref(),
                &what,
                &format!(
                    "grant it again (cordon star grant {id} {}) or revoke it",
                    row.permission
                ),
            )?;
            let permission = Permission::parse(&row.permission)
                .ok_or_else(|| format!("{what}: unknown permission"))?;
            let stored: StoredApproval = row
                .approval
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| format!("{what} is unreadable: {e}"))?
                .ok_or_else(|| format!("{what} records no approval: grant it again"))?;
            let private = stored
                .private
                .iter()
                .map(|r| r.parse::<IpRange>().map_err(|e| format!("{what}: {e}")))
                .collect::<Result<_, _>>()?;
            out.push((
                Grant {
                    permission,
                    approval: Some(stored.approval),
                    private,
                },
                row,
            ));
        }
        Ok(out)
    }

    pub(super) fn grant_records(
        &self,
        conn: &Connection,
        pkg: &Package,
    ) -> Result<Vec<GrantRecord>, StoreError> {
        self.grant_rows(conn, &pkg.id)?
            .into_iter()
            .map(|(g, row)| {
                let status = grant_status(&g, &pkg.manifest)?;
                let suspended = match status {
                    GrantStatus::Active => None,
                    GrantStatus::Suspended { reason, .. } => Some(format!(
                        "{reason}; grant it again to approve it: cordon star grant {} {}",
                        pkg.id, g.permission
                    )),
                };
                Ok(GrantRecord {
                    permission: g.permission,
                    granted_by: row.granted_by,
                    granted_at: row.granted_at,
                    approved_targets: g.approval.map(|a| a.network_access).unwrap_or_default(),
                    private: g.private.iter().map(IpRange::to_string).collect(),
                    status: if suspended.is_some() {
                        "suspended"
                    } else {
                        "active"
                    },
                    suspended,
                })
            })
            .collect()
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
        if !private.is_empty() && !permissions.contains(&Permission::ApiHttp) {
            return Err("--allow-private approves addresses for api.http only".into());
        }
        let approval = Approval::of(&pkg.manifest).map_err(|e| format!("package {id:?}: {e}"))?;
        let mut rows = Vec::new();
        for &permission in permissions {
            if !pkg.manifest.requests(permission) {
                return Err(format!(
                    "package {id:?} does not request {permission} in its package.toml: there \
                     is nothing to grant (a grant now would approve a later version's request \
                     unseen)"
                ));
            }
            let mut ranges: Vec<String> = Vec::new();
            if permission == Permission::ApiHttp {
                check_private_targets(&pkg.manifest, private)
                    .map_err(|e| format!("package {id:?}: {e}"))?;
                ranges = private.iter().map(IpRange::to_string).collect();
                ranges.sort();
                ranges.dedup();
            }
            let stored = StoredApproval {
                approval: approval.clone(),
                private: ranges,
            };
            rows.push(GrantRow {
                package_id: id.to_owned(),
                permission: permission.as_str().to_owned(),
                granted_by: by.to_owned(),
                granted_at: now(),
                revoked_by: None,
                revoked_at: None,
                approval: Some(serde_json::to_string(&stored).map_err(|e| e.to_string())?),
                mac: None,
            });
        }
        for row in &rows {
            self.write_grant(&tx, row)?;
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
                GrantRow::from_sql,
            )
            .optional()
            .map_err(db_err)?;
        let Some(mut row) = row else {
            return Ok(false);
        };
        row.revoked_by = Some(by.to_owned());
        row.revoked_at = Some(now());
        self.write_grant(&conn, &row)?;
        Ok(true)
    }

    /// Sets a secret of an installed package (sealed).
    pub fn set_secret(&self, id: &str, name: &str, value: &str) -> Result<(), StoreError> {
        if name.is_empty() {
            return Err("a secret needs a name".into());
        }
        let sealed = self.sealer.seal(&secret_aad(id, name), value.as_bytes())?;
        let conn = self.conn();
        self.installed(&conn, id)?;
        conn.execute(
            "INSERT INTO secrets (package_id, name, sealed, updated_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (package_id, name) DO UPDATE SET sealed = ?3, updated_at = ?4",
            params![id, name, sealed, now()],
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
        let (kind, id) = scope.parts();
        if cfg.base_url.is_empty() || cfg.model.is_empty() {
            return Err("a provider needs a base URL and a model".into());
        }
        let sealed = self
            .sealer
            .seal(&provider_aad(kind, id), cfg.api_key.expose().as_bytes())?;
        let t = now();
        let mac = self.mac.mac(
            "providers",
            &provider_fields(kind, id, &cfg.base_url, &cfg.model, &sealed, t),
        );
        self.conn()
            .execute(
                "INSERT INTO providers (scope, scope_id, base_url, model, sealed_key, updated_at, mac)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (scope, scope_id) DO UPDATE SET
                   base_url = ?3, model = ?4, sealed_key = ?5, updated_at = ?6, mac = ?7",
                params![kind, id, cfg.base_url, cfg.model, sealed, t, mac],
            )
            .map_err(db_err)?;
        Ok(())
    }

    fn provider(&self, scope: &ProviderScope) -> Result<Option<ProviderConfig>, StoreError> {
        let (kind, id) = scope.parts();
        type Row = (String, String, Vec<u8>, i64, Option<Vec<u8>>);
        let row: Option<Row> = self
            .conn()
            .query_row(
                "SELECT base_url, model, sealed_key, updated_at, mac FROM providers
                 WHERE scope = ?1 AND scope_id = ?2",
                params![kind, id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .optional()
            .map_err(db_err)?;
        let Some((base_url, model, sealed, updated_at, mac)) = row else {
            return Ok(None);
        };
        self.mac.check(
            "providers",
            &provider_fields(kind, id, &base_url, &model, &sealed, updated_at),
            mac.as_deref(),
            &format!("the {kind} provider {id:?}"),
            "set it again (cordon star provider set …)",
        )?;
        let key = self.sealer.open(&provider_aad(kind, id), &sealed)?;
        let key = String::from_utf8(key).map_err(|_| "a provider key is not text".to_owned())?;
        Ok(Some(ProviderConfig {
            base_url,
            api_key: ApiKey::new(key),
            model,
        }))
    }
}

fn provider_fields<'a>(
    kind: &'a str,
    id: &'a str,
    base_url: &'a str,
    model: &'a str,
    sealed: &'a [u8],
    updated_at: i64,
) -> [Field<'a>; 6] {
    [
        Field::Text(kind),
        Field::Text(id),
        Field::Text(base_url),
        Field::Text(model),
        Field::Bytes(sealed),
        Field::Int(updated_at),
    ]
}

#[async_trait]
impl PermissionStore for SqliteStore {
    async fn grants_for_package(&self, package_id: &str) -> Result<Vec<Grant>, StoreError> {
        let conn = self.conn();
        Ok(self
            .grant_rows(&conn, package_id)?
            .into_iter()
            .map(|(g, _)| g)
            .collect())
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
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        let plain = self.sealer.open(&secret_aad(package_id, name), &sealed)?;
        String::from_utf8(plain)
            .map(Some)
            .map_err(|_| "a secret is not text".to_owned())
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
        let mut chain = vec![(ProviderScope::User(user_id.to_owned()), KeySource::User)];
        if let Some(c) = channel_id {
            chain.push((ProviderScope::Channel(c.to_owned()), KeySource::Channel));
        }
        chain.push((
            ProviderScope::Package(package_id.to_owned()),
            KeySource::Package,
        ));
        chain.push((ProviderScope::Host, KeySource::Host));
        for (scope, source) in chain {
            if let Some(mut config) = self.provider(&scope)? {
                if let Some(m) = &requirement.model {
                    config.model = m.clone();
                }
                return Ok(Some(ResolvedProvider { config, source }));
            }
        }
        Ok(None)
    }
}
