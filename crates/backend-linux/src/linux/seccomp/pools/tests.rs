//! Unit tests of `pools.rs`: the inventory held to the filters' tables.
use super::super::{landlock_tier, pool_checks, Tables};
use super::*;

/// Calls only x86_64 has (the generic table dropped them): elsewhere
/// they are in no table, whatever an entry says.
const X86_64_ONLY: &[&str] = &[
    "fork",
    "vfork",
    "open",
    "creat",
    "dup2",
    "pipe",
    "eventfd",
    "signalfd",
    "epoll_create",
    "epoll_wait",
    "inotify_init",
    "getpgrp",
    "arch_prctl",
    "stat",
    "lstat",
    "access",
    "readlink",
    "mkdir",
    "rmdir",
    "unlink",
    "rename",
    "link",
    "symlink",
    "chown",
    "lchown",
    "chmod",
    "mknod",
    "utime",
    "utimes",
    "futimesat",
    "getdents",
    "poll",
    "select",
    "alarm",
    "pause",
    "time",
];

/// The field of [`HostPool`] that says how one filter holds a pool.
type Column = fn(&HostPool) -> Held;

/// Each column's filter, with the field of [`HostPool`] that says
/// how it holds a pool.
fn filters() -> Vec<(&'static str, Tables, Column)> {
    fn namespaces(p: &HostPool) -> Held {
        p.namespaces
    }
    fn egress(p: &HostPool) -> Held {
        p.egress
    }
    fn landlock(p: &HostPool) -> Held {
        p.landlock
    }
    fn own_network(p: &HostPool) -> Held {
        p.own_network
    }
    fn caller_uid(p: &HostPool) -> Held {
        p.landlock_caller_uid
    }
    vec![
        (
            "namespaces",
            Tables::namespaces(false),
            namespaces as Column,
        ),
        (
            "namespaces with egress",
            Tables::namespaces(true),
            egress as Column,
        ),
        (
            "namespaces with its own network",
            Tables::own_network(),
            own_network as Column,
        ),
        ("landlock", landlock_tier::tables(false), landlock as Column),
        (
            "landlock, caller's uid",
            landlock_tier::tables(true),
            caller_uid as Column,
        ),
    ]
}

fn on_this_arch(name: &str) -> bool {
    cfg!(target_arch = "x86_64") || !X86_64_ONLY.contains(&name)
}

/// Whether `name`, which `tables` hold as `held`, is held as `want`: a
/// pool refused by flag needs the flag's check in the table (or the call
/// refused whole, which holds it too).
fn holds(tables: &Tables, name: &str, held: Held, want: Held) -> bool {
    if want != Held::FlagRefused {
        return held == want;
    }
    let ours: Vec<_> = pool_checks()
        .into_iter()
        .filter(|c| c.sys.name() == name)
        .collect();
    held == Held::Refused
        || (ours.len() == 1
            && tables
                .checked
                .iter()
                .any(|c| c.sys.name() == name && c.allow == ours[0].allow))
}

#[test]
fn every_pool_is_held_as_its_entry_says() {
    let mut wrong = Vec::new();
    for (what, tables, column) in filters() {
        for p in HOST_POOLS {
            for name in p.syscalls.iter().filter(|n| on_this_arch(n)) {
                let held = held_by(&tables, name);
                if !holds(&tables, name, held, column(p)) {
                    wrong.push(format!(
                        "{name} ({}): {what} {held:?}, the inventory says {:?}",
                        p.pool,
                        column(p)
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_call_a_filter_lets_run_is_in_the_inventory() {
    let listed = |name: &str| {
        HOST_POOLS.iter().any(|p| p.syscalls.contains(&name))
            || NO_HOST_POOL.iter().any(|(_, n)| n.contains(&name))
    };
    let mut missing = std::collections::BTreeSet::new();
    for (what, tables, _) in filters() {
        let runs = tables
            .allowed
            .iter()
            .copied()
            .chain(tables.checked.iter().map(|c| c.sys));
        for s in runs.filter(|s| !listed(s.name())) {
            missing.insert(format!("{} ({what})", s.name()));
        }
    }
    assert!(
        missing.is_empty(),
        "calls a filter lets run that the inventory (pools.rs) does not classify: {missing:?}"
    );
}

#[test]
fn the_inventory_lists_no_call_twice_and_none_that_no_filter_runs() {
    let mut seen = std::collections::BTreeSet::new();
    let mut wrong = Vec::new();
    let all = filters();
    for (why, names) in NO_HOST_POOL {
        for name in *names {
            if !seen.insert(*name) {
                wrong.push(format!("{name} is listed twice"));
            }
            if HOST_POOLS.iter().any(|p| p.syscalls.contains(name)) {
                wrong.push(format!("{name} is in a pool and in `{why}`"));
            }
            let riscv = name.starts_with("riscv_");
            if on_this_arch(name)
                && !riscv
                && all.iter().all(|(_, t, _)| held_by(t, name) != Held::Runs)
            {
                wrong.push(format!("{name} (`{why}`) runs under no filter"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The test each entry names exists (a scenario's or a unit test's
/// `fn`, a `seccomp_programs` case, a test binary, or a test of the
/// egress crate's).
#[test]
fn every_named_test_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("tests");
    let mut sources = String::new();
    for d in [
        dir.clone(),
        dir.join("confinement"),
        root.join("src/linux/seccomp"),
        root.join("src/linux/seccomp/pools"),
        // The proxy's own tests (the egress crate, beside this one).
        root.join("../egress/src"),
        // The OCI runtime's, whose containers are the ones that join a
        // pod's network namespace (`Network::Namespace`).
        root.join("../oci/tests"),
    ] {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().extension() == Some(std::ffi::OsStr::new("rs")) {
                sources.push_str(&std::fs::read_to_string(e.path()).unwrap());
            }
        }
    }
    for p in HOST_POOLS {
        for (i, word) in p.test.split('`').enumerate() {
            if i % 2 == 0 || !word.chars().all(|c| c == '_' || c.is_ascii_lowercase()) {
                continue;
            }
            let found = sources.contains(&format!("fn {word}("))
                || sources.contains(&format!("\"{word}\""))
                || dir.join(format!("{word}.rs")).exists();
            assert!(found, "{}: no test `{word}` in tests/", p.pool);
        }
    }
}
