//! Grants bound to what they approved: a [`Grant`] records the manifest
//! its operator saw ([`Approval`]: the permissions it requested, its
//! `network_access` targets) and the private ranges they allowed; a grant
//! whose package now reaches more is suspended until granted again.

use std::collections::BTreeSet;

use cordon_egress::{address_class, HostPattern, IpRange};
use serde::{Deserialize, Serialize};

use cordon_starlark_protocol::{Manifest, Permission};

/// What an operator approved when granting: the manifest as it was then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The permissions the manifest requested.
    pub requested: Vec<Permission>,
    /// Its `network_access` entries, in their canonical form (a
    /// `HostPattern` or a `RequestRule` as printed).
    pub network_access: Vec<String>,
}

impl Approval {
    /// The approval of `manifest` as it is now.
    pub fn of(manifest: &Manifest) -> Result<Approval, String> {
        let mut requested = manifest.permissions.clone();
        requested.sort();
        requested.dedup();
        // Targets and request rules each in canonical form: a rule that
        // changes, or goes, is a change the operator approves again.
        targets(manifest)?;
        let mut network_access = manifest
            .network_access
            .iter()
            .map(|raw| canonical_entry(raw.trim()))
            .collect::<Result<BTreeSet<_>, _>>()?;
        // The credentials too: one added, or sent elsewhere, is approved
        // again.
        for (name, hosts, header) in crate::credentials::bindings(manifest)? {
            let hosts: Vec<String> = hosts.iter().map(|(h, p)| format!("{h}:{p}")).collect();
            network_access.insert(format!(
                "credential {name} {header:?} to {}",
                hosts.join(",")
            ));
        }
        let network_access = network_access.into_iter().collect();
        Ok(Approval {
            requested,
            network_access,
        })
    }
}

/// One grant as the host checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The permission.
    pub permission: Permission,
    /// The manifest it approved; `None` approves whatever the package asks
    /// (an embedder's store that checks manifests itself, or a quick trial
    /// such as `cordon star run PATH --grant …`). A grant with an
    /// approval is suspended once the package reaches more.
    pub approval: Option<Approval>,
    /// Loopback, private or link-local ranges the operator approved for
    /// the package's `http` targets (`--allow-private`): a manifest alone
    /// never reaches such an address.
    pub private: Vec<IpRange>,
}

impl Grant {
    /// A grant of `permission` that approves whatever the package asks,
    /// with no private range.
    pub fn unbound(permission: Permission) -> Grant {
        Grant {
            permission,
            approval: None,
            private: Vec::new(),
        }
    }
}

/// Whether a grant still covers what the package asks now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum GrantStatus {
    /// It covers the manifest.
    Active,
    /// The manifest asks for more than was approved; the grant does
    /// nothing until the operator grants again.
    Suspended {
        /// Why, naming what is new.
        reason: String,
        /// `network_access` targets the grant did not approve.
        new_targets: Vec<String>,
    },
}

/// The manifest's `network_access` targets, parsed with the one grammar:
/// each entry a target, or a request rule (`METHODS SCHEME://HOST/PATH`,
/// told by its space), which allows its host for the requests it names.
pub(crate) fn targets(manifest: &Manifest) -> Result<Vec<HostPattern>, String> {
    manifest
        .network_access
        .iter()
        .map(|raw| {
            let raw = raw.trim();
            if raw.contains(' ') {
                raw.parse::<cordon_egress::RequestRule>()
                    .map(|r| r.host().clone())
                    .map_err(|e| format!("network_access: {e}"))
            } else {
                raw.parse::<HostPattern>()
                    .map_err(|e| format!("network_access: {e}"))
            }
        })
        .collect()
}

/// One `network_access` entry as printed: a rule's or a target's
/// canonical form.
fn canonical_entry(raw: &str) -> Result<String, String> {
    if raw.contains(' ') {
        raw.parse::<cordon_egress::RequestRule>()
            .map(|r| r.to_string())
            .map_err(|e| format!("network_access: {e}"))
    } else {
        raw.parse::<HostPattern>()
            .map(|h| h.to_string())
            .map_err(|e| format!("network_access: {e}"))
    }
}

/// The request rules among `network_access` (entries that are not
/// rules, or do not parse, are [`targets`]' to judge).
pub(crate) fn rules(network_access: &[String]) -> Vec<cordon_egress::RequestRule> {
    network_access
        .iter()
        .filter(|raw| raw.trim().contains(' '))
        .filter_map(|raw| raw.trim().parse().ok())
        .collect()
}

