//! The hostile packages of `common/attacks.rs`, in a sandboxed worker:
//! the host's broker serves the worker's module calls, so the budget, the
//! grant's binding and the one allowlist hold exactly as in process.

use cordon_starlark::EvalLimits;

use crate::attacks::{self, Parts};
use crate::{env, serial, Env};

fn parts(e: &Env) -> Parts<'_> {
    Parts {
        host: &e.sandboxed,
        perms: &e.perms,
        notifier: &e.notifier,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_flood_stops_at_the_budget() {
    let _g = serial();
    let e = env(EvalLimits::default());
    attacks::a_notification_flood_stops_at_the_budget(parts(&e)).await;
    e.sandboxed.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_widens_the_allowlist_is_refused() {
    let _g = serial();
    let e = env(EvalLimits::default());
    attacks::an_upgrade_that_widens_the_allowlist_is_refused(parts(&e)).await;
    e.sandboxed.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_in_a_private_range_needs_the_range_approved() {
    let _g = serial();
    let e = env(EvalLimits::default());
    attacks::a_name_in_a_private_range_needs_the_range_approved(parts(&e)).await;
    e.sandboxed.shutdown().await;
}
