//! What every persistent store keeps, whatever the database: the rows
//! (packages, grants, providers) with the fields their MAC covers, the
//! rules that turn a verified row into what the host trusts, and the
//! records the operator's commands report. `sqlite*.rs` and `pg*.rs` only
//! move these rows in and out of their database, so the integrity rules
//! are one code on both backends: a row MACed by one verifies on the other
//! under the same key, and a row changed on either is refused alike.

use cordon_egress::IpRange;
use serde::{Deserialize, Serialize};

use super::rows::{Field, RowMac};
use super::seal::{Sealer, StoreKey};
use super::{ApiKey, ProviderConfig, StoreError};
use crate::grants::{check_private_targets, grant_status, Approval, Grant, GrantStatus};
use cordon_starlark_protocol::{Package, PackageStatus, Permission};

/// What the key check row seals: opening it proves the key is this
/// database's before anything is read or written.
pub(super) const KEY_CHECK: &[u8] = b"cordon store key check";

/// What an install did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallOutcome {
    /// A new package.
    Installed,
    /// The same package (manifest and sources) was installed already.
    Unchanged,
    /// A changed manifest or changed sources replaced the installed ones
    /// (`upgrade` was given).
    Upgraded,
}

/// An installed package, as `list`/`show` report it (no secret values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackageRecord {
    /// Package id.
    pub id: String,
    /// Version from the manifest.
    pub version: String,
    /// SHA-256 of its sources.
    pub source_hash: String,
    /// `active` or another status.
    pub status: PackageStatus,
    /// Permissions its manifest requests.
    pub requested: Vec<Permission>,
    /// Its `network_access` targets.
    pub network_access: Vec<String>,
    /// Permissions granted and not revoked, each with whether it still
    /// covers the manifest.
    pub grants: Vec<GrantRecord>,
    /// Names of its secrets (never their values).
    pub secrets: Vec<String>,
    /// When it was installed (Unix seconds).
    pub installed_at: i64,
    /// When its sources or status last changed.
    pub updated_at: i64,
}