/// The status of `grant` against the package's current `manifest`.
pub fn grant_status(grant: &Grant, manifest: &Manifest) -> Result<GrantStatus, String> {
    let Some(approval) = &grant.approval else {
        return Ok(GrantStatus::Active);
    };
    if !approval.requested.contains(&grant.permission) {
        return Ok(GrantStatus::Suspended {
            reason: format!(
                "{} was granted while the package did not request it",
                grant.permission
            ),
            new_targets: Vec::new(),
        });
    }
    if grant.permission != Permission::ApiHttp {
        return Ok(GrantStatus::Active);
    }
    let now = Approval::of(manifest)?;
    // A request rule the operator approved that is gone: what it limited
    // is now reached without it.
    let dropped: Vec<&String> = approval
        .network_access
        .iter()
        .filter(|t| t.contains(' ') && !now.network_access.contains(t))
        .collect();
    if !dropped.is_empty() {
        return Ok(GrantStatus::Suspended {
            reason: format!(
                "the package dropped request rule(s) {}, which this grant approved as limits",
                dropped
                    .iter()
                    .map(|d| d.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            new_targets: Vec::new(),
        });
    }
    let new_targets: Vec<String> = now
        .network_access
        .into_iter()
        .filter(|t| !approval.network_access.contains(t))
        .collect();
    if new_targets.is_empty() {
        return Ok(GrantStatus::Active);
    }
    Ok(GrantStatus::Suspended {
        reason: format!(
            "the package now also reaches {}, which this grant did not approve",
            new_targets.join(", ")
        ),
        new_targets,
    })
}

/// Checks, at grant time, that `private` holds every address the
/// manifest's targets name that is not public (an IP literal, or
/// `localhost`): the operator approves those explicitly, never the
/// manifest alone. The error lists the `--allow-private` flags that would
/// do it.
pub fn check_private_targets(manifest: &Manifest, private: &[IpRange]) -> Result<(), String> {
    let mut missing: Vec<(String, IpAddrs)> = Vec::new();
    for t in targets(manifest)? {
        let addrs: IpAddrs = match t.ip_literal() {
            Some(ip) if address_class(ip).is_some() => vec![ip],
            Some(_) => continue,
            None if t.is_localhost() => vec![[127, 0, 0, 1].into()],
            None => continue,
        };
        let uncovered: IpAddrs = addrs
            .into_iter()
            .filter(|ip| !private.iter().any(|r| r.contains(*ip)))
            .collect();
        if !uncovered.is_empty() {
            missing.push((t.to_string(), uncovered));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|(t, _)| t.as_str()).collect();
    let flags: BTreeSet<String> = missing
        .iter()
        .flat_map(|(_, ips)| ips.iter())
        .map(|ip| format!("--allow-private {}", IpRange::single(*ip)))
        .collect();
    Err(format!(
        "network_access names {}, on a loopback, private or link-local address; a package \
         reaches one only when the operator approves it: grant with {}",
        names.join(", "),
        flags.into_iter().collect::<Vec<_>>().join(" ")
    ))
}

type IpAddrs = Vec<std::net::IpAddr>;

/// What one invocation of a package may use, once its grants are checked
/// against its manifest: the granted permissions that are active, and the
/// private ranges approved for `http`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Granted {
    pub(crate) permissions: BTreeSet<Permission>,
    pub(crate) private: Vec<IpRange>,
}

/// A grant the manifest outgrew: which permission, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Suspension {
    pub(crate) permission: Permission,
    pub(crate) reason: String,
}

/// Folds `grants` against `manifest`: the active grants of permissions the
/// manifest requests, or the first suspended one (a suspended grant stops
/// the package from running: it must not run with less than it expects,
/// nor with what nobody approved).
pub(crate) fn check_grants(
    grants: &[Grant],
    manifest: &Manifest,
) -> Result<Result<Granted, Suspension>, String> {
    let mut out = Granted::default();
    for g in grants {
        if !manifest.requests(g.permission) {
            continue;
        }
        match grant_status(g, manifest)? {
            GrantStatus::Active => {}
            GrantStatus::Suspended { reason, .. } => {
                return Ok(Err(Suspension {
                    permission: g.permission,
                    reason,
                }))
            }
        }
        out.permissions.insert(g.permission);
        if g.permission == Permission::ApiHttp {
            out.private.extend(g.private.iter().copied());
        }
    }
    out.private.sort_by_key(|r| r.to_string());
    out.private.dedup();
    Ok(Ok(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(access: &[&str]) -> Manifest {
        let mut m = Manifest::minimal("p", "main.star");
        m.permissions = vec![Permission::ApiHttp];
        m.network_access = access.iter().map(|s| s.to_string()).collect();
        m
    }

    /// A grant that approved a request rule is suspended when the rule
    /// widens, goes, or is replaced by its bare host: each would let the
    /// package reach more than the operator approved.
    #[test]
    fn a_changed_or_dropped_request_rule_suspends_the_grant() {
        let approved = manifest(&["GET https://api.x.example/public/*", "*.x.example"]);
        let grant = Grant {
            permission: Permission::ApiHttp,
            approval: Some(Approval::of(&approved).unwrap()),
            private: Vec::new(),
        };
        assert_eq!(
            grant_status(&grant, &approved).unwrap(),
            GrantStatus::Active
        );
        for later in [
            vec!["* https://api.x.example/**", "*.x.example"],
            vec!["https://api.x.example", "*.x.example"],
            vec!["*.x.example"],
        ] {
            let status = grant_status(&grant, &manifest(&later)).unwrap();
            assert!(
                matches!(status, GrantStatus::Suspended { .. }),
                "{later:?}: {status:?}"
            );
        }
    }
}
