//! The hostile packages of `common/attacks.rs`, in process: the broker's
//! budget, the grant's binding and the one allowlist hold here as they do
//! for a worker.

use cordon_starlark::EvalLimits;

use crate::attacks::{self, Parts};
use crate::harness;

fn parts(h: &crate::Harness) -> Parts<'_> {
    Parts {
        host: &h.runner,
        perms: &h.perms,
        notifier: &h.notifier,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_flood_stops_at_the_budget() {
    let h = harness(EvalLimits::default());
    attacks::a_notification_flood_stops_at_the_budget(parts(&h)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_widens_the_allowlist_is_refused() {
    let h = harness(EvalLimits::default());
    attacks::an_upgrade_that_widens_the_allowlist_is_refused(parts(&h)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_in_a_private_range_needs_the_range_approved() {
    let h = harness(EvalLimits::default());
    attacks::a_name_in_a_private_range_needs_the_range_approved(parts(&h)).await;
}