/// Whose provider key a `set_provider` sets (the chain a call resolves:
/// user, then channel, then package, then host).
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
    pub(super) fn parts(&self) -> (&'static str, &str) {
        match self {
            ProviderScope::User(u) => ("user", u),
            ProviderScope::Channel(c) => ("channel", c),
            ProviderScope::Package(p) => ("package", p),
            ProviderScope::Host => ("host", ""),
        }
    }

    /// The chain a call resolves, in order, with what each link is.
    pub(super) fn chain(
        user: &str,
        channel: Option<&str>,
        package: &str,
    ) -> Vec<(ProviderScope, super::KeySource)> {
        use super::KeySource;
        let mut chain = vec![(ProviderScope::User(user.to_owned()), KeySource::User)];
        if let Some(c) = channel {
            chain.push((ProviderScope::Channel(c.to_owned()), KeySource::Channel));
        }
        chain.push((
            ProviderScope::Package(package.to_owned()),
            KeySource::Package,
        ));
        chain.push((ProviderScope::Host, KeySource::Host));
        chain
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

pub(super) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// One package row, every column.
pub(super) struct PackageRow {
    pub(super) id: String,
    pub(super) version: String,
    pub(super) source_hash: String,
    pub(super) status: String,
    pub(super) package: String,
    pub(super) installed_at: i64,
    pub(super) updated_at: i64,
    pub(super) mac: Option<Vec<u8>>,
}

impl PackageRow {
    fn fields(&self) -> [Field<'_>; 7] {
        [
            Field::Text(&self.id),
            Field::Text(&self.version),
            Field::Text(&self.source_hash),
            Field::Text(&self.status),
            Field::Text(&self.package),
            Field::Int(self.installed_at),
            Field::Int(self.updated_at),
        ]
    }
}

/// One grant row, every column.
pub(super) struct GrantRow {
    pub(super) package_id: String,
    pub(super) permission: String,
    pub(super) granted_by: String,
    pub(super) granted_at: i64,
    pub(super) revoked_by: Option<String>,
    pub(super) revoked_at: Option<i64>,
    pub(super) approval: Option<String>,
    pub(super) mac: Option<Vec<u8>>,
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

    /// This row revoked by `by`, now.
    pub(super) fn revoked(mut self, by: &str) -> GrantRow {
        self.revoked_by = Some(by.to_owned());
        self.revoked_at = Some(now());
        self
    }
}

/// The columns of a grant row, in [`GrantRow`]'s order.
pub(super) const GRANT_COLUMNS: &str =
    "package_id, permission, granted_by, granted_at, revoked_by, revoked_at, approval, mac";

/// One provider row, every column.
pub(super) struct ProviderRow {
    pub(super) scope: String,
    pub(super) scope_id: String,
    pub(super) base_url: String,
    pub(super) model: String,
    pub(super) sealed_key: Vec<u8>,
    pub(super) updated_at: i64,
    pub(super) mac: Option<Vec<u8>>,
}

impl ProviderRow {
    fn fields(&self) -> [Field<'_>; 6] {
        [
            Field::Text(&self.scope),
            Field::Text(&self.scope_id),
            Field::Text(&self.base_url),
            Field::Text(&self.model),
            Field::Bytes(&self.sealed_key),
            Field::Int(self.updated_at),
        ]
    }
}

fn secret_aad(package: &str, name: &str) -> String {
    format!("secret {package:?}/{name:?}")
}

fn provider_aad(scope: &str, id: &str) -> String {
    format!("provider key {scope}/{id:?}")
}

/// What an install does to the row it finds.
pub(super) enum InstallStep {
    /// Nothing: the same package is there.
    Unchanged,
    /// Write this row (a new package, or its replacement).
    Write(PackageRow, InstallOutcome),
}

/// The store key's two uses — sealing secrets, authenticating rows — and
/// every rule that reads or writes a row under them.
pub(super) struct Keys {
    pub(super) sealer: Sealer,
    mac: RowMac,
}

impl Keys {
    pub(super) fn new(key: &StoreKey) -> Keys {
        Keys {
            sealer: key.sealer(),
            mac: RowMac::new(key.row_mac_key()),
        }
    }

    /// Whether a sealed key check opens with this key.
    pub(super) fn opens_key_check(&self, sealed: &[u8]) -> bool {
        self.sealer.open("key check", sealed).is_ok()
    }

    pub(super) fn seal_key_check(&self) -> Result<Vec<u8>, StoreError> {
        self.sealer.seal("key check", KEY_CHECK)
    }

    /// The MAC of a package row.
    pub(super) fn package_mac(&self, row: &PackageRow) -> Vec<u8> {
        self.mac.mac("packages", &row.fields())
    }

    /// The package of a row whose MAC verifies, and whose contents agree
    /// with its columns.
    pub(super) fn verified_package(&self, row: &PackageRow) -> Result<Package, StoreError> {
        let id = &row.id;
        self.mac.check(
            "packages",
            &row.fields(),
            row.mac.as_deref(),
            &format!("package {id:?}'s row"),
            "install it again from a source you trust (cordon star install --upgrade PATH), \
             or remove the database",
        )?;
        let pkg: Package = serde_json::from_str(&row.package)
            .map_err(|e| format!("package {id:?} is unreadable: {e}"))?;
        if pkg.id != *id || pkg.script_hash() != row.source_hash {
            return Err(format!("package {id:?}'s row does not agree with itself"));
        }
        Ok(pkg)
    }

    /// What installing `pkg` over `old` (the row found, if any) does.
    /// Installing a changed manifest or changed sources over an installed
    /// package needs `upgrade`, as does replacing a row that was changed
    /// outside cordon; an upgrade keeps the first install's time.
    pub(super) fn install_step(
        &self,
        old: Option<&PackageRow>,
        pkg: &Package,
        upgrade: bool,
    ) -> Result<InstallStep, StoreError> {
        let t = now();
        let installed_at = match old {
            None => t,
            Some(row) => match self.verified_package(row) {
                Ok(same) if same == *pkg => return Ok(InstallStep::Unchanged),
                Ok(_) if !upgrade => {
                    return Err(format!(
                        "package {:?} is installed with another manifest or other sources; pass \
                         --upgrade to replace them",
                        pkg.id
                    ))
                }
                Err(e) if !upgrade => return Err(format!("{e} (with --upgrade)")),
                _ => row.installed_at,
            },
        };
        let status = serde_json::to_value(pkg.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut row = PackageRow {
            id: pkg.id.clone(),
            version: pkg.version.clone(),
            source_hash: pkg.script_hash(),
            status,
            package: serde_json::to_string(pkg).map_err(|e| format!("cannot encode: {e}"))?,
            installed_at,
            updated_at: t,
            mac: None,
        };
        row.mac = Some(self.package_mac(&row));
        let outcome = if old.is_some() {
            InstallOutcome::Upgraded
        } else {
            InstallOutcome::Installed
        };
        Ok(InstallStep::Write(row, outcome))
    }

    /// The package's record from its verified row, grant rows and secret
    /// names.
    pub(super) fn package_record(
        &self,
        row: PackageRow,
        grants: Vec<GrantRow>,
        secrets: Vec<String>,
    ) -> Result<PackageRecord, StoreError> {
        let pkg = self.verified_package(&row)?;
        let grants = self.grant_records(grants, &pkg)?;
        Ok(PackageRecord {
            id: row.id,
            version: row.version,
            source_hash: row.source_hash,
            status: pkg.status,
            requested: pkg.manifest.permissions.clone(),
            network_access: pkg.manifest.network_access.clone(),
            grants,
            secrets,
            installed_at: row.installed_at,
            updated_at: row.updated_at,
        })
    }

    /// A grant row with its MAC set.
    pub(super) fn sign_grant(&self, mut row: GrantRow) -> GrantRow {
        row.mac = Some(self.mac.mac("grants", &row.fields()));
        row
    }

    /// The grants of package `id` from its rows that are not revoked, each
    /// row verified: one changed outside cordon is an error, never skipped
    /// or trusted.
    pub(super) fn verified_grants(
        &self,
        id: &str,
        rows: Vec<GrantRow>,
    ) -> Result<Vec<(Grant, GrantRow)>, StoreError> {
        let mut out = Vec::new();
        for row in rows {
            let what = format!("the grant of {} to package {id:?}", row.permission);
            if row.package_id != id {
                return Err(format!("{what} is filed under {:?}", row.package_id));
            }
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
            if row.revoked_at.is_some() {
                continue;
            }
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

    /// [`Keys::verified_grants`]'s grants alone.
    pub(super) fn grants(&self, id: &str, rows: Vec<GrantRow>) -> Result<Vec<Grant>, StoreError> {
        Ok(self
            .verified_grants(id, rows)?
            .into_iter()
            .map(|(g, _)| g)
            .collect())
    }

    fn grant_records(
        &self,
        rows: Vec<GrantRow>,
        pkg: &Package,
    ) -> Result<Vec<GrantRecord>, StoreError> {
        self.verified_grants(&pkg.id, rows)?
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

    /// The signed rows that grant `permissions` to `pkg`, recording `by`
    /// and what each approves: the package's manifest as it is now, and,
    /// for `api.http`, the loopback, private or link-local ranges in
    /// `private` — which must hold every such address its targets name
    /// (an IP literal, `localhost`), since the manifest alone never
    /// approves one. A permission the manifest does not request is
    /// refused: granting it would approve a later version's request
    /// unseen. All or nothing: one refused permission grants none.
    pub(super) fn grant_rows(
        &self,
        pkg: &Package,
        permissions: &[Permission],
        by: &str,
        private: &[IpRange],
    ) -> Result<Vec<GrantRow>, StoreError> {
        let id = &pkg.id;
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
            rows.push(self.sign_grant(GrantRow {
                package_id: id.to_owned(),
                permission: permission.as_str().to_owned(),
                granted_by: by.to_owned(),
                granted_at: now(),
                revoked_by: None,
                revoked_at: None,
                approval: Some(serde_json::to_string(&stored).map_err(|e| e.to_string())?),
                mac: None,
            }));
        }
        Ok(rows)
    }

    /// A secret's value sealed to its row.
    pub(super) fn seal_secret(
        &self,
        package: &str,
        name: &str,
        value: &str,
    ) -> Result<Vec<u8>, StoreError> {
        if name.is_empty() {
            return Err("a secret needs a name".into());
        }
        self.sealer
            .seal(&secret_aad(package, name), value.as_bytes())
    }

    /// A sealed secret's value, if it opens for this row.
    pub(super) fn open_secret(
        &self,
        package: &str,
        name: &str,
        sealed: &[u8],
    ) -> Result<String, StoreError> {
        let plain = self.sealer.open(&secret_aad(package, name), sealed)?;
        String::from_utf8(plain).map_err(|_| "a secret is not text".to_owned())
    }

    /// The signed row of the provider for `scope` (its key sealed: its URL
    /// decides where the key is sent, so the row is MACed too).
    pub(super) fn provider_row(
        &self,
        scope: &ProviderScope,
        cfg: &ProviderConfig,
    ) -> Result<ProviderRow, StoreError> {
        let (kind, id) = scope.parts();
        if cfg.base_url.is_empty() || cfg.model.is_empty() {
            return Err("a provider needs a base URL and a model".into());
        }
        let sealed_key = self
            .sealer
            .seal(&provider_aad(kind, id), cfg.api_key.expose().as_bytes())?;
        let mut row = ProviderRow {
            scope: kind.to_owned(),
            scope_id: id.to_owned(),
            base_url: cfg.base_url.clone(),
            model: cfg.model.clone(),
            sealed_key,
            updated_at: now(),
            mac: None,
        };
        row.mac = Some(self.mac.mac("providers", &row.fields()));
        Ok(row)
    }

    /// The provider of a row whose MAC verifies, its key opened.
    pub(super) fn verified_provider(&self, row: ProviderRow) -> Result<ProviderConfig, StoreError> {
        let (kind, id) = (&row.scope, &row.scope_id);
        self.mac.check(
            "providers",
            &row.fields(),
            row.mac.as_deref(),
            &format!("the {kind} provider {id:?}"),
            "set it again (cordon star provider set …)",
        )?;
        let key = self.sealer.open(&provider_aad(kind, id), &row.sealed_key)?;
        let key = String::from_utf8(key).map_err(|_| "a provider key is not text".to_owned())?;
        Ok(ProviderConfig {
            base_url: row.base_url,
            api_key: ApiKey::new(key),
            model: row.model,
        })
    }
}
