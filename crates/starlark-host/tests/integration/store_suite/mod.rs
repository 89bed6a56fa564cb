//! The shared store test suite: every scenario of `scenarios.rs` runs
//! once against `SqliteStore` and once against `PgStore` on a throwaway
//! PostgreSQL cluster (one per test binary; PostgreSQL missing fails
//! these tests, never skips them); `postgres.rs` holds what only a server
//! shared by several hosts has to show.
#![cfg(feature = "postgres")]

#[macro_use]
mod backends;
mod postgres;
mod scenarios;

on_both_backends!(
    everything_survives_reopening_and_secrets_are_sealed,
    a_wrong_key_is_refused_before_anything_is_touched,
    rows_changed_outside_cordon_are_refused,
    an_upgrade_that_widens_the_reach_suspends_the_grant,
);
