//! Hostile packages of issue 26, written once and run in process (the
//! `integration` binary) and in a sandboxed worker (`sandboxed`): a flood
//! of notifications, an upgrade that widens what a grant reaches, and a
//! name that resolves into a private range. The server is real, on
//! 127.0.0.1; "refused" is checked where it counts: it saw nothing.

use std::collections::BTreeMap;

use cordon_starlark::*;

use crate::server::start;
use crate::tiered::TieredHost;

/// The host under test and the stores it was built with.
pub struct Parts<'a> {
    pub host: &'a TieredHost,
    pub perms: &'a InMemoryPermissionStore,
    pub notifier: &'a RecordingNotifier,
}

fn pkg(id: &str, perms: &[Permission], network: &[String], src: &str) -> Package {
    let mut m = Manifest::minimal(id, "main.star");
    m.permissions = perms.to_vec();
    m.network_access = network.to_vec();
    Package::new(
        m,
        BTreeMap::from([("main.star".to_owned(), src.to_owned())]),
    )
}

async fn call(
    p: &Parts<'_>,
    pkg: &Package,
    args: Vec<serde_json::Value>,
) -> Result<CallOutcome, StarlarkHostError> {
    p.host
        .call_entry_point(pkg, "main", args, Default::default(), None)
        .await
}

fn bytes_of(n: &[Notification]) -> usize {
    n.iter()
        .map(|n| n.title.len() + n.body.len() + n.level.len())
        .sum()
}

/// The review's flood: 200 KB notifications in a loop. The package gets
/// a limit error naming the budget; the host kept at most the budget.
pub async fn a_notification_flood_stops_at_the_budget(p: Parts<'_>) {
    let before = p.notifier.sent().len();
    let flood = pkg(
        "flood",
        &[Permission::NotificationsSend],
        &[],
        "def main(size):\n    for i in range(100000):\n        notifications.send('t', 'x' * size)\n    return 1\n",
    );
    p.perms.grant(&flood.id, Permission::NotificationsSend);
    let limits = NotificationLimits::default();
    for (size, needle) in [
        (200_000, "EvalLimits::notifications.max_bytes)"),
        (10_000, "max_bytes_per_invocation"),
        (10, "max_per_invocation"),
    ] {
        let e = call(&p, &flood, vec![size.into()]).await.unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(needle) && msg.contains("limit"),
            "{size}: {msg}"
        );
        assert!(
            matches!(e, StarlarkHostError::Script { .. }),
            "{size}: {e:?}"
        );
    }
    let sent = p.notifier.sent();
    let new = &sent[before..];
    // 0 of 200 KB, 52 of 10 KB (512 KiB), 100 of 10 bytes.
    assert_eq!(new.len(), 52 + 100, "{}", new.len());
    assert!(bytes_of(&new[..52]) <= limits.max_bytes_per_invocation);
    assert!(new.iter().all(|n| n.package_id == "flood"));
    // The host's record of the call names the budget and its setting
    // (recorded by the host's broker: a worker cannot write it).
    let e = p
        .host
        .call_keeping_output(&flood, "main", vec![10.into()])
        .await
        .unwrap_err();
    let [d] = e.denials.denials.as_slice() else {
        panic!("{:?}", e.denials)
    };
    assert_eq!(
        (d.kind, d.count, &d.remedy),
        (
            cordon_core::explain::DenialKind::Limit,
            1,
            &cordon_core::explain::Remedy::RaiseLimit(
                "EvalLimits::notifications.max_per_invocation".into()
            )
        ),
        "{d:?}"
    );
}

/// v1 asks for `https://api.example.com`, the operator grants `api.http`
/// for that manifest; v2 (same id) asks for the host's loopback. The
/// grant does not stretch: the call is refused, naming the new target,
/// even though a range holding it is approved; granting v2 lets it run.
pub async fn an_upgrade_that_widens_the_allowlist_is_refused(p: Parts<'_>) {
    let srv = start().await;
    let main = "def main(u):\n    return http.get(u).status\n";
    let v1 = pkg(
        "up",
        &[Permission::ApiHttp],
        &["https://api.example.com".into()],
        main,
    );
    p.perms.grant_approving(&v1, Permission::ApiHttp).unwrap();
    p.perms.allow_private("up", "127.0.0.1/32".parse().unwrap());
    let target = format!("http://127.0.0.1:{}", srv.port);
    let mut v2 = pkg(
        "up",
        &[Permission::ApiHttp],
        std::slice::from_ref(&target),
        main,
    );
    v2.version = "2.0.0".into();
    let url = serde_json::json!(format!("{}/hello", srv.base()));
    let e = call(&p, &v2, vec![url.clone()]).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, StarlarkHostError::GrantSuspended { .. }),
        "{e:?}"
    );
    assert!(
        msg.contains(&target) && msg.contains("cordon star grant up api.http"),
        "{msg}"
    );
    assert_eq!(srv.hits(), 0, "the widened package reached the server");
    // v1 still runs under its grant (and its allowlist refuses the server).
    assert!(call(&p, &v1, vec![url.clone()]).await.is_err());
    assert_eq!(srv.hits(), 0);
    // A grant of v2 approves it.
    p.perms.grant_approving(&v2, Permission::ApiHttp).unwrap();
    assert_eq!(
        call(&p, &v2, vec![url]).await.unwrap().value,
        serde_json::json!(200)
    );
    assert_eq!(srv.hits(), 1);
}

/// A name other than `localhost` that /etc/hosts puts on loopback (the
/// corporate host of these tests: its server is on 127.0.0.1).
fn private_alias() -> String {
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    hosts
        .lines()
        .find_map(|l| {
            let mut words = l.split('#').next()?.split_whitespace();
            let ip: std::net::IpAddr = words.next()?.parse().ok()?;
            if !ip.is_loopback() {
                return None;
            }
            words.find(|w| *w != "localhost" && !w.contains(':')).map(str::to_owned)
        })
        .expect("no name other than localhost is on loopback in /etc/hosts; add one (127.0.1.1 cordon-test-alias)")
}

/// A package's name that resolves into a private range is refused with
/// advice that works, and reached once its grant approves the range (and
/// only that range).
pub async fn a_name_in_a_private_range_needs_the_range_approved(p: Parts<'_>) {
    let srv = start().await;
    let alias = private_alias();
    let id = format!("corp-{}", srv.port);
    let corp = pkg(
        &id,
        &[Permission::ApiHttp],
        &[format!("http://{alias}:{}", srv.port)],
        "def main(u):\n    return http.get(u).body\n",
    );
    p.perms.grant(&corp.id, Permission::ApiHttp);
    let url = serde_json::json!(format!("http://{alias}:{}/hello", srv.port));
    let e = call(&p, &corp, vec![url.clone()])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("{alias} resolves to 127.0.0.1"))
            && e.contains(&format!(
                "cordon star grant {id} api.http --allow-private 127.0.0.1/32"
            )),
        "{e}"
    );
    p.perms
        .allow_private(&corp.id, "10.0.0.0/8".parse().unwrap());
    assert!(
        call(&p, &corp, vec![url.clone()]).await.is_err(),
        "another range does not help"
    );
    assert_eq!(srv.hits(), 0);
    p.perms
        .allow_private(&corp.id, "127.0.0.0/8".parse().unwrap());
    assert_eq!(
        call(&p, &corp, vec![url]).await.unwrap().value,
        serde_json::json!("hello")
    );
    assert_eq!(srv.hits(), 1);
}
